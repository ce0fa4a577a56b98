"""Benchmark: contamination_report + dedup_keys with the text normalised twice (separate) or once (fused).

    PYTHONPATH=. .venv/bin/python bench/fused_scan.py --run /tmp/lead/graphbench/100mb/local-2-in_process [--repeats 2]

`--run`: a finished bench/graph.py run folder (its mix.yaml and storage/): the raw parquet of every
source and eval_registry's files (with the fuzzy index) are copied into a temporary storage root.
Each repeat, in the same process and interleaved (so both see the same machine load):

- separate (the graph before the fusion): `audit.write_contamination_report` scanning only, then
  `dedup.dedup_keys_table`, which signs every source itself and reduces;
- fused: the signature files deleted, `write_contamination_report` with the raw versions (its map
  pass signs every source and writes the signature files), then `dedup_keys_table`, which finds them
  all stored and only reduces.

Printed: wall and CPU seconds (this process, all threads) of each step, and whether the report, the
contaminated docs, the signature files and dedup_keys are the same bytes both ways (they must be).
Engine: in process, `--cpus` threads (the graph's default).
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
    from mix_assets.lib import audit, dedup, layout, tables

    names = [s.name for s in spec.sources]
    for n in names:
        if storage.exists(dedup.signatures_key(n)):
            storage.delete(dedup.signatures_key(n))
    versions = {n: f"bench-{n}" for n in names}
    _, w1, c1 = _timed(lambda: audit.write_contamination_report(storage, spec, eng,
                                                                raw_versions=versions if fused else None))
    (table, _), w2, c2 = _timed(lambda: dedup.dedup_keys_table(
        tables.raw_files(storage, names), {s.name: s.priority for s in spec.sources}, dedup.dedup_params(spec), eng,
        storage=storage, raw_versions=versions))
    tables.write_parquet(storage, layout.DEDUP_KEYS, table)
    keys = [layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS, layout.DEDUP_KEYS,
            *(dedup.signatures_key(n) for n in names)]
    return ({"contamination_report": (w1, c1), "dedup_keys": (w2, c2)},
            {k: hashlib.sha256(storage.read_bytes(k)).hexdigest() for k in keys})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="a bench/graph.py run folder (mix.yaml, storage/)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cpus", type=int, default=2, help="in-process engine threads")
    a = ap.parse_args()

    from mix_assets.config import load_spec
    from mix_assets.lib import engine
    from mix_assets.lib.storage import Storage

    spec = load_spec(a.run / "mix.yaml")
    eng = engine.Engine(num_cpus=a.cpus)
    with tempfile.TemporaryDirectory(prefix="bench-fused-") as tmp:
        for part in ("raw", "audit/eval_registry", "audit/fuzzy"):
            if (a.run / "storage" / part).exists():
                shutil.copytree(a.run / "storage" / part, Path(tmp) / part)
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
