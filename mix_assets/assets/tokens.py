"""tokenizer and token_shards: tokenise the kept documents once and pack them into shards."""

import json
import time

import dagster as dg

from mix_assets.assets.common import code_version, raw_name, recorded, verified_inputs, with_lineage
from mix_assets.config import MixSpec
from mix_assets.lib import layout
from mix_assets.lib import packing as packing_lib
from mix_assets.lib import shards as shards_lib
from mix_assets.lib import tokenizer as tokenizer_lib
from mix_assets.lib.shards import build_token_shards
from mix_assets.lib.tokenizer import build_tokenizer
from mix_assets.resources import MixResource

GROUP = "tokens"
SEPARATOR_IN_VOCAB = "separator_in_vocab"
NO_EMPTY_SHARD = "no_empty_shard"
DROPPED_TAIL_AND_SEAM_RECORDED = "dropped_tail_and_seam_recorded"


def _stats(mix: MixResource) -> dict:
    return json.loads(mix.storage.read_text(layout.SHARD_STATS))


def _shard_files(stats: dict) -> dict[str, str]:
    """shard_stats.json's shards as storage keys with their sha256 (hashed as they were written)."""
    return {f"{layout.MIX_DIR}/{sh['path']}": sh["sha256"]
            for sp in stats["splits"].values() for sh in sp["shards"]}


def _tokenizer_inputs(spec: MixSpec) -> list[str]:
    # only a tokenizer trained on the kept train text is computed from the data
    return ["validation_split", *(raw_name(s.name) for s in spec.sources)] if spec.tokenizer.kind == "train" else []


def build_tokens_assets(spec: MixSpec) -> list:
    @dg.asset(
        name="tokenizer",
        group_name=GROUP,
        kinds={"json"},
        owners=spec.owners,
        code_version=code_version(tokenizer_lib, spec.tokenizer, spec.seed, [s.share for s in spec.sources]),
        deps=[dg.AssetKey("validation_split")],
    )
    def tokenizer(context: dg.AssetExecutionContext, mix: MixResource) -> dg.MaterializeResult:
        """The mix tokenizer (hub at a pinned revision, a local file, or BPE trained on kept train text)."""
        inputs = verified_inputs(mix.storage, "tokenizer", _tokenizer_inputs(mix.spec))
        ident = build_tokenizer(mix.storage, mix.spec)
        lin = recorded(mix.storage, "tokenizer", [layout.TOKENIZER_FILE, layout.TOKENIZER_IDENTITY], inputs)
        return with_lineage(
            {
                "path": dg.MetadataValue.path(mix.storage.uri(layout.TOKENIZER_FILE)),
                "kind": ident.kind,
                "repo_id": ident.repo_id or "",
                "revision": ident.revision or "",
                "vocab_size": ident.vocab_size,
                "special_tokens": dg.MetadataValue.json(ident.special_tokens),
                "files": dg.MetadataValue.json(ident.files),
            },
            lin,
        )

    @dg.asset_check(asset=tokenizer, name=SEPARATOR_IN_VOCAB, blocking=True)
    def separator_in_vocab(mix: MixResource) -> dg.AssetCheckResult:
        """packing.separator (when set) is one token of the tokenizer: checked before any shard work."""
        from tokenizers import Tokenizer

        verified_inputs(mix.storage, SEPARATOR_IN_VOCAB, ["tokenizer"])
        sep = mix.spec.packing.separator
        tok = Tokenizer.from_file(mix.storage.local_path(layout.TOKENIZER_FILE))
        try:
            sid = tokenizer_lib.separator_id(tok, sep)
        except tokenizer_lib.TokenizerError as e:
            return dg.AssetCheckResult(passed=False, description=str(e), metadata={"separator": sep})
        return dg.AssetCheckResult(passed=True,
                                   metadata={"separator": sep or "", "separator_id": -1 if sid is None else sid})

    @dg.asset(
        name="token_shards",
        group_name=GROUP,
        kinds={"numpy"},
        owners=spec.owners,
        code_version=code_version(shards_lib, packing_lib, spec.packing, spec.seed, spec.target_tokens,
                                  [(s.name, s.share, s.epochs) for s in spec.sources]),
        deps=[dg.AssetKey("tokenizer"), dg.AssetKey("validation_split")],
    )
    def token_shards(context: dg.AssetExecutionContext, mix: MixResource) -> dg.MaterializeResult:
        """Train and val shards of fixed-length samples (raw little-endian token ids), budgets filled."""
        s = mix.spec
        inputs = verified_inputs(mix.storage, "token_shards",
                                 ["tokenizer", "validation_split", *(raw_name(x.name) for x in s.sources)])
        t0 = time.perf_counter()
        res = build_token_shards(mix.storage, s, scratch_dir=_scratch(s))
        secs = time.perf_counter() - t0
        lin = recorded(mix.storage, "token_shards",
                       {layout.SHARD_STATS: mix.storage.sha256(layout.SHARD_STATS), **_shard_files(_stats(mix))},
                       inputs)
        tr, va = res.splits["train"], res.splits["val"]
        return with_lineage(
            {
                "path": dg.MetadataValue.path(mix.storage.uri(layout.MIX_DIR)),
                "dtype": res.dtype,
                "train_tokens": tr.tokens,
                "val_tokens": va.tokens,
                "train_samples": tr.samples,
                "val_samples": va.samples,
                "n_shards": len(tr.shards) + len(va.shards),
                "dropped_tail_tokens": tr.dropped_tail_tokens + va.dropped_tail_tokens,
                "train_seam_rate": tr.seam_rate,
                "val_seam_rate": va.seam_rate,
                "encoded_mb": res.encoded_bytes / 1e6,
                "encode_mb_per_s": res.encoded_bytes / 1e6 / secs if secs else 0.0,
                "sources": dg.MetadataValue.json(res.to_json()["sources"]),
            },
            lin,
        )

    @dg.asset_check(asset=token_shards, name=NO_EMPTY_SHARD, blocking=True)
    def no_empty_shard(mix: MixResource) -> dg.AssetCheckResult:
        """Both splits have shards, every shard holds >= 1 sample and its file has the recorded size."""
        verified_inputs(mix.storage, NO_EMPTY_SHARD, ["token_shards"])
        st = _stats(mix)
        isz = 2 if st["dtype"] == "uint16" else 4
        L = st["packing"]["sample_len"]
        problems = []
        for split in ("train", "val"):
            shards = st["splits"][split]["shards"]
            if not shards:
                problems.append(f"{split}: no shard (0 samples)")
            for sh in shards:
                key = f"{layout.MIX_DIR}/{sh['path']}"
                if sh["samples"] < 1:
                    problems.append(f"{sh['path']}: empty shard")
                elif not mix.storage.exists(key):
                    problems.append(f"{sh['path']}: missing")
                elif sh["bytes"] != sh["samples"] * L * isz:
                    problems.append(f"{sh['path']}: {sh['bytes']} bytes for {sh['samples']} samples")
        return dg.AssetCheckResult(
            passed=not problems,
            metadata={
                "train_shards": len(st["splits"]["train"]["shards"]),
                "val_shards": len(st["splits"]["val"]["shards"]),
                "min_shard_samples": min((sh["samples"] for sp in st["splits"].values() for sh in sp["shards"]),
                                         default=0),
                "problems": dg.MetadataValue.json(problems[:20]),
            },
        )

    @dg.asset_check(asset=token_shards, name=DROPPED_TAIL_AND_SEAM_RECORDED, blocking=True)
    def dropped_tail_and_seam_recorded(mix: MixResource) -> dg.AssetCheckResult:
        """Per split: dropped tail < one sample, emitted = tokens + tail, seam rate = seam samples / samples."""
        verified_inputs(mix.storage, DROPPED_TAIL_AND_SEAM_RECORDED, ["token_shards"])
        st = _stats(mix)
        L = st["packing"]["sample_len"]
        problems, meta = [], {}
        for split in ("train", "val"):
            sp = st["splits"][split]
            if not 0 <= sp["dropped_tail_tokens"] < L:
                problems.append(f"{split}: dropped tail {sp['dropped_tail_tokens']} not in [0, {L})")
            if sp["emitted_tokens"] != sp["tokens"] + sp["dropped_tail_tokens"]:
                problems.append(f"{split}: emitted {sp['emitted_tokens']} != tokens + dropped tail")
            want = sp["seam_samples"] / sp["samples"] if sp["samples"] else 0.0
            if not (0.0 <= sp["seam_rate"] <= 1.0 and abs(sp["seam_rate"] - want) < 1e-12):
                problems.append(f"{split}: seam_rate {sp['seam_rate']} != {sp['seam_samples']}/{sp['samples']}")
            meta[f"{split}_dropped_tail_tokens"] = sp["dropped_tail_tokens"]
            meta[f"{split}_seam_rate"] = sp["seam_rate"]
            meta[f"{split}_seam_samples"] = sp["seam_samples"]
        return dg.AssetCheckResult(passed=not problems, metadata={**meta, "problems": dg.MetadataValue.json(problems)})

    return [tokenizer, separator_in_vocab, token_shards, no_empty_shard, dropped_tail_and_seam_recorded]


def _scratch(spec: MixSpec) -> str:
    """Local scratch for the token spill (deleted when the asset finishes)."""
    import os

    d = spec.resolve(spec.storage.cache_dir)
    os.makedirs(d, exist_ok=True)
    return d
