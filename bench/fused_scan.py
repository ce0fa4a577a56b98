"""Benchmark: contamination_report + dedup_keys with the text normalised twice (separate) or once (fused).

    PYTHONPATH=. .venv/bin/python bench/fused_scan.py --run /tmp/lead/graphbench/100mb/local-2-in_process [--repeats 2]

`--run`: a finished bench/graph.py run folder (its mix.yaml and storage/): the raw parquet of every
source and eval_registry's files (with the fuzzy index) are copied into a temporary storage root.
Each repeat, in the same process and interleaved (so both see the same machine load):

- separate (the graph before the fusion): `eval_scan.write_contamination_report` scanning only, then
  `dedup.dedup_keys_table`, which signs every source itself and reduces;
- fused: the signature files deleted, `write_contamination_report` with the raw versions (its map
  pass signs every source and writes the signature files), then `dedup_keys_table`, which finds them
  all stored and only reduces.

Printed: wall and CPU seconds (this process, all threads) of each step, and whether the report, the
contaminated docs, the signature files and dedup_keys are the same bytes both ways (they must be).
Engine: in process, `--cpus` threads (the graph's default).

`--old REV`: instead, the fused contamination_report pass (scan, fuzzy match, sign every source) of the
code at REV (`git archive`) beside this checkout's, each repeat in two fresh processes, old and new
interleaved (the order alternating); per run wall and CPU seconds of `write_contamination_report`
alone, then the medians and new / old. Checked: the report, the contaminated and fuzzy-matched docs
and the fuzzy report are the same bytes, and the signature files the same rows and columns (their
metadata records a hash of the signing code's source, which any edit of core/textkeys.py or
stages/dedup/minhash.py changes: the data must not change).

    PYTHONPATH=. .venv/bin/python bench/fused_scan.py --run <graph run folder> --old main --repeats 3
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
import time
from pathlib import Path


def _timed(fn) -> tuple[object, float, float]:
    w, c = time.monotonic(), time.process_time()
    out = fn()
    return out, time.monotonic() - w, time.process_time() - c


def one(storage, spec, eng, fused: bool) -> tuple[dict, dict]:
    """{step: (wall s, cpu s)} and {file: sha256} of one way of running the two steps."""
    from mix_assets.stages.audit import eval_scan
    from mix_assets.stages.dedup import dedup
    from mix_assets.core import layout, tables

    names = [s.name for s in spec.sources]
    for n in names:
        if storage.exists(dedup.signatures_key(n)):
            storage.delete(dedup.signatures_key(n))
    versions = {n: f"bench-{n}" for n in names}
    _, w1, c1 = _timed(lambda: eval_scan.write_contamination_report(storage, spec, eng,
                                                                raw_versions=versions if fused else None))
    (table, _), w2, c2 = _timed(lambda: dedup.dedup_keys_table(
        tables.raw_files(storage, names), {s.name: s.priority for s in spec.sources}, dedup.dedup_params(spec), eng,
        storage=storage, raw_versions=versions))
    tables.write_parquet(storage, layout.DEDUP_KEYS, table)
    keys = [layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS, layout.DEDUP_KEYS,
            *(dedup.signatures_key(n) for n in names)]
    return ({"contamination_report": (w1, c1), "dedup_keys": (w2, c2)},
            {k: hashlib.sha256(storage.read_bytes(k)).hexdigest() for k in keys})


def _copy_inputs(run: Path, root: Path) -> None:
    for part in ("raw", "audit/eval_registry", "audit/fuzzy"):
        if (run / "storage" / part).exists():
            shutil.copytree(run / "storage" / part, root / part)


def measure(run: Path, cpus: int) -> dict:
    """In this process (whichever mix_assets is on the path): the fused pass on a copy of the run's inputs;
    `import_cpu`: CPU seconds of importing the pass's modules (numba's, where the code uses it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    c0 = time.process_time()
    from mix_assets.stages.audit import eval_scan
    from mix_assets.stages.dedup import dedup
    from mix_assets.core import engine, layout
    import_cpu = time.process_time() - c0
    from mix_assets.config import load_spec
    from mix_assets.core.storage import Storage

    spec = load_spec(run / "mix.yaml")
    names = [s.name for s in spec.sources]
    with tempfile.TemporaryDirectory(prefix="bench-fused-") as tmp:
        _copy_inputs(run, Path(tmp))
        storage = Storage(tmp)
        versions = {n: f"bench-{n}" for n in names}
        _, wall, cpu = _timed(lambda: eval_scan.write_contamination_report(storage, spec, engine.Engine(num_cpus=cpus),
                                                                       raw_versions=versions))
        same = [layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS, layout.FUZZY_REPORT, layout.FUZZY_DOCS]
        digests = {k: hashlib.sha256(storage.read_bytes(k)).hexdigest() for k in same if storage.exists(k)}
        for n in names:  # the rows and columns, not the schema metadata
            t = pq.read_table(storage.source(dedup.signatures_key(n))).replace_schema_metadata(None)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, t.schema) as w:
                w.write_table(t)
            digests[dedup.signatures_key(n)] = hashlib.sha256(sink.getvalue()).hexdigest()
    with open("/proc/self/status") as f:  # the process's peak resident set (the step's, minus Dagster)
        peak = next(int(x.split()[1]) for x in f if x.startswith("VmHWM")) / 1024
    return {"wall": wall, "cpu": cpu, "import_cpu": import_cpu, "peak_rss_mb": peak, "digests": digests}


def compare(a) -> None:
    """Old code (REV) against this checkout, fresh processes, interleaved."""
    import json
    import subprocess
    import sys

    from lsh_reduce import REPO, old_code, _median  # the same git archive export

    code = {"old": old_code(a.old, Path(tempfile.gettempdir()) / "bench-fused-scan"), "new": REPO}
    runs = {"old": [], "new": []}
    print(f"{a.run}: fused contamination_report pass, {a.old} (old) vs this checkout (new), engine local x{a.cpus}")
    print("| repeat | code | wall s | CPU s | import CPU s | peak RSS MB |")
    print("|---|---|---|---|---|---|")
    for r in range(a.repeats):
        for way in (("old", "new") if r % 2 == 0 else ("new", "old")):
            env = dict(__import__("os").environ, PYTHONPATH=str(code[way]))
            done = subprocess.run([sys.executable, __file__, "--run", str(a.run), "--cpus", str(a.cpus), "--measure"],
                                  env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{way} code failed:\n{done.stderr[-3000:]}")
            got = json.loads(done.stdout.strip().splitlines()[-1])
            runs[way].append(got)
            print(f"| {r + 1} | {way} | {got['wall']:.1f} | {got['cpu']:.1f} | {got['import_cpu']:.2f} | "
                  f"{got['peak_rss_mb']:.0f} |", flush=True)
    med = {w: {k: _median([g[k] for g in runs[w]]) for k in ("wall", "cpu", "import_cpu", "peak_rss_mb")}
           for w in runs}
    print(f"median wall s old {med['old']['wall']:.1f} new {med['new']['wall']:.1f} "
          f"(new / old {med['new']['wall'] / med['old']['wall']:.2f}); CPU s old {med['old']['cpu']:.1f} "
          f"new {med['new']['cpu']:.1f} (new / old {med['new']['cpu'] / med['old']['cpu']:.2f}); import CPU s old "
          f"{med['old']['import_cpu']:.2f} new {med['new']['import_cpu']:.2f}; peak RSS MB old "
          f"{med['old']['peak_rss_mb']:.0f} new {med['new']['peak_rss_mb']:.0f}")
    digests = {json.dumps(g["digests"], sort_keys=True) for w in runs for g in runs[w]}
    print(f"same outputs every run (report, contaminated docs, fuzzy report and docs, signature data): {len(digests) == 1}")
    if len(digests) != 1:
        raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="a bench/graph.py run folder (mix.yaml, storage/)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cpus", type=int, default=2, help="in-process engine threads")
    ap.add_argument("--old", help="a git revision: its fused pass beside this checkout's (fresh processes)")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure:
        import json

        print(json.dumps(measure(a.run, a.cpus)))
        return
    if a.old:
        compare(a)
        return

    from mix_assets.config import load_spec
    from mix_assets.core import engine
    from mix_assets.core.storage import Storage

    spec = load_spec(a.run / "mix.yaml")
    eng = engine.Engine(num_cpus=a.cpus)
    with tempfile.TemporaryDirectory(prefix="bench-fused-") as tmp:
        _copy_inputs(a.run, Path(tmp))
        storage = Storage(tmp)
        mb = sum(p.stat().st_size for p in (Path(tmp) / "raw").rglob("*.parquet")) / 1e6
        print(f"{a.run}: raw parquet {mb:.0f} MB, engine local x{a.cpus}")
        print("| repeat | way | contamination_report wall / CPU s | dedup_keys wall / CPU s | both wall / CPU s |")
        print("|---|---|---|---|---|")
        hashes = {}
        for r in range(a.repeats):
            for way in ("separate", "fused"):
                t, hashes[way] = one(storage, spec, eng, way == "fused")
                cells = [f"{w:.1f} / {c:.1f}" for w, c in t.values()]
                both = [sum(x) for x in zip(*t.values())]
                print(f"| {r + 1} | {way} | {' | '.join(cells)} | {both[0]:.1f} / {both[1]:.1f} |", flush=True)
        same = hashes["separate"] == hashes["fused"]
        print(f"same bytes both ways (report, contaminated docs, dedup_keys, signature files): {same}")
        if not same:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
