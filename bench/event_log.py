"""Dagster's SQLite event log with and without mix_assets/dagster_sqlite.py, in fresh processes.

    PYTHONPATH=$PWD .venv/bin/python bench/event_log.py --steps 25 --repeats 3

Each run: one `dg.materialize` of `--steps` trivial assets (each logs one line and reports one check,
about the events a graph step stores) on a new local instance (DagsterInstance.local_temp: SQLite, WAL,
as `make run`'s), in its own process; `default` leaves Dagster's SQLite settings (MIX_DAGSTER_SQLITE=default),
`hook` installs mix_assets/dagster_sqlite.py (synchronous=NORMAL on WAL databases). The two alternate, `--repeats` times each. Printed: each run's wall
and CPU seconds and events stored, then the medians and their ratio (hook ÷ default). Wall is mostly
fsync latency, so it depends on the disk and on what else writes to it: say whether the host was loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child(steps: int, hook: bool) -> dict:
    import dagster as dg

    from mix_assets import dagster_sqlite

    if hook:
        dagster_sqlite.install()

    def make(i: int):
        @dg.asset(name=f"a{i}", check_specs=[dg.AssetCheckSpec("ok", asset=f"a{i}")])
        def one(context):
            """A step that logs a line and reports a check."""
            context.log.info("step")
            return dg.MaterializeResult(metadata={"i": i}, check_results=[dg.AssetCheckResult(passed=True)])
        return one

    with tempfile.TemporaryDirectory(prefix="event-log-") as d:
        instance = dg.DagsterInstance.local_temp(d)
        t0, c0 = time.perf_counter(), time.process_time()
        result = dg.materialize([make(i) for i in range(steps)], instance=instance)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        events = len(instance.all_logs(result.run_id))
    return {"wall": wall, "cpu": cpu, "events": events, "success": result.success}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=25, help="trivial assets per run (default 25, a graph's steps)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each setting, alternating (default 3)")
    ap.add_argument("--child", choices=["default", "hook"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print("BENCH-RESULT " + json.dumps(child(a.steps, a.child == "hook")))
        return
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {a.steps} steps per run", flush=True)
    runs: dict[str, list[dict]] = {"default": [], "hook": []}
    for k in range(a.repeats):
        for mode in ("default", "hook"):
            env = {**os.environ, "PYTHONPATH": str(REPO), "MIX_DAGSTER_SQLITE": mode}
            r = subprocess.run([sys.executable, __file__, "--child", mode, "--steps", str(a.steps)], env=env,
                               capture_output=True, text=True)
            line = [x for x in r.stdout.splitlines() if x.startswith("BENCH-RESULT ")]
            if r.returncode or not line:
                raise SystemExit(f"{mode} run failed:\n{r.stderr[-3000:]}")
            got = json.loads(line[-1].removeprefix("BENCH-RESULT "))
            runs[mode].append(got)
            print(f"  {mode:7s} run {k + 1}: {got['wall']:.2f} s wall, {got['cpu']:.2f} CPU s, "
                  f"{got['events']} events, success {got['success']}", flush=True)
    med = {m: {f: statistics.median(r[f] for r in rs) for f in ("wall", "cpu")} for m, rs in runs.items()}
    ev = runs["default"][0]["events"]
    for f in ("wall", "cpu"):
        d, h = med["default"][f], med["hook"][f]
        print(f"median {f}: hook {h:.2f} s ÷ default {d:.2f} s = {h / d:.2f} "
              f"({(d - h) / ev * 1000:.1f} ms saved per stored event, {ev} events)")
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
