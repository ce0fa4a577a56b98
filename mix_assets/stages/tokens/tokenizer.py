"""The mix tokenizer: from the hub at a pinned revision, from a local tokenizer.json, or trained.

Training is byte-level BPE with `tokenizers` on a seeded sample of the kept TRAIN text only
(validation text never shapes the vocabulary). The sample is a pure function of (seed, doc ids),
fed in a fixed order, so the same inputs give a byte-identical tokenizer.json whatever the thread
count. Identity = kind, repo, revision, vocab size, special tokens, sha256 of every file.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from mix_assets.core import keys, layout, tables
from mix_assets.core.seeded import unit_hash
from mix_assets.core.transport import sha256_file
from mix_assets.stages.lines import lines as lines_lib

# Files taken from a hub repo besides tokenizer.json, when the repo has them.
HUB_EXTRA_FILES = ("tokenizer_config.json", "special_tokens_map.json")


class TokenizerError(ValueError):
    """A tokenizer that cannot be loaded, trained or used as configured."""


@dataclass
class TokenizerIdentity:
    kind: str  # hub | file | train
    repo_id: Optional[str]
    revision: Optional[str]
    vocab_size: int
    special_tokens: dict[str, int]
    files: dict[str, str] = field(default_factory=dict)  # path relative to the mix dir -> sha256

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "repo_id": self.repo_id,
            "revision": self.revision,
            "vocab_size": self.vocab_size,
            "special_tokens": dict(self.special_tokens),
            "files": dict(self.files),
        }


def special_tokens_of(tok: Tokenizer) -> dict[str, int]:
    return {
        t.content: int(i)
        for i, t in sorted(tok.get_added_tokens_decoder().items())
        if t.special
    }


def identity_of(kind: str, out_dir: str, repo_id: Optional[str] = None, revision: Optional[str] = None,
                rel_prefix: str = "tokenizer") -> TokenizerIdentity:
    """Identity of the tokenizer files in `out_dir` (paths recorded as `<rel_prefix>/<name>`)."""
    tok = Tokenizer.from_file(str(Path(out_dir) / "tokenizer.json"))
    files = {
        f"{rel_prefix}/{p.name}": sha256_file(p)
        for p in sorted(Path(out_dir).iterdir(), key=lambda p: p.name)
        if p.is_file() and not p.name.startswith(".")
    }
    return TokenizerIdentity(kind, repo_id, revision, tok.get_vocab_size(with_added_tokens=True),
                             special_tokens_of(tok), files)


# -- the three ways to get one ---------------------------------------------------------------
def fetch_hub(repo_id: str, revision: str, out_dir: str, cache_dir: Optional[str] = None) -> None:
    """Copy tokenizer.json (+ config files if present) of `repo_id@revision` into out_dir.

    Works offline when the files are in the huggingface_hub cache (HF_HUB_OFFLINE=1 or no network):
    a pinned commit sha resolves from the cache's snapshot directory without a request.
    """
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}

    def get(name: str) -> Optional[str]:
        try:
            return hf_hub_download(repo_id, name, revision=revision, cache_dir=cache_dir, local_files_only=offline)
        except (EntryNotFoundError, LocalEntryNotFoundError):
            if offline:
                return None
        # the hub was unreachable or said no: a pinned revision still resolves from the cache
        try:
            return hf_hub_download(repo_id, name, revision=revision, cache_dir=cache_dir, local_files_only=True)
        except (EntryNotFoundError, LocalEntryNotFoundError):
            return None

    main = get("tokenizer.json")
    if main is None:
        raise TokenizerError(
            f"hub tokenizer {repo_id}@{revision}: tokenizer.json is neither reachable nor in the "
            f"huggingface_hub cache ({cache_dir or 'HF_HUB_CACHE'})"
        )
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(main, Path(out_dir) / "tokenizer.json")
    for name in HUB_EXTRA_FILES:
        p = get(name)
        if p:
            shutil.copyfile(p, Path(out_dir) / name)


def copy_file(path: str, out_dir: str) -> None:
    if not Path(path).is_file():
        raise TokenizerError(f"{path}: tokenizer file not found")
    try:
        Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises a bare Exception on a bad file
        raise TokenizerError(f"{path}: not a loadable tokenizer.json ({e})") from None
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, Path(out_dir) / "tokenizer.json")


def training_sample(
    split_path: str,
    raw_paths: dict[str, str],
    shares: dict[str, float],
    sample_bytes: int,
    seed: int,
) -> Iterator[str]:
    """Texts of a seeded sample of kept TRAIN documents, ~share x sample_bytes per source.

    Per source, train documents are taken in the order of hash(seed, "tok", doc_id) until the
    source's byte quota is reached; texts are yielded source by source in that order.
    """
    chosen: dict[str, list] = {s: [] for s in raw_paths}  # per source: sorted (hash, doc_id, n_bytes)
    totals = dict.fromkeys(raw_paths, 0)
    quotas = {s: shares[s] * sample_bytes for s in raw_paths}
    # One pass over the split holding only each source's shortest prefix (in hash order) whose bytes
    # reach its quota: memory bounded by the sample, not by the corpus (issue 13 §3).
    for b in tables.iter_batches(split_path, ["doc_id", "source", "n_bytes", "split"], 8192):
        b = b.filter(pc.equal(b.column(3), "train"))
        for d, s, n in zip(*(b.column(i).to_pylist() for i in range(3))):
            if s not in chosen or quotas[s] <= 0:
                continue
            c, key = chosen[s], (unit_hash(seed, f"tok:{d}"), d)
            if totals[s] >= quotas[s] and key >= c[-1][:2]:
                continue
            bisect.insort(c, (*key, n))
            totals[s] += n
            while totals[s] - c[-1][2] >= quotas[s]:
                totals[s] -= c.pop()[2]
    def texts_of(source: str) -> list[Optional[str]]:
        rank = {d: k for k, (_, d, _) in enumerate(chosen[source])}
        want = pa.array(list(rank), pa.string())
        texts: list[Optional[str]] = [None] * len(rank)
        for batch in tables.iter_batches(raw_paths[source], ["doc_id", "text"], 4096):
            # only the sampled rows become Python strings (a few % of the text)
            sel = batch.filter(pc.is_in(batch.column(0).cast(pa.string()), value_set=want))
            for d, t in zip(sel.column(0).to_pylist(), sel.column(1).to_pylist()):
                texts[rank[d]] = t
        return texts

    # every source's file is read whole for its few sampled rows: two at a time (Parquet decoding and the
    # Arrow filter release the GIL), yielded in source order; what is held is the sample's text
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = [pool.submit(texts_of, s) for s in sorted(raw_paths) if chosen[s]]
        for job in jobs:
            yield from (t for t in job.result() if t)


def train_bpe(texts: Iterable[str], vocab_size: int, special_tokens: list[str], out_dir: str) -> None:
    """Byte-level BPE (GPT-2 style pre-tokenizer); special tokens get the first ids, in order."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    tok.save(str(Path(out_dir) / "tokenizer.json"), pretty=False)


def separator_id(tok: Tokenizer, separator: Optional[str]) -> Optional[int]:
    if separator is None:
        return None
    i = tok.token_to_id(separator)
    if i is None:
        raise TokenizerError(f"packing.separator {separator!r} is not a token of the tokenizer")
    return int(i)


def root_keys(spec) -> dict[str, str]:
    """The tokenizer's input keys from outside the root (core/keys.py): a fingerprint of the tokenizer file
    of kind `file`; a hub tokenizer is named by its repo id and revision (config), a trained one by its inputs."""
    ts = spec.tokenizer
    return {"tokenizer_file": keys.files_fingerprint([spec.resolve(ts.path)])} if ts.kind == "file" and ts.path else {}


def build_tokenizer(storage, spec) -> TokenizerIdentity:
    """Get the configured tokenizer into `mix/tokenizer/` and write its identity record."""
    ts = spec.tokenizer
    with tempfile.TemporaryDirectory(prefix="tokenizer_") as out:
        if ts.kind == "hub":
            fetch_hub(ts.repo_id, ts.revision, out)
        elif ts.kind == "file":
            copy_file(spec.resolve(ts.path), out)
        else:
            names = [s.name for s in spec.sources]
            raw = lines_lib.text_paths(storage, spec, names)  # line_dedup's text where it ran
            texts = training_sample(storage.source(layout.VALIDATION_SPLIT), raw,
                                    {s.name: s.share for s in spec.sources}, ts.train_sample_bytes, spec.seed)
            train_bpe(texts, ts.vocab_size, ts.special_tokens, out)
        ident = identity_of(ts.kind, out, ts.repo_id if ts.kind == "hub" else None,
                            ts.revision if ts.kind == "hub" else None)
        tok_dir = layout.TOKENIZER_FILE.rsplit("/", 1)[0]
        storage.delete(layout.MANIFEST)  # the old manifest would describe other tokenizer files
        storage.delete_prefix(tok_dir + "/")
        for p in sorted(Path(out).iterdir()):
            with storage.writing(f"{tok_dir}/{p.name}") as tmp:
                shutil.copyfile(p, tmp)
    storage.write_text(layout.TOKENIZER_IDENTITY, json.dumps(ident.to_json(), indent=1, sort_keys=True) + "\n")
    return ident
