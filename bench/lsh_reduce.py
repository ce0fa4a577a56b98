"""Bytes per document of dedup_keys' reduce (lib/dedup.reduce_signatures) over stored signature files.

    PYTHONPATH=$PWD .venv/bin/python bench/lsh_reduce.py --docs 100000 400000 [--folder /tmp/lsh-reduce]

Corpus per size: 60-word documents of random words (vocabulary 20,000), 10 % of them near-copies of
another document with one word replaced (5-word shingle Jaccard ~0.84), and 1 % exact copies, in
two raw sources; signed once with the real map (`dedup.sign_sources`, cached in --folder). Each
size's reduce runs in a fresh process: after the imports the peak-RSS counter is reset
(/proc/self/clear_refs), then `reduce_signatures` and the write of dedup_keys.parquet; printed:
(VmHWM - VmRSS before) / documents, and seconds. Short documents keep the verification's shingle
sets small, so the figure is the banding, clustering, keep rule and output table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SOURCES = ["a", "b"]


def build(folder: Path, n: int) -> Path:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mix_assets.lib import dedup, engine
    from mix_assets.lib.storage import Storage

    out = folder / f"{n}"
    if (out / "storage" / dedup.signatures_key(SOURCES[-1])).exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(n)
    vocab = np.array([f"w{i}" for i in range(20_000)], dtype=object)
    words = rng.integers(0, len(vocab), (n, 60))
    copy = rng.random(n) < 0.10
    src = rng.integers(0, n, n)
    words[copy] = words[src[copy]]
    words[copy, rng.integers(0, 60, int(copy.sum()))] = rng.integers(0, len(vocab), int(copy.sum()))
    exact = rng.random(n) < 0.01
    words[exact] = words[src[exact]]
    texts = [" ".join(vocab[row]) for row in words]
    paths = {}
    for k, s in enumerate(SOURCES):
        idx = np.arange(k, n, len(SOURCES))
        paths[s] = str(out / f"{s}.parquet")
        pq.write_table(pa.table({"doc_id": [f"{s}-{i:09d}" for i in idx], "text": [texts[i] for i in idx],
                                 "n_chars": [len(texts[i]) for i in idx]}), paths[s],
                       row_group_size=16384)  # ~6 MB of text, as raw/<source> bounds its row groups
    dedup.sign_sources(Storage(str(out / "storage")), paths, {s: "bench" for s in SOURCES}, dedup.DedupParams(),
                       engine.Engine(num_cpus=1, chunk_rows=8192))
    return out


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def measure(out: Path) -> dict:
    from mix_assets.lib import dedup, layout, tables
    from mix_assets.lib.storage import Storage

    storage = Storage(str(out / "storage"))
    paths = {s: str(out / f"{s}.parquet") for s in SOURCES}
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    base = _status("VmRSS")
    t = time.perf_counter()
    table, st = dedup.reduce_signatures(storage, paths, {"a": 1, "b": 0}, dedup.DedupParams())
    tables.write_parquet(storage, layout.DEDUP_KEYS, table)
    secs = time.perf_counter() - t
    peak = _status("VmHWM")
    n = st["documents"]
    return {"documents": n, "secs": round(secs, 2), "base_rss_mb": round(base / 2**20),
            "peak_over_base_mb": round((peak - base) / 2**20, 1), "bytes_per_doc": round((peak - base) / n),
            "candidate_pairs": st["candidate_pairs"], "near_dup_docs": st["excluded_near_dup"],
            "exact_dup_docs": st["excluded_exact_dup"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, nargs="+", default=[100_000, 400_000])
    ap.add_argument("--folder", default="/tmp/lsh-reduce")
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure:
        print("BENCH-RESULT " + json.dumps(measure(Path(a.measure))))
        return
    for n in a.docs:
        out = build(Path(a.folder), n)
        r = subprocess.run([sys.executable, __file__, "--measure", str(out)], capture_output=True, text=True,
                           check=True)
        print(next(x for x in r.stdout.splitlines() if x.startswith("BENCH-RESULT "))[13:], flush=True)


if __name__ == "__main__":
    main()
