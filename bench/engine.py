"""Benchmark: dedup_keys (stages/dedup/dedup.dedup_keys_table) in process vs on a local Ray instance.

    PYTHONPATH=. .venv/bin/python bench/engine.py [--mb 50] [--data ../shared/data] [--out /tmp/bench-engine] [--chunk-rows 2048]

Corpus: `../mix_assets_tests/support/gen_corpus.py` prose (order-2 Markov chain trained on `<data>/sources/*/*.txt`, seed 0,
10 % planted near-copies at Jaccard 0.80-0.85), about `--mb` MB of text dealt round-robin into two
sources' raw parquet (doc_id, text, n_chars; row groups of 2,048 rows). Written once, reused.

Each configuration runs in a fresh subprocess: in-process with 1 and 2 threads, Ray with 1 and 2
CPUs (a new local instance, `ray.init` timed apart from the stage). Reported: seconds of `ray.init`,
of the map alone (`sign_chunk` over every chunk via `engine.map_chunks`), of the whole
`dedup_keys_table` (map + reduce, run after it), the load average around the run, and the sha256 of the dedup_keys parquet, which
must be the same for every configuration.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

RUNS = [("local", 1), ("local", 2), ("ray", 1), ("ray", 2)]


def make_corpus(data: Path, out: Path, mb: float) -> dict[str, str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mix_assets_tests.support import gen_corpus as gc

    paths = {s: str(out / f"{s}.parquet") for s in ("src0", "src1")}
    if all(Path(p).exists() for p in paths.values()):
        return paths
    model = gc.MarkovModel.from_files(sorted((data / "sources").glob("*/*.txt")), order=2)
    texts = gc.generate_bytes(model, int(mb * 1e6), seed=0).texts
    for k, (s, p) in enumerate(paths.items()):
        rows = range(k, len(texts), 2)
        pq.write_table(pa.table({"doc_id": [f"{s}-{i:07d}" for i in rows], "text": [texts[i] for i in rows],
                                 "n_chars": [len(texts[i]) for i in rows]}), p, row_group_size=2048)
    return paths


def one(paths: dict, kind: str, cpus: int, out: Path, chunk_rows: int) -> dict:
    """A single configuration (run in its own process)."""
    from mix_assets.stages.dedup import dedup
    from mix_assets.core import engine, layout, tables
    from mix_assets.core.storage import Storage

    eng = engine.Engine(kind=kind, num_cpus=cpus, chunk_rows=chunk_rows)
    t0 = time.monotonic()
    with engine.ray_session(eng):
        init = time.monotonic() - t0
        t1 = time.monotonic()
        chunks = dedup.sign_chunks(paths, dedup.DedupParams(), eng)
        docs = sum(len(c.exact_keys) for c in engine.map_chunks(dedup.sign_chunk, chunks, eng))
        map_s = time.monotonic() - t1
        t1 = time.monotonic()
        table, st = dedup.dedup_keys_table(paths, {"src0": 1, "src1": 0}, dedup.DedupParams(), eng)
        stage = time.monotonic() - t1
    storage = Storage(root=str(out / f"{kind}{cpus}"))
    tables.write_parquet(storage, layout.DEDUP_KEYS, table)
    digest = hashlib.sha256(Path(storage.source(layout.DEDUP_KEYS)).read_bytes()).hexdigest()
    assert docs == st["documents"]
    return dict(kind=kind, cpus=cpus, init_s=round(init, 2), map_only_s=round(map_s, 2), chunks=len(chunks),
                stage_s=round(stage, 2), documents=st["documents"],
                near_dup=st["excluded_near_dup"], sha256=digest)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=50)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench-engine"))
    ap.add_argument("--chunk-rows", type=int, default=2048, help="engine.chunk_rows (documents per map task)")
    ap.add_argument("--one", nargs=2, metavar=("KIND", "CPUS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.one:
        paths = json.loads((a.out / "paths.json").read_text())
        print(json.dumps(one(paths, a.one[0], int(a.one[1]), a.out, a.chunk_rows)))
        return
    t0 = time.monotonic()
    paths = make_corpus(a.data, a.out, a.mb)
    (a.out / "paths.json").write_text(json.dumps(paths))
    mb = sum(Path(p).stat().st_size for p in paths.values()) / 1e6
    import pyarrow.parquet as pq

    text_mb = sum(len(t.encode()) for p in paths.values()
                  for t in pq.read_table(p, columns=["text"]).column("text").to_pylist()) / 1e6
    print(f"corpus: {a.out} ({text_mb:.1f} MB of text, {mb:.1f} MB parquet, {time.monotonic() - t0:.0f} s)", flush=True)
    rows = []
    print(f"load average before: {os.getloadavg()}", flush=True)
    for kind, cpus in RUNS:
        res = subprocess.run([sys.executable, __file__, "--out", str(a.out), "--chunk-rows", str(a.chunk_rows), "--one", kind, str(cpus)],
                             check=True, capture_output=True, text=True)
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print(f"load average after: {os.getloadavg()}", flush=True)
    assert len({r["sha256"] for r in rows}) == 1, "dedup_keys bytes differ between engines"
    print("identical dedup_keys bytes for every configuration")


if __name__ == "__main__":
    main()
