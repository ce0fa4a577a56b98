"""Peak RSS of dedup_keys' reduce and its clusters_consistent check per phase, on a graph run's storage (issue 29).

    PYTHONPATH=$PWD .venv/bin/python bench/dedup_reduce_phases.py RUN/mix.yaml PARTITIONS

RUN is a bench/graph.py run folder (<out>/<size>mb/local-2-multiprocess) whose storage holds the signatures. In this
process, without Dagster (a step process adds its base: 502 vs 324 MB here at 100 MB): `dedup.reduce_to` into probe/dedup_keys.parquet
of that storage (a scratch key: the run's own dedup_keys is not touched), then `dedup.cluster_problems` on it, with
`dedup.partitions` = PARTITIONS and a local engine of 2 threads. The kernel's peak (VmHWM) is reset at every phase
boundary (/proc/self/clear_refs 5): each engine map (named by its task function), `docparts.candidates`, the
verification, `partitioned.components`, the table's write, the check; `setup` is this process's own code between
them. Prints per phase its peak and VmRSS at its end, the overall peak and the file's sha256 (the same for any
PARTITIONS). Linux only. A probe, not a target: the figures are in bench/results/graph.md.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import time
from pathlib import Path


def status(key: str) -> int:
    """/proc/self/status `key` in MB."""
    return int(next(x for x in open("/proc/self/status") if x.startswith(key + ":")).split()[1]) // 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("config", type=Path)
    p.add_argument("partitions", type=int)
    a = p.parse_args()

    from mix_assets.config import load_spec
    from mix_assets.core import engine, tables
    from mix_assets.resources import storage_for
    from mix_assets.stages.dedup import dedup as lib, docparts, lsh, partitioned

    rows, stack, t0 = [], ["setup"], time.perf_counter()

    def close(name: str) -> None:
        rows.append((name, status("VmHWM"), status("VmRSS"), time.perf_counter() - t0))
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    def wrap(fn, name):
        @functools.wraps(fn)
        def inner(*x, **k):
            close(stack[-1])
            stack.append(name)
            try:
                return fn(*x, **k)
            finally:
                close(stack.pop())
        return inner

    plain_map = engine.map_chunks

    def map_chunks(fn, items, eng, *x, **k):
        name = "map:" + getattr(getattr(fn, "func", fn), "__name__", "?")
        close(stack[-1])
        stack.append(name)
        try:
            yield from plain_map(fn, items, eng, *x, **k)
        finally:
            close(stack.pop())

    engine.map_chunks = map_chunks
    docparts.candidates = wrap(docparts.candidates, "candidates")
    lsh.Verifier.__call__ = wrap(lsh.Verifier.__call__, "verify")
    partitioned.components = wrap(partitioned.components, "components")
    tables.write_parquet_groups = wrap(tables.write_parquet_groups, "write_groups")
    check = wrap(lib.cluster_problems, "cluster_problems")

    spec = load_spec(str(a.config))
    spec = spec.model_copy(update={"dedup": spec.dedup.model_copy(update={"partitions": a.partitions})})
    storage = storage_for(spec)
    names = [s.name for s in spec.sources]
    base = status("VmRSS")
    close("setup")
    eng = engine.Engine(num_cpus=2)
    key = "probe/dedup_keys.parquet"
    st = lib.reduce_to(storage, key, tables.raw_files(storage, names), {s.name: s.priority for s in spec.sources},
                       lib.dedup_params(spec), None, eng)
    close(stack[-1])
    problems = check(storage, key, eng, a.partitions)
    sha = hashlib.sha256(Path(storage.local_path(key)).read_bytes()).hexdigest()[:12]
    print(json.dumps({"partitions": a.partitions, "docs": st["documents"], "candidate_pairs": st["candidate_pairs"],
                      "base_mb": base, "sha256": sha, "problems": len(problems)}))
    agg: dict[str, list[int]] = {}
    for name, hwm, rss, _ in rows:
        g = agg.setdefault(name, [0, 0, 0])
        g[0], g[1], g[2] = max(g[0], hwm), rss, g[2] + 1
    for name, (hwm, rss, n) in agg.items():
        print(f"{name:28s} peak {hwm:5d} MB  RSS at its end {rss:5d} MB  (x{n})")
    print("overall peak", max(h for _, h, _, _ in rows), "MB")


if __name__ == "__main__":
    main()
