"""A small mix directory in the manifest contract (mix_assets.manifest/1), built without the pipeline.

`build_synthetic_mix(dir, seed=...)` writes train/val shards of random tokens (format/shards.py's bytes, the
dtype for `vocab`), a tokenizer file, the four review files and a manifest.json whose sizes, sha256s, totals and fingerprint are computed
here from the bytes written. The fixture `synthetic_mix` gives a fresh one per test.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from mix_assets.format import shards as shard_format
from mix_assets.format.manifest import INTERPRETATION_KEY, interpretation_sha256
from mix_assets_tests.support.review_files import REVIEW_PATHS, write_review_files


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def build_synthetic_mix(mix_dir: Path, *, seed: int = 0, seq_len: int = 16, vocab: int = 500,
                        train_shards: tuple[int, ...] = (5, 4, 3), val_shards: tuple[int, ...] = (2,),
                        budgets: dict[str, int] | None = None) -> dict:
    """Write a mix under `mix_dir`; returns the manifest (also written as manifest.json).

    budgets: the config's per-source train budgets (default: this mix's own, so it is consistent)."""
    mix_dir = Path(mix_dir)
    rng = np.random.default_rng(seed)
    dtype = shard_format.dtype_for_vocab(vocab)  # the token stage's rule
    sources = {"web": 0.7, "math": 0.3}
    splits, files = {}, []
    for split, counts in (("train", train_shards), ("val", val_shards)):
        shards = []
        for i, n in enumerate(counts):
            rel = f"{split}/{split}-{i:05d}.bin"
            p = mix_dir / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(shard_format.to_bytes(rng.integers(0, vocab, size=n * seq_len, dtype=np.uint16), dtype))
            shards.append({"path": rel, "samples": n, "bytes": p.stat().st_size, "sha256": _sha(p)})
            files.append({"path": rel, "bytes": p.stat().st_size, "sha256": _sha(p)})
        samples = sum(counts)
        tokens = samples * seq_len
        web = int(tokens * sources["web"])
        splits[split] = {
            "samples": samples, "tokens": tokens, "emitted_tokens": tokens + 7, "dropped_tail_tokens": 7,
            "seam_rate": 0.25, "documents": samples * 2, "sources": {"web": web + 7, "math": tokens - web},
            "shards": shards,
        }
    tok = mix_dir / "tokenizer" / "tokenizer.json"
    tok.parent.mkdir(parents=True, exist_ok=True)
    tok.write_text(json.dumps({"version": "1.0", "model": {"type": "WordLevel", "seed": seed,
                                                           "vocab": {f"t{i}": i for i in range(8)}}}))
    packing = {"rule": "contiguous", "separator": None, "separator_id": None, "seq_len": seq_len,
               "sample_len": seq_len, "shifted_targets": False}
    rv = write_review_files(mix_dir, name="synthetic", seed=seed, splits=splits, packing=packing, budgets=budgets)
    for rel in ["tokenizer/tokenizer.json", *REVIEW_PATHS]:
        p = mix_dir / rel
        files.append({"path": rel, "bytes": p.stat().st_size, "sha256": _sha(p)})
    tr, va = splits["train"], splits["val"]
    manifest = {
        "format": "mix_assets.manifest/1", "name": "synthetic", "seed": seed, "config_sha256": rv["config_sha256"],
        "tokenizer": {"kind": "file", "repo_id": None, "revision": None, "vocab_size": vocab,
                      "special_tokens": {"<|endoftext|>": 0},
                      "files": {"tokenizer/tokenizer.json": _sha(tok)}},
        "packing": packing,
        "dtype": dtype,
        "splits": splits,
        "sources": rv["sources"],
        "totals": {"train_tokens": tr["tokens"], "val_tokens": va["tokens"], "train_samples": tr["samples"],
                   "val_samples": va["samples"], "shards": len(train_shards) + len(val_shards),
                   "dropped_tail_tokens": tr["dropped_tail_tokens"] + va["dropped_tail_tokens"]},
        "review": rv["review"],
        "files": files,
        "fingerprint": hashlib.sha256("".join(f["sha256"] for f in files).encode()).hexdigest(),
    }
    manifest[INTERPRETATION_KEY] = interpretation_sha256(manifest)
    (mix_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


@pytest.fixture
def synthetic_mix(tmp_path) -> Path:
    """A fresh synthetic mix directory (seed 0)."""
    d = tmp_path / "mix"
    build_synthetic_mix(d)
    return d
