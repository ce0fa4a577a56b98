"""Shards touched per global batch and bytes fetched into the cache, global permutation vs shard_window(K).

    .venv/bin/python bench/shuffle_locality.py            # synthetic mix in bench/out/, prints a markdown table

One pass of global batches (`batch(s, B)`) over an S3 location served by the tests' FakeS3Client (a local
directory behind the boto3 `get_object` surface; bytes are counted per GET, nothing is timed), with a cache
of `--cache-shards` shards. "touched" = distinct shards a global batch reads; "fetched" = shard bytes
downloaded into the cache over the pass, as a multiple of the split's size (1.0 = each shard once).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mix_assets.reader import open_mix
from mix_assets_tests.support.fakeremotes import FakeS3Client
from mix_assets_tests.support.mixfactory import write_test_mix


def one_pass(root: Path, cache: Path, window: int | None, batch: int, cache_shards: int, shard_bytes: int) -> dict:
    s3 = FakeS3Client("bucket", root.parent, prefix=root.name)
    r = open_mix(f"s3://bucket/{root.name}", cache_dir=cache, shuffle_seed=1234, shuffle_window=window,
                 cache_bytes=cache_shards * shard_bytes, s3_client=s3)
    touched = []
    for s in range(len(r) // batch):
        touched.append(len(r.shards_of(range(s * batch, (s + 1) * batch))))
        r.batch(s, batch)
    r.close()
    gets = sum(n for k, n in s3.gets.items() if k.endswith(".bin"))
    total = len(r.manifest["splits"]["train"]["shards"])
    return {"touched_mean": float(np.mean(touched)), "touched_max": max(touched), "gets": gets,
            "fetched_x": gets / total}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--samples-per-shard", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64, help="global batch (samples)")
    ap.add_argument("--windows", default="1,2,4,8", help="K values for shard_window")
    ap.add_argument("--cache-shards", default="4,16", help="cache budgets, in shards")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    a = ap.parse_args()
    root = a.out / f"locality_{a.shards}x{a.samples_per_shard}x{a.seq_len}" / "mix"
    if not (root / "manifest.json").exists():
        write_test_mix(root, train_shards=[a.samples_per_shard] * a.shards, val_shards=(8,), seq_len=a.seq_len,
                       vocab_size=32000, markov=False)
    shard_bytes = a.samples_per_shard * a.seq_len * 2
    print(f"{a.shards} shards x {a.samples_per_shard} samples x {a.seq_len} tokens (uint16, {shard_bytes} B/shard), "
          f"global batch {a.batch}, one pass of {a.shards * a.samples_per_shard // a.batch} batches\n")
    print("| scheme | shards touched / batch (mean, max) | " +
          " | ".join(f"fetched, cache {c} shards (GETs, x split)" for c in a.cache_shards.split(",")) + " |")
    print("|---|---|" + "---|" * len(a.cache_shards.split(",")))
    for window in [None, *(int(k) for k in a.windows.split(","))]:
        cells = []
        for c in (int(c) for c in a.cache_shards.split(",")):
            with tempfile.TemporaryDirectory(prefix="locality-") as cache:
                res = one_pass(root, Path(cache), window, a.batch, c, shard_bytes)
            cells.append(f"{res['gets']} ({res['fetched_x']:.2f}x)")
        name = "global" if window is None else f"shard_window K={window}"
        print(f"| {name} | {res['touched_mean']:.1f}, {res['touched_max']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
