"""tokenizer and token_shards: tokenise the kept documents once and pack them into shards."""

import json
import os
import time

import dagster as dg

from mix_assets.console import metadata as console_md
from mix_assets.stages.lines import lines as lines_lib
from mix_assets.stages.lines.assets import line_inputs
from mix_assets.stages.common import (code_version, gate, gated, raw_name, recorded, reused, run_lock, stored_check,
                                      verified_inputs, with_lineage)
from mix_assets.config import MixSpec
from mix_assets.core import layout, lineage
from mix_assets.stages.quality import tiers as quality_tiers
from mix_assets.stages.tokens import backends, exactness, reference_ids
from mix_assets.stages.tokens import samples as samples_lib
from mix_assets.stages.tokens import shards as shards_lib
from mix_assets.stages.tokens import tokenizer as tokenizer_lib
from mix_assets.stages.tokens.shards import build_token_shards
from mix_assets.stages.tokens.tokenizer import build_tokenizer
from mix_assets.stages.tokens import metadata as md
from mix_assets.resources import EngineResource, MixResource

GROUP = "tokens"
SEPARATOR_IN_VOCAB = "separator_in_vocab"
NO_EMPTY_SHARD = "no_empty_shard"
DROPPED_TAIL_AND_SEAM_RECORDED = "dropped_tail_and_seam_recorded"
TOKEN_IDS_MATCH_REFERENCE = "token_ids_match_reference"
TOKENIZER_KEY = dg.AssetKey("tokenizer")
TOKEN_SHARDS_KEY = dg.AssetKey("token_shards")


def _stats(mix: MixResource) -> dict:
    return json.loads(mix.storage.read_text(layout.SHARD_STATS))


def _tokenizer_inputs(spec: MixSpec) -> list[str]:
    # only a tokenizer trained on the kept train text is computed from the data
    return ["validation_split", *(raw_name(s.name) for s in spec.sources), *line_inputs(spec)] \
        if spec.tokenizer.kind == "train" else []


def _tier_inputs(spec: MixSpec) -> list[str]:
    # a source filled by quality tier reads its scores and tier cutoffs (stages/quality/tiers.py)
    return ["quality_scores"] if quality_tiers.tiered_sources(spec) else []


def build_tokens_assets(spec: MixSpec) -> list:
    tiered = quality_tiers.tiered_sources(spec)
    @dg.asset(
        name="tokenizer",
        group_name=GROUP,
        kinds={"json"},
        owners=spec.owners,
        code_version=code_version(__name__, spec.tokenizer, spec.seed, [s.share for s in spec.sources]),
        deps=[dg.AssetKey("validation_split")],
    )
    def tokenizer(context: dg.AssetExecutionContext, mix: MixResource) -> dg.MaterializeResult:
        """The mix tokenizer (hub at a pinned revision, a local file, or BPE trained on kept train text)."""
        with run_lock(context, mix.storage, "tokenizer"):  # no lease: it writes this run's checkout only
            inputs = verified_inputs(mix.storage, "tokenizer", _tokenizer_inputs(mix.spec), context)
            if hit := reused(context, mix, "tokenizer", inputs, roots=lambda: tokenizer_lib.root_keys(mix.spec)):
                return hit
            ident = build_tokenizer(mix.storage, mix.spec)
            lin = recorded(mix.storage, "tokenizer", [layout.TOKENIZER_FILE, layout.TOKENIZER_IDENTITY], inputs,
                           context)
        return with_lineage(md.tokenizer(mix.storage, layout.TOKENIZER_FILE, ident), lin)

    @dg.asset_check(asset=tokenizer, name=SEPARATOR_IN_VOCAB, blocking=True)
    @gated
    def separator_in_vocab(context: dg.AssetCheckExecutionContext, mix: MixResource) -> dg.AssetCheckResult:
        """packing.separator (when set) is one token of the tokenizer: checked before any shard work."""
        from tokenizers import Tokenizer

        verified_inputs(mix.storage, SEPARATOR_IN_VOCAB, ["tokenizer"], context)
        sep = mix.spec.packing.separator
        tok = Tokenizer.from_file(mix.storage.local_path(layout.TOKENIZER_FILE))
        try:
            sid = tokenizer_lib.separator_id(tok, sep)
        except tokenizer_lib.TokenizerError as e:
            return gate(context, TOKENIZER_KEY,
                        dg.AssetCheckResult(passed=False, description=str(e), metadata={"separator": sep}))
        return dg.AssetCheckResult(passed=True,
                                   metadata={"separator": sep or "", "separator_id": -1 if sid is None else sid})

    @dg.asset(
        name="token_shards",
        group_name=GROUP,
        kinds={"numpy"},
        owners=spec.owners,
        # the engine section is not in it: every engine writes the same bytes
        resource_defs={"engine": EngineResource.from_spec(spec)},
        code_version=code_version(__name__, spec.packing, spec.seed, spec.target_tokens,
                                  [(s.name, s.share, s.epochs) for s in spec.sources], spec.audit.scrub_words,
                                  [t.model_dump_json(exclude={"note"}) for t in spec.audit.tasks],  # note: free text
                                  *([{s: [t.model_dump(mode="json") for t in ts] for s, ts in tiered.items()}]
                                    if tiered else [])),
        deps=[dg.AssetKey("tokenizer"), dg.AssetKey("validation_split"), *map(dg.AssetKey, _tier_inputs(spec))],
    )
    def token_shards(context: dg.AssetExecutionContext, mix: MixResource,
                     engine: EngineResource) -> dg.MaterializeResult:
        """Train and val shards of fixed-length samples (raw little-endian token ids), budgets filled;
        ~30 of them read back and decoded as the trainer reads them (`rendered_samples`)."""
        with run_lock(context, mix.storage, "token_shards"):  # no lease: this run's checkout only
            s = mix.spec
            inputs = verified_inputs(mix.storage, "token_shards",
                                     ["tokenizer", "validation_split", *(raw_name(x.name) for x in s.sources),
                                      *line_inputs(s), *_tier_inputs(s)], context)
            if hit := reused(context, mix, "token_shards", inputs):
                return hit
            t0 = time.perf_counter()
            # tokenising runs as map tasks on the engine (in process or Ray); budget fill and packing here
            res = build_token_shards(mix.storage, s, scratch_dir=_scratch(s), eng=engine.engine, log=context.log)
            elapsed = time.perf_counter() - t0
            files = {layout.SHARD_STATS: mix.storage.sha256(layout.SHARD_STATS), **shards_lib.shard_files(_stats(mix))}
            # the draw is seeded by the spec seed and this build (shard_stats.json holds every shard's sha256)
            shown = samples_lib.rendered_samples(mix.storage, s, files[layout.SHARD_STATS])
            reviewed = [layout.RENDERED_SAMPLES, *(layout.STREAM_DOCS.format(split=sp) for sp in samples_lib.SPLITS)]
            lin = recorded(mix.storage, "token_shards", {**files, **{k: mix.storage.sha256(k) for k in reviewed}},
                           inputs, context, uses={"token_cache": res.cache_key} if res.cache_key else None)
        return with_lineage({**md.token_shards(mix.storage, layout.MIX_DIR, res, elapsed),
                             **md.rendered_samples(mix.storage, layout.RENDERED_SAMPLES, shown)}, lin)

    @dg.asset_check(asset=token_shards, name=NO_EMPTY_SHARD, blocking=True)
    @gated
    def no_empty_shard(context: dg.AssetCheckExecutionContext, mix: MixResource) -> dg.AssetCheckResult:
        """Both splits have shards, every shard holds >= 1 sample and its file has the recorded size."""
        verified_inputs(mix.storage, NO_EMPTY_SHARD, ["token_shards"], context)
        st = _stats(mix)
        problems = shards_lib.shard_problems(st, mix.storage.exists)
        shards = [sh for sp in st["splits"].values() for sh in sp["shards"]]
        return gate(context, TOKEN_SHARDS_KEY, dg.AssetCheckResult(
            passed=not problems,
            metadata={"train_shards": len(st["splits"]["train"]["shards"]),
                      "val_shards": len(st["splits"]["val"]["shards"]),
                      "min_shard_samples": min((sh["samples"] for sh in shards), default=0), **console_md.problems(problems)},
            description=f"{len(problems)} shard problem(s); first: {problems[0]}" if problems else None,
        ))

    @dg.asset_check(asset=token_shards, name=DROPPED_TAIL_AND_SEAM_RECORDED, blocking=True)
    @gated
    def dropped_tail_and_seam_recorded(context: dg.AssetCheckExecutionContext, mix: MixResource) -> dg.AssetCheckResult:
        """Per split: dropped tail < one sample, emitted = tokens + tail, seam rate = seam samples / samples."""
        verified_inputs(mix.storage, DROPPED_TAIL_AND_SEAM_RECORDED, ["token_shards"], context)
        st = _stats(mix)
        problems = shards_lib.tail_and_seam_problems(st)
        per_split = {}
        for split, sp in st["splits"].items():
            per_split |= {f"{split}_dropped_tail_tokens": sp["dropped_tail_tokens"], f"{split}_seam_samples":
                          sp["seam_samples"], f"{split}_seam_share": console_md.share(sp["seam_rate"])}
        return gate(context, TOKEN_SHARDS_KEY, dg.AssetCheckResult(
            passed=not problems, metadata={**per_split, **console_md.problems(problems)},
            description=f"{len(problems)} problem(s); first: {problems[0]}" if problems else None,
        ))

    @dg.asset_check(asset=token_shards, name=TOKEN_IDS_MATCH_REFERENCE, blocking=True)
    @gated
    def token_ids_match_reference(context: dg.AssetCheckExecutionContext, mix: MixResource) -> dg.AssetCheckResult:
        """The shards hold HF `tokenizers`' ids for a seeded sample of documents (>= 1 % and >= 1,000 per
        source, each source's longest), whichever encoder built them (stages/tokens/exactness.py)."""
        from tokenizers import Tokenizer

        st = mix.storage
        verified_inputs(st, TOKEN_IDS_MATCH_REFERENCE, ["token_shards"], context)

        def compute() -> dg.AssetCheckResult:
            names = [x.name for x in mix.spec.sources]
            tok = Tokenizer.from_file(st.local_path(layout.TOKENIZER_FILE))
            ref = reference_ids.ReferenceIds(st, st.sha256(layout.TOKENIZER_FILE), backends.HFEncoder(tok),
                                             context.run.run_id)
            rep = exactness.check(st, mix.spec.seed, tok, lines_lib.text_paths(st, mix.spec, names),  # what token_shards encoded
                                  reference=ref)
            context.log.info(f"{TOKEN_IDS_MATCH_REFERENCE}: HF ids of {ref.reused:,} sampled document(s) reused from "
                             f"the keyed store (same text, tokenizer file and code), {ref.encoded:,} encoded" if ref.reused
                             else f"{TOKEN_IDS_MATCH_REFERENCE}: HF ids of {ref.encoded:,} sampled document(s) encoded "
                                  "(none stored under this tokenizer file and code)")
            first = rep.first_mismatches()
            return dg.AssetCheckResult(
                passed=rep.passed, metadata=md.token_ids_match_reference(rep),
                description=None if rep.passed else (
                    f"{rep.mismatches:,} sampled document(s) whose ids in the shards are not HF's (first: "
                    f"{', '.join(first)}); build with tokenizer.backend: hf" if rep.mismatches else
                    "no document sampled"))

        def as_recorded() -> bool:  # another run may have rewritten the shards since token_shards' record
            rec = lineage.read_record(st, "token_shards") or {}
            outs = rec.get("outputs") or {}
            have = lineage.current_hashes(st, list(outs))
            return bool(outs) and all(have[k] == sha for k, sha in outs.items())

        # a pure function of the shards, the raw text and the tokenizer (token_shards' artifact key) and the seed,
        # so a reused token_shards re-emits it; which encoder built the bytes is read afresh (it is not in the key)
        got = stored_check(context, st, "token_shards", TOKEN_IDS_MATCH_REFERENCE,
                           code_version(__name__, mix.spec.seed), compute, present=as_recorded)
        backend, reason = _built_with(context)
        return gate(context, TOKEN_SHARDS_KEY, dg.AssetCheckResult(
            passed=got.passed, description=got.description, severity=got.severity,
            metadata={**got.metadata, **md.encoder_backend(backend, reason)}))

    return [tokenizer, separator_in_vocab, token_shards, no_empty_shard, dropped_tail_and_seam_recorded,
            token_ids_match_reference]


def _built_with(context) -> tuple[str, str]:
    """(encoder, fallback reason) of token_shards' latest materialisation (a reused one names the build that
    wrote the bytes); ("unknown", "") when the instance has none."""
    try:
        ev = context.instance.get_latest_materialization_event(TOKEN_SHARDS_KEY)
        m = ev.asset_materialization.metadata if ev and ev.asset_materialization else {}
    except Exception:  # noqa: BLE001 - metadata beside the result, never its cause
        m = {}
    val = lambda k: str(getattr(m.get(k), "value", m.get(k) or ""))  # noqa: E731
    return val("encoder_backend") or "unknown", val("encoder_fallback_reason")


def _scratch(spec: MixSpec) -> str:
    """Local scratch for the token spill (deleted when the asset finishes)."""
    d = spec.resolve(spec.storage.cache_dir)
    os.makedirs(d, exist_ok=True)
    return d
