"""`val_disjoint_from_train`'s near-dup scan (stages/split/split.cross_split_near_dups) alone, on generated prose.

    .venv/bin/python bench/disjoint.py --mb 25 100 [--folder /tmp/disjoint-bench] [--val 0.02] [--sign-here]

Corpus: ../mix_assets_tests/support/gen_corpus.generate_bytes (order-2 Markov prose over the shared books, 10 % planted
near-copies at true Jaccard 0.80-0.85), spread over 3 sources as raw parquet files (doc_id, source,
text, n_bytes), cached per size in --folder. Split: each document its own cluster, val when
hash(seed, doc_id) < --val, so planted pairs straddle the split as often as chance allows (the scan
has cross-split hits to find). Each size is measured in a fresh subprocess: seconds of the scan and
the process's peak RSS (ru_maxrss), printed with the scan's numbers.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SOURCES = ["a", "b", "c"]


def build(folder: Path, mb: int, val: float) -> Path:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mix_assets_tests.support import gen_corpus as gc
    from mix_assets.stages.split.split import assign_split
    from mix_assets_tests.support.shared_data import FIXTURE, find_shared_data

    out = folder / f"{mb}mb"
    if (out / "split.parquet").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    data = find_shared_data() or FIXTURE
    books = sorted(p for n in ("gutenberg", "sherlock_holmes", "botchan", "nltk_state_union")
                   for p in (data / "sources" / n).glob("*.txt"))
    corpus = gc.generate_bytes(gc.MarkovModel.from_files(books, order=2), mb * 1_000_000, seed=mb)
    which = np.random.default_rng(mb).integers(0, len(SOURCES), len(corpus.texts))
    rows = []
    for k, s in enumerate(SOURCES):
        idx = np.flatnonzero(which == k)
        ids = [f"{s}-{i:08d}" for i in idx]
        texts = [corpus.texts[i] for i in idx]
        pq.write_table(pa.table({"doc_id": ids, "source": [s] * len(ids), "text": texts,
                                 "n_bytes": [len(t.encode()) for t in texts]}), out / f"{s}.parquet",
                       row_group_size=4096)
        rows += [(d, s) for d in ids]
    kept = pa.table({"doc_id": [d for d, _ in rows], "source": [s for _, s in rows],
                     "cluster_id": [d for d, _ in rows], "exact_key": [d for d, _ in rows],
                     "n_bytes": [0] * len(rows)})
    pq.write_table(assign_split(kept, 7, val), out / "split.parquet")
    return out


def sign(out: Path) -> float:
    """Signature files of the sources under out/signatures (what dedup_keys' map stores); seconds taken."""
    from mix_assets.stages.split.split import sign_raw

    (out / "signatures").mkdir(exist_ok=True)
    t = time.perf_counter()
    for s in SOURCES:
        sign_raw(str(out / f"{s}.parquet"), str(out / "signatures" / f"{s}.parquet.tmp"), 128, 5, 1)
        (out / "signatures" / f"{s}.parquet.tmp").rename(out / "signatures" / f"{s}.parquet")
    return time.perf_counter() - t


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(out: Path, sign_here: bool) -> dict:
    import os

    import pyarrow.parquet as pq

    from mix_assets.stages.split.split import cross_split_near_dups

    split = pq.read_table(out / "split.parquet")
    sigs = None if sign_here else {s: str(out / "signatures" / f"{s}.parquet") for s in SOURCES}
    load = os.getloadavg()[0]
    t, c = time.perf_counter(), _cpu()
    scan = cross_split_near_dups(split, {s: str(out / f"{s}.parquet") for s in SOURCES}, 0.8, 5, signatures=sigs)
    secs, cpu = time.perf_counter() - t, _cpu() - c
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"secs": round(secs, 2), "cpu_secs": round(cpu, 2), "load_before": round(load, 1),
            "load_after": round(os.getloadavg()[0], 1), "peak_rss_mb": round(rss),
            "val_docs": scan.val_docs, "train_docs": scan.train_docs,
            "val_docs_with_train_near_dup": scan.val_docs_with_train_near_dup,
            "max_jaccard": scan.max_jaccard, "pairs_compared": scan.pairs_compared}


def _child(*args: str) -> dict:
    r = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return json.loads(next(x for x in r.stdout.splitlines() if x.startswith("BENCH-RESULT "))[13:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, nargs="+", default=[25, 100])
    ap.add_argument("--folder", default="/tmp/disjoint-bench")
    ap.add_argument("--val", type=float, default=0.02)
    ap.add_argument("--sign-here", action="store_true", help="the scan signs the text (no stored signatures)")
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--sign", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure or a.sign:
        res = measure(Path(a.measure), a.sign_here) if a.measure else {"signing_secs": round(sign(Path(a.sign)), 2)}
        print("BENCH-RESULT " + json.dumps(res))
        return
    for mb in a.mb:
        out = build(Path(a.folder), mb, a.val)
        signing = {}
        if not a.sign_here and not (out / "signatures" / f"{SOURCES[-1]}.parquet").exists():
            signing = _child("--sign", str(out))
        res = {**_child("--measure", str(out), *(["--sign-here"] if a.sign_here else [])), **signing}
        size = sum((out / f"{s}.parquet").stat().st_size for s in SOURCES)
        print(f"{mb} MB text ({size / 1e6:.0f} MB parquet): " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
