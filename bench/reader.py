"""Random-access throughput of mix_assets.reader beside raw numpy.memmap reads of the same files, same run.

    .venv/bin/python bench/reader.py                      # builds a synthetic local mix in bench/out/
    .venv/bin/python bench/reader.py --mix build/published/mix

Both sides read the same storage samples, in the same random order, from the same shard files (page
cache warm, each side faulted in every page of its mappings before timing). The reader does all of its work inside the
timed loop (k -> permutation -> shard lookup -> memmap row copy); the raw sides get the (shard, row)
pairs precomputed, so they are the floor of any Python-level reader:

  raw_memmap   np.memmap(...)[row].copy()          (what "read it with numpy.memmap" usually means)
  raw_ndarray  the memmap viewed as ndarray, [row].copy()   (the cheaper raw variant)

Also timed: the reader's batched read (`samples(start, B)`, random order inside) against raw per-row
reads of the same rows. Each measurement is the median of --reps interleaved runs; ratio = reader / raw.
Target (issue 6): reader >= 0.8 x raw for local shards.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mix_assets.reader import open_mix
from mix_assets_tests.support.mixfactory import write_test_mix


def build_mix(out: Path, shards: int, samples_per_shard: int, seq_len: int) -> Path:
    root = out / f"bench_mix_{shards}x{samples_per_shard}x{seq_len}"
    if not (root / "manifest.json").exists():
        write_test_mix(root, train_shards=[samples_per_shard] * shards, val_shards=(8,), seq_len=seq_len,
                       vocab_size=32000, markov=False)
    return root


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mix", type=Path, default=None, help="an existing local mix dir (else a synthetic one)")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--samples-per-shard", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--reads", type=int, default=30_000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    a = ap.parse_args()

    root = a.mix or build_mix(a.out, a.shards, a.samples_per_shard, a.seq_len)
    cache = tempfile.mkdtemp(prefix="reader_bench_cache_")
    t_open = time.perf_counter()
    r = open_mix(root, cache_dir=cache, shuffle_seed=1234)
    t_open = time.perf_counter() - t_open
    m = r.manifest
    entries = m["splits"]["train"]["shards"]
    n, sl = len(r), r.sample_len
    total_bytes = sum(e["bytes"] for e in entries)

    # Raw side: the same files, opened directly.
    raw_mm = [np.memmap(Path(root, e["path"]), dtype=r.dtype, mode="r", shape=(e["samples"], sl)) for e in entries]
    raw_nd = [mm.view(np.ndarray) for mm in raw_mm]
    starts = np.cumsum([0] + [e["samples"] for e in entries])[:-1]

    # Warm the page cache and touch every shard on both sides (the reader verifies sha256 on first touch).
    for mm in raw_mm:
        np.asarray(mm).sum()
    t_verify = timed(lambda: [r.sample(next(k for k in range(n) if s <= r.storage_index(k) < s + e["samples"]))
                              for s, e in zip(starts.tolist(), entries)])
    for k in range(0, n, 1024):  # fault in every page of the reader's own mappings too
        r.samples(k, min(1024, n - k))

    rng = np.random.default_rng(0)
    ks = rng.integers(0, n, size=a.reads).tolist()
    gs = [r.storage_index(k) for k in ks]
    pairs = [(int(np.searchsorted(starts, g, "right") - 1), 0) for g in gs]
    pairs = [(s, g - int(starts[s])) for (s, _), g in zip(pairs, gs)]
    nb = a.reads // a.batch
    batch_starts = rng.integers(0, n - a.batch, size=nb).tolist()
    batch_pairs = []
    for b in batch_starts:
        for k in range(b, b + a.batch):
            g = r.storage_index(k)
            s = int(np.searchsorted(starts, g, "right") - 1)
            batch_pairs.append((s, g - int(starts[s])))

    # Sanity: both sides read the same bytes.
    for k, (s, o) in list(zip(ks, pairs))[:1000]:
        assert (r.sample(k) == raw_nd[s][o]).all()

    def reader_random():
        sample = r.sample
        for k in ks:
            sample(k)

    def raw_memmap_random():
        for s, o in pairs:
            raw_mm[s][o].copy()

    def raw_ndarray_random():
        for s, o in pairs:
            raw_nd[s][o].copy()

    def reader_batches():
        samples = r.samples
        for b in batch_starts:
            samples(b, a.batch)

    def raw_ndarray_batches():
        for s, o in batch_pairs:
            raw_nd[s][o].copy()

    fns = {"reader_random": reader_random, "raw_memmap_random": raw_memmap_random,
           "raw_ndarray_random": raw_ndarray_random, "reader_batches": reader_batches,
           "raw_ndarray_batches": raw_ndarray_batches}
    runs: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for rep in range(a.reps):  # interleaved, rotated each rep
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            runs[name].append(timed(fns[name]))
    med = {k: statistics.median(v) for k, v in runs.items()}
    rate = {k: (nb * a.batch if "batches" in k else a.reads) / med[k] for k in med}

    print(f"mix: {root}  train samples {n} x {sl} tokens ({r.dtype}), {len(entries)} shards, "
          f"{total_bytes / 1e6:.1f} MB; reads {a.reads}, batch {a.batch}, reps {a.reps} (median, interleaved)")
    print(f"open_mix (manifest check, sizes): {t_open * 1e3:.1f} ms; first touch of all shards incl. sha256: "
          f"{t_verify * 1e3:.1f} ms ({total_bytes / 1e6 / t_verify:.0f} MB/s)")
    print(f"{'measurement':<22}{'samples/s':>14}{'MB/s':>10}   runs (s)")
    for k in names:
        print(f"{k:<22}{rate[k]:>14,.0f}{rate[k] * sl * r.dtype.itemsize / 1e6:>10,.0f}   "
              + ", ".join(f"{x:.3f}" for x in runs[k]))
    strict = min(rate["raw_memmap_random"], rate["raw_ndarray_random"]) == rate["raw_memmap_random"]
    print(f"ratio reader_random / raw_memmap_random  = {rate['reader_random'] / rate['raw_memmap_random']:.2f}")
    print(f"ratio reader_random / raw_ndarray_random = {rate['reader_random'] / rate['raw_ndarray_random']:.2f}"
          f"{'' if strict else '  (the faster raw variant)'}")
    print(f"ratio reader_batches / raw_ndarray_batches = "
          f"{rate['reader_batches'] / rate['raw_ndarray_batches']:.2f}   (target >= 0.80)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
