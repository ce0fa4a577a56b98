"""dedup_keys' reduce (stages/dedup/dedup.reduce_signatures) over stored signature files: seconds and bytes per
document, the code at --old (`git archive`, main by default) beside this checkout with 1 and 2 workers.

    PYTHONPATH=$PWD .venv/bin/python bench/lsh_reduce.py --docs 100000 400000 [--folder /tmp/lsh-reduce]
    PYTHONPATH=$PWD .venv/bin/python bench/lsh_reduce.py --storage <a finished run's storage root>

Corpus per size: 60-word documents of random words (vocabulary 20,000), 10 % of them near-copies of
another document with one word replaced (5-word shingle Jaccard ~0.84), and 1 % exact copies, in
two raw sources; signed once with the real map (`dedup.sign_sources`, cached in --folder). Or
--storage: a graph run's raw/<source>/documents.parquet and dedup/signatures/<source>.parquet (read
only), e.g. bench/graph.py's prose. Each reduce runs in a fresh process: after the imports the
peak-RSS counter is reset (/proc/self/clear_refs), then `reduce_signatures` (new code: its text pass
and verification as tasks on a local engine of --workers threads) and the write of dedup_keys.parquet
to a temporary folder; printed: seconds, CPU seconds, (VmHWM - VmRSS before) / documents, the output's
sha256. Runs are interleaved (old, new x workers) --repeats times; the summary gives medians, old / new,
and the bytes per added document between the two --docs sizes. Short documents keep the verification's
shingle sets small, so the --docs figure is the banding, clustering, keep rule and output table.
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

    from mix_assets.stages.dedup import dedup
    from mix_assets.core import engine
    from mix_assets.core.storage import Storage

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


def graph_storage(root: Path) -> tuple[Path, dict[str, str], dict[str, int]]:
    """(storage root, {source: raw documents parquet}, priorities) of a finished run's storage."""
    names = sorted(p.stem for p in (root / "dedup" / "signatures").glob("*.parquet"))
    return root, {s: str(root / "raw" / s / "documents.parquet") for s in names}, dict.fromkeys(names, 0)


def measure(storage_root: Path, paths: dict, priorities: dict, workers: int) -> dict:
    """One reduce in this process, with whichever mix_assets is first on sys.path (old code: 1 worker)."""
    import hashlib
    import inspect
    import tempfile

    from mix_assets.stages.dedup import dedup
    from mix_assets.core import engine, layout, tables
    from mix_assets.core.storage import Storage

    storage = Storage(str(storage_root))
    new = "eng" in inspect.signature(dedup.reduce_signatures).parameters
    kw = {"eng": engine.Engine(num_cpus=workers)} if new else {}
    if "reuse_pairs" in inspect.signature(dedup.reduce_signatures).parameters:
        kw["reuse_pairs"] = False  # the storage is read only, and every run compares every pair
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    base = _status("VmRSS")
    t, c = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="lsh-reduce-out-") as tmp:
        table, st = dedup.reduce_signatures(storage, paths, priorities, dedup.DedupParams(), **kw)
        tables.write_parquet(Storage(tmp), layout.DEDUP_KEYS, table)
        secs, cpu = time.perf_counter() - t, time.process_time() - c
        digest = hashlib.sha256((Path(tmp) / layout.DEDUP_KEYS).read_bytes()).hexdigest()[:16]
    peak = _status("VmHWM")
    n = st["documents"]
    return {"documents": n, "secs": round(secs, 2), "cpu_secs": round(cpu, 2), "base_rss_mb": round(base / 2**20),
            "peak_over_base_mb": round((peak - base) / 2**20, 1), "bytes_per_doc": round((peak - base) / n),
            "candidate_pairs": st["candidate_pairs"], "near_dup_docs": st["excluded_near_dup"],
            "exact_dup_docs": st["excluded_exact_dup"], "sha256": digest}


def old_code(rev: str, folder: Path) -> Path:
    """mix_assets at `rev`, extracted from this repository with `git archive` (cached per commit)."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", rev], check=True, capture_output=True,
                            text=True).stdout.strip()
    out = folder / f"code-{commit[:12]}"
    if not (out / "mix_assets").exists():
        out.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "mix_assets"], check=True,
                                 stdout=subprocess.PIPE).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def _median(xs: list) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, nargs="+", default=[100_000, 400_000])
    ap.add_argument("--storage", help="a finished run's storage root instead of --docs (read only)")
    ap.add_argument("--folder", default="/tmp/lsh-reduce")
    ap.add_argument("--old", default="main", help="git revision of the old code (default: main)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--code", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure:
        sys.path.insert(0, a.code)
        spec = json.loads(a.measure)
        print("BENCH-RESULT " + json.dumps(measure(Path(spec["root"]), spec["paths"], spec["priorities"],
                                                   spec["workers"])))
        return
    old = old_code(a.old, Path(a.folder))
    runs = [("old", old, 1)] + [("new", REPO, w) for w in a.workers]
    sizes = []
    for n in [None] if a.storage else a.docs:
        if a.storage:
            root, paths, prio = graph_storage(Path(a.storage))
        else:
            out = build(Path(a.folder), n)
            root, paths, prio = out / "storage", {s: str(out / f"{s}.parquet") for s in SOURCES}, {"a": 1, "b": 0}
        got: dict = {}
        for rep in range(a.repeats):
            for label, code, w in runs:
                spec = json.dumps({"root": str(root), "paths": paths, "priorities": prio, "workers": w})
                r = subprocess.run([sys.executable, __file__, "--measure", spec, "--code", str(code)],
                                   capture_output=True, text=True, check=True)
                res = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("BENCH-RESULT "))[13:])
                got.setdefault((label, w), []).append(res)
                print(json.dumps({"code": label, "workers": w, "repeat": rep, **res}), flush=True)
        sizes.append(got)
        _summary(got)
    if len(sizes) == 2:
        for key in sizes[0]:
            lo, hi = (_median([r["peak_over_base_mb"] for r in s[key]]) for s in sizes)
            d = sizes[1][key][0]["documents"] - sizes[0][key][0]["documents"]
            print(f"{key[0]} code, {key[1]} worker(s): {(hi - lo) * 2**20 / d:.0f} B per added document "
                  f"(peak over base {lo:.1f} -> {hi:.1f} MB)")


def _summary(got: dict) -> None:
    old = _median([r["secs"] for r in got[("old", 1)]])
    same = len({r["sha256"] for rs in got.values() for r in rs}) == 1
    for (label, w), rs in got.items():
        secs = _median([r["secs"] for r in rs])
        print(f"SUMMARY {rs[0]['documents']:,} docs, {label} code, {w} worker(s): {secs:.2f} s "
              f"(cpu {_median([r['cpu_secs'] for r in rs]):.2f} s), old / this {old / secs:.2f}x, "
              f"{_median([r['bytes_per_doc'] for r in rs]):.0f} B/doc over base; outputs identical: {same}")


if __name__ == "__main__":
    main()
