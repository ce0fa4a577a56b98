"""Where dedup_keys' reduce spends the step process's CPU (issue 29: the step's own seconds against its tasks').

    PYTHONPATH=$PWD RAY_TMPDIR=/tmp/my-ray .venv/bin/python bench/dedup_driver_profile.py FOLDER P [ray|local]

FOLDER: a bench/joins.py corpus folder (its mix.yaml and storage, built up to exclusion_masks, so the
signature files are stored). Runs `dedup.reduce_to` over them with `dedup.partitions` = P on a fresh engine
(Ray: a local instance of 2 CPUs; local: 2 threads) under cProfile with a thread-CPU timer, so the profile is
the step's main thread only. Prints the step process's peak RSS and user+system CPU seconds (all its threads,
Ray's own included), the tasks' count and CPU seconds (timed inside each task), their ratio, the written
file's sha256, then the main thread's profile by own time and by cumulative time. The profiler slows the main
thread's Python: read the ratios, not the absolute seconds.
"""

import argparse
import cProfile
import dataclasses
import os
import pstats
import time

from mix_assets.core import engine, layout
from mix_assets.resources import MixResource
from mix_assets.stages.dedup import dedup as lib


class Timed:
    """A task function that also returns its own thread-CPU seconds."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, c):
        t = time.thread_time()
        out = self.fn(c)
        return out, time.thread_time() - t


def hwm() -> int:
    return [int(line.split()[1]) // 1024 for line in open("/proc/self/status") if line.startswith("VmHWM")][0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", help="a bench/joins.py corpus folder built up to exclusion_masks")
    ap.add_argument("partitions", type=int, help="dedup.partitions")
    ap.add_argument("engine", nargs="?", default="ray", choices=("ray", "local"))
    args = ap.parse_args()
    folder, P, kind = args.folder, args.partitions, args.engine
    mix = MixResource(config_path=f"{folder}/mix.yaml")
    spec, storage = mix.spec, mix.storage
    names = [s.name for s in spec.sources]
    params = dataclasses.replace(lib.dedup_params(spec), partitions=P)
    paths = {n: storage.local_path(layout.RAW_DOCS.format(source=n)) for n in names}
    tasks = {"n": 0, "cpu": 0.0}
    plain = engine.map_chunks

    def timed_map(fn, chunks, e):
        for out, c in plain(Timed(fn), chunks, e):
            tasks["n"] += 1
            tasks["cpu"] += c
            yield out

    engine.map_chunks = timed_map
    eng = engine.Engine(kind=kind, num_cpus=2, object_store_mb=512)
    key = "bench/dedup_driver_profile.parquet"
    with engine.ray_session(eng):
        pr = cProfile.Profile(time.thread_time)
        t0, w0 = os.times(), time.perf_counter()
        pr.enable()
        st = lib.reduce_to(storage, key, paths, {n: 0 for n in names}, params, eng=eng, reuse_pairs=False)
        pr.disable()
        t1 = os.times()
    cpu = (t1.user + t1.system) - (t0.user + t0.system)
    print(f"hwm {hwm()} MB partitions {st['partitions']} kind={kind} wall {time.perf_counter() - w0:.1f} "
          f"step cpu {cpu:.2f} tasks {tasks['n']} task cpu {tasks['cpu']:.2f} ratio {cpu / max(tasks['cpu'], 1e-9):.3f} "
          f"sha {storage.sha256(key)[:16]}")
    storage.delete(key)
    s = pstats.Stats(pr)
    s.sort_stats("tottime").print_stats(25)
    s.sort_stats("cumulative").print_stats(45)


if __name__ == "__main__":
    main()
