"""Write small, valid mix directories (shards + manifest.json) for tests of the reader and the checker.

The tokens are a seeded first-order Markov chain over the vocabulary, so a bigram model has something to
learn. `all_tokens()` reads a split back without the reader (the ground truth tests compare against).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mix_assets.format import shards as shard_format
from mix_assets.format.manifest import FORMAT, INTERPRETATION_KEY, compute_fingerprint, file_entry, interpretation_sha256
from mix_assets_tests.support.review_files import REVIEW_PATHS, write_review_files


def _tokens(rng: np.random.Generator, n: int, vocab: int) -> np.ndarray:
    # Sparse transition table: each token has 4 likely successors -> bigram statistics are learnable.
    succ = rng.integers(0, vocab, size=(vocab, 4))
    choice = rng.integers(0, 4, size=n)
    noise = rng.random(n) < 0.1
    rand = rng.integers(0, vocab, size=n)
    out = np.empty(n, dtype=np.int64)
    t = int(rng.integers(0, vocab))
    for i in range(n):
        t = int(rand[i]) if noise[i] else int(succ[t, choice[i]])
        out[i] = t
    return out


def write_test_mix(
    root: str | Path,
    *,
    train_shards: Sequence[int] = (6, 6, 5),
    val_shards: Sequence[int] = (3,),
    seq_len: int = 16,
    samples_per_seq: int = 1,
    shifted_targets: bool = False,
    dtype: str | None = None,  # None: the format's dtype for vocab_size (format/shards.dtype_for_vocab)
    vocab_size: int = 97,
    seed: int = 0,
    sources: Sequence[str] = ("web", "books"),
    dropped_tail: tuple[int, int] = (7, 3),
    markov: bool = True,
    separator: str | None = None,
    wordless: dict[str, int] | None = None,
) -> dict:
    """Write a mix directory under `root`; return its manifest (also written to root/manifest.json).

    markov=False writes uniform random tokens (fast, for benchmarks). separator: recorded in the
    manifest and its config (id vocab_size - 1); the tokens are not changed. wordless: {source: k}, kept
    train documents without words in the dedup keys (`write_review_files`).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    sample_len = seq_len + 1 if shifted_targets else seq_len * samples_per_seq
    dtype = shard_format.dtype_for_vocab(vocab_size) if dtype is None else dtype
    splits: dict = {}
    shard_files: list[str] = []
    for split, counts, dropped in (("train", train_shards, dropped_tail[0]), ("val", val_shards, dropped_tail[1])):
        shards = []
        for i, n in enumerate(counts):
            rel = f"{split}/{split}-{i:05d}.bin"
            (root / split).mkdir(exist_ok=True)
            toks = _tokens(rng, n * sample_len, vocab_size) if markov else rng.integers(0, vocab_size, n * sample_len)
            (root / rel).write_bytes(shard_format.to_bytes(toks, dtype))
            e = file_entry(root, rel)
            shards.append({"path": rel, "samples": n, "bytes": e["bytes"], "sha256": e["sha256"]})
            shard_files.append(rel)
        samples = sum(counts)
        tokens = samples * sample_len
        emitted = tokens + dropped
        # Split the emitted tokens over the sources, the remainder to the first.
        per = {s: emitted // len(sources) for s in sources}
        per[sources[0]] += emitted - sum(per.values())
        splits[split] = {
            "samples": samples, "tokens": tokens, "emitted_tokens": emitted, "dropped_tail_tokens": dropped,
            "seam_rate": 0.25, "documents": max(1, samples // 2), "sources": per, "shards": shards,
        }
    (root / "tokenizer").mkdir(exist_ok=True)
    (root / "tokenizer/tokenizer.json").write_text(json.dumps({"test_vocab": vocab_size, "seed": seed}))
    packing = {"rule": "contiguous", "separator": separator,
               "separator_id": None if separator is None else vocab_size - 1, "seq_len": seq_len,
               "sample_len": sample_len, "shifted_targets": shifted_targets}
    rv = write_review_files(root, name="test_mix", seed=seed, splits=splits, packing=packing,
                            wordless=wordless)
    others = ["tokenizer/tokenizer.json", *REVIEW_PATHS]
    files = [file_entry(root, p) for p in shard_files + others]
    tok_sha = files[len(shard_files)]["sha256"]
    manifest = {
        "format": FORMAT,
        "name": "test_mix",
        "seed": seed,
        "config_sha256": rv["config_sha256"],
        "tokenizer": {"kind": "file", "repo_id": None, "revision": None, "vocab_size": vocab_size,
                      "special_tokens": {}, "files": {"tokenizer/tokenizer.json": tok_sha}},
        "packing": packing,
        "dtype": dtype,
        "splits": splits,
        "sources": rv["sources"],
        "totals": {
            "train_tokens": splits["train"]["tokens"], "val_tokens": splits["val"]["tokens"],
            "train_samples": splits["train"]["samples"], "val_samples": splits["val"]["samples"],
            "shards": len(train_shards) + len(val_shards),
            "dropped_tail_tokens": dropped_tail[0] + dropped_tail[1],
        },
        "review": rv["review"],
        "files": files,
        "fingerprint": compute_fingerprint(files),
    }
    manifest[INTERPRETATION_KEY] = interpretation_sha256(manifest)
    write_manifest(root, manifest)
    return manifest


def write_manifest(root: str | Path, manifest: dict) -> None:
    Path(root, "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")


def all_tokens(root: str | Path, manifest: dict, split: str = "train") -> np.ndarray:
    """Every sample of `split` in storage order, shape (samples, sample_len), read without the reader."""
    sl = manifest["packing"]["sample_len"]
    dt = np.dtype(manifest["dtype"]).newbyteorder("<")
    parts = [np.fromfile(Path(root, s["path"]), dtype=dt).reshape(-1, sl) for s in manifest["splits"][split]["shards"]]
    return np.concatenate(parts)
