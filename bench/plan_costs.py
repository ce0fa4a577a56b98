"""Per-step cost coefficients for the capacity plan (`python -m mix_assets.plan`, issue 29 §3).

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/plan_costs.py --sizes 100 400
    ... bench/plan_costs.py --sizes 100 400 --check 200   # also the plan's error against a measured run
    ... bench/plan_costs.py --quick                       # 1 MB, writes bench/out/plan_costs/ only
    ... bench/plan_costs.py --check-graph OUT/1600mb/result.json ...   # the recorded plan vs graph.py runs

Per size, on bench/graph.py's generated corpus and config (2 workers, local engine), two fresh runs of
`rebuild_mix`:
  mp    = the multiprocess executor (one process per step, one step at a time): each step process's
          peak RSS (the driver's; its map tasks run as threads inside it, so this bounds driver + the
          tasks in flight), the step's STEP_START -> STEP_SUCCESS seconds, and the bytes each asset's
          lineage record lists (what it writes to storage), plus the run's scratch (chunk parts, object
          store, local cache);
  tasks = the in-process executor with every map task timed (core/engine's thread map wrapped in
          this bench's child only): per step, the tasks' durations and the step's seconds outside any
          task (its serial part).
Map tasks' own memory on a Ray worker comes from a bench/graph.py Ray multiprocess run (`--ray-result
<its result.json>`, the Ray worker peak per step); without it a map step's worker estimate is its step
process's peak (an upper bound).
Fit per step, between the smallest and the largest size: memory = base + bytes per document x
documents, seconds and bytes = base + per MB x MB (slopes clamped at 0). Written to
mix_assets/plan_costs.json (`--costs`) with the command, code revision, host and load, and the measured
task durations (for bench/replay.py); the report (bench/results/plan_costs.md) prints each measured figure
beside the plan's estimate for it, as a ratio (`--check MB` adds a size the fit did not see).
`--check-graph` fits nothing: it holds the recorded coefficients (`--costs`) against the local x2
multiprocess runs of bench/graph.py result.json files (per step: its process's peak RSS and its
STEP_START -> STEP_SUCCESS seconds, so with the host's load of that run) and appends that section to
`--results`, with the largest process per size and its growth from the smallest size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import graph  # bench/graph.py: corpus, config and the timed rebuild_mix child

REPO = graph.REPO
OUT = REPO / "bench" / "out" / "plan_costs"
RESULTS = REPO / "bench" / "results" / "plan_costs.md"
COSTS = REPO / "mix_assets" / "plan_costs.json"
WORKERS = 2


def child_tasks(cfg: Path) -> dict:
    """rebuild_mix in process with every map task timed; per step: task durations, serial seconds."""
    import dagster as dg

    from mix_assets.core import engine

    spans: list[tuple[float, float]] = []
    thread_map = engine._thread_map

    def timed_map(fn, chunks, eng):
        def run(c):
            t0 = time.time()
            try:
                return fn(c)
            finally:
                spans.append((t0, time.time()))
        return thread_map(run, chunks, eng)

    engine._thread_map = timed_map
    out = graph.child_graph(cfg, 1, "in_process")
    instance = dg.DagsterInstance.local_temp(str(cfg.parent / "dagster_home"))
    (run,) = instance.get_runs(limit=1)
    steps: dict[str, dict] = {}
    for e in instance.all_logs(run.run_id):
        ev = e.dagster_event
        if ev is None:
            continue
        if ev.event_type_value == "STEP_START":
            steps.setdefault(ev.step_key, {})["start"] = e.timestamp
        elif ev.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE"):
            steps.setdefault(ev.step_key, {})["end"] = e.timestamp
    rows = {}
    for k, v in steps.items():
        if {"start", "end"} <= v.keys():
            mine = sorted((a, b) for a, b in spans if v["start"] <= a <= v["end"])
            busy, last = 0.0, v["start"]
            for a, b in mine:  # wall covered by at least one task
                b = min(b, v["end"])
                if b > last:
                    busy += b - max(a, last)
                    last = b
            secs = v["end"] - v["start"]
            rows[k] = {"secs": secs, "tasks": [round(b - a, 4) for a, b in mine],
                       "serial_secs": max(0.0, secs - busy)}
    return {"success": out["success"], "run_secs": out.get("run_secs"), "cpu_secs": out.get("cpu_secs"),
            "steps": rows}


def storage_bytes(folder: Path) -> dict:
    """Bytes each asset's lineage record lists (what it wrote) and the run's scratch folders."""
    st = folder / "storage"
    per = {}
    for rec in sorted((st / "lineage").rglob("*.json")):
        d = json.loads(rec.read_text())
        if "asset" in d:
            per[d["asset"]] = sum((st / k).stat().st_size for k in d.get("outputs", {}) if (st / k).exists())

    def du(p: Path) -> int:
        seen, n = set(), 0
        for f in p.rglob("*") if p.exists() else ():
            s = f.lstat()
            if f.is_file() and (s.st_dev, s.st_ino) not in seen:
                seen.add((s.st_dev, s.st_ino))
                n += s.st_size
        return n

    return {"assets": per, "scratch": {"parts": du(st / "parts"), "objects": du(st / "objects"),
                                       "keyed": du(st / "keyed"), "cache": du(folder / "cache")}}


def step_asset(step: str) -> str:
    return step.replace("raw__", "raw/")


def measure(mb: int, out: Path, seed: int, reuse: bool = False) -> dict:
    folder = (out / f"{mb}mb").resolve()
    if reuse and (folder / "measured.json").exists():  # --reuse: the figures of an earlier run of this size
        return json.loads((folder / "measured.json").read_text())
    if folder.exists():
        subprocess.run(["rm", "-rf", str(folder)], check=True)
    folder.mkdir(parents=True)
    gen = graph.run_child("gen", [mb, folder, seed, 4.0, "none", 4096], 1, folder / "gen.log")
    print(f"[{mb} MB] corpus {gen['bytes'] / 1e6:.1f} MB, {gen['docs']:,} docs", flush=True)
    cfg = graph.run_spec(folder / "mix.yaml", "local", WORKERS, folder / "mp")
    mp = graph.run_child("graph", [cfg, 1, "multiprocess"], WORKERS, folder / "mp" / "graph.log", "multiprocess")
    disk = storage_bytes(folder / "mp")
    print(f"[{mb} MB] multiprocess run {graph.f(mp.get('run_secs'))} s", flush=True)
    cfg2 = graph.run_spec(folder / "mix.yaml", "local", WORKERS, folder / "tasks")
    env = {**os.environ, "RAYON_NUM_THREADS": str(WORKERS), "MIX_EXECUTOR": "in_process",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    with open(folder / "tasks" / "graph.log", "w") as fh:
        r = subprocess.run([sys.executable, __file__, "--child", str(cfg2)], env=env, stdout=subprocess.PIPE,
                           stderr=fh, text=True)
    lines = [x for x in r.stdout.splitlines() if x.startswith("BENCH-RESULT ")]
    if r.returncode or not lines:
        raise SystemExit(f"tasks child failed (exit {r.returncode}); log {folder / 'tasks' / 'graph.log'}")
    tasks = json.loads(lines[-1].removeprefix("BENCH-RESULT "))
    print(f"[{mb} MB] in-process timed run {graph.f(tasks.get('run_secs'))} s", flush=True)
    steps = {}
    for s in mp["steps"]:
        t = tasks["steps"].get(s["step"], {})
        steps[s["step"]] = {"map": s["map"], "peak_mb": s.get("step_mb"), "mp_secs": s.get("secs"),
                            "secs": t.get("secs"), "serial_secs": t.get("serial_secs"), "tasks": t.get("tasks", []),
                            "disk_bytes": disk["assets"].get(step_asset(s["step"]), 0)}
    got = {"mb": mb, "bytes": gen["bytes"], "docs": gen["docs"], "steps": steps, "scratch": disk["scratch"],
           "run_secs": tasks.get("run_secs"), "mp_run_secs": mp.get("run_secs"), "cpu_secs": tasks.get("cpu_secs"),
           "chunk_rows": 2048, "load_average": os.getloadavg()[0]}
    (folder / "measured.json").write_text(json.dumps(got))
    return got


def _line(x0: float, y0: float, x1: float, y1: float) -> list[float]:
    """[base, slope] through two points, the slope clamped at 0 (noise must not make a cost shrink)."""
    slope = max(0.0, (y1 - y0) / (x1 - x0)) if x1 != x0 else 0.0
    return [round(max(0.0, y1 - slope * x1), 4), round(slope, 9)]


def fit(runs: list[dict], ray_workers: dict[str, float]) -> dict:
    lo, hi = runs[0], runs[-1]
    steps = {}
    for name, h in hi["steps"].items():
        lw = lo["steps"].get(name)
        if lw is None or h["peak_mb"] is None or lw["peak_mb"] is None:
            continue
        mb0, mb1 = lo["bytes"] / 1e6, hi["bytes"] / 1e6
        mem = _line(lo["docs"], lw["peak_mb"] * 1e6, hi["docs"], h["peak_mb"] * 1e6)  # bytes, per document
        task = _line(mb0, sum(lw["tasks"]), mb1, sum(h["tasks"]))
        steps[name] = {
            "map": h["map"],
            "driver_mb": [round(mem[0] / 1e6, 1), round(mem[1], 1)],  # [MB, bytes per document]
            "worker_mb": round(ray_workers.get(name) or h["peak_mb"], 1) if h["map"] else None,
            "serial_s": _line(mb0, lw["serial_secs"] or 0.0, mb1, h["serial_secs"] or 0.0),
            "task_s": task,  # summed task seconds = base + per MB x MB
            "tasks_per_mb": round(len(h["tasks"]) / mb1, 4),
            "disk_mb": [round(v, 4) for v in _line(mb0, lw["disk_bytes"] / 1e6, mb1, h["disk_bytes"] / 1e6)],
        }
    scratch = {k: _line(lo["bytes"] / 1e6, lo["scratch"][k] / 1e6, hi["bytes"] / 1e6, hi["scratch"][k] / 1e6)
               for k in hi["scratch"]}
    return {"steps": steps, "scratch_mb": scratch,
            "bytes_per_doc": round(hi["bytes"] / hi["docs"], 1), "chunk_rows": hi["chunk_rows"]}


def compare(costs: dict, run: dict, disk: bool = True) -> list[str]:
    """Each measured figure beside the plan's estimate (the plan module's own arithmetic)."""
    from mix_assets import plan

    est = {s.step: s for s in plan.estimate(costs, run["bytes"], workers=WORKERS, partitions=1,
                                            docs=run["docs"]).steps}
    rows = [f"### {run['mb']} MB ({run['bytes'] / 1e6:.1f} MB, {run['docs']:,} documents): measured / estimated", "",
            "| step | peak RSS MB | ratio | seconds (2 workers) | ratio | writes MB | ratio |", "|---|---|---|---|---|---|---|"]
    errs = {"mem": [], "secs": []}
    for name, m in run["steps"].items():
        e = est.get(name)
        if e is None or m["peak_mb"] is None:
            continue
        r_mem = m["peak_mb"] / e.driver_mb if e.driver_mb else None
        r_s = (m["secs"] / e.wall_s) if m["secs"] and e.wall_s else None
        r_d = (m["disk_bytes"] / 1e6 / e.disk_mb) if e.disk_mb and disk else None
        errs["mem"].append(abs(r_mem - 1) if r_mem else 0)
        if r_s and m["secs"] > 1:
            errs["secs"].append(abs(r_s - 1))
        rows.append(f"| {name} | {m['peak_mb']:.0f} / {e.driver_mb:.0f} | {graph.f(r_mem, '.2f')} | "
                    f"{graph.f(m['secs'])} / {e.wall_s:.1f} | {graph.f(r_s, '.2f')} | "
                    f"{(m['disk_bytes'] / 1e6 if disk else '—'):{'.1f' if disk else ''}} / {e.disk_mb:.1f} | "
                    f"{graph.f(r_d, '.2f')} |")
    rows += ["", f"Largest error: peak RSS {max(errs['mem'], default=0):.1%}, seconds (steps over 1 s) "
                 f"{max(errs['secs'], default=0):.1%}.", ""]
    return rows


def graph_run(path: Path) -> dict:
    """A bench/graph.py result.json's local x2 multiprocess run in `measure`'s shape (seconds: the step's
    own STEP_START -> STEP_SUCCESS in that run; no lineage bytes)."""
    g = json.loads(Path(path).read_text())
    run = next((r for r in g["runs"] if r["executor"] == "multiprocess" and r["engine"] == "local"
                and r["workers"] == WORKERS), None)
    if run is None:
        raise SystemExit(f"{path}: no local x{WORKERS} multiprocess run")
    steps = {s["step"]: {"map": s["map"], "peak_mb": s.get("step_mb"), "secs": s.get("secs"), "disk_bytes": 0}
             for s in run["graph"]["steps"]}
    mb = round(g["gen"]["bytes"] / 1e6 / 100) * 100 or round(g["gen"]["bytes"] / 1e6)
    return {"mb": mb, "bytes": g["gen"]["bytes"], "docs": g["gen"]["docs"], "steps": steps,
            "run_secs": run["graph"].get("run_secs"), "success": run["graph"].get("success"), "source": str(path)}


def check_graph(costs: dict, runs: list[dict]) -> list[str]:
    """Per size: the compare() table; then the largest process per size, measured and planned."""
    from mix_assets import plan

    body = []
    for r in runs:
        body += [f"Run: `{r['source']}` ({'published' if r['success'] else 'FAILED'}, whole graph "
                 f"{graph.f(r['run_secs'])} s).", ""]
        body += compare(costs, r, disk=False)
    body += ["### Largest process (step process; local engine: its map tasks are threads in it)", "",
             "| corpus | documents | measured MB (step) | plan MB (step) | measured / plan | measured / smallest size's |",
             "|---|---|---|---|---|---|"]
    first = None
    for r in runs:
        top = max(((s["peak_mb"], k) for k, s in r["steps"].items() if s["peak_mb"]), default=(None, "—"))
        est = max(plan.estimate(costs, r["bytes"], workers=WORKERS, partitions=1, docs=r["docs"]).steps,
                  key=lambda s: s.driver_mb)
        first = first or top[0]
        body.append(f"| {r['bytes'] / 1e6:,.1f} MB | {r['docs']:,} | {top[0]:.0f} (`{top[1]}`) | {est.driver_mb:.0f} "
                    f"(`{est.step}`) | {top[0] / est.driver_mb:.2f} | {top[0] / first:.3f} (target <= 1.10) |")
    return body + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 400], help="corpus sizes in MB (fit: smallest, largest)")
    ap.add_argument("--check", type=int, nargs="*", default=[], help="sizes measured only to check the plan's estimates")
    ap.add_argument("--ray-result", type=Path, help="a bench/graph.py result.json of a Ray multiprocess run (worker peaks)")
    ap.add_argument("--quick", action="store_true", help="1 and 2 MB; writes under bench/out/plan_costs only")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--costs", type=Path, default=None, help=f"coefficients file (default {COSTS})")
    ap.add_argument("--results", type=Path, default=None, help=f"report (default {RESULTS})")
    ap.add_argument("--reuse", action="store_true", help="take a size's figures from an earlier run in --out")
    ap.add_argument("--check-graph", type=Path, nargs="+", help="bench/graph.py result.json files: hold the "
                    "recorded coefficients against their local x2 multiprocess runs (appends to --results)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.check_graph:
        from mix_assets import plan

        costs = plan.load_costs(a.costs or COSTS)
        runs = sorted((graph_run(p) for p in a.check_graph), key=lambda r: r["bytes"])
        m = costs["measured"]
        body = [f"## The recorded plan against bench/graph.py runs ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
                "", f"    {graph.command_line('bench/plan_costs.py')}", "",
                f"Coefficients: {a.costs or COSTS} (measured {m.get('date')}, code {m.get('code')}); the runs: local "
                f"engine, {WORKERS} workers, multiprocess executor, one step at a time. Seconds are each step's "
                "STEP_START -> STEP_SUCCESS in that run, on a host loaded by other work (see the runs' load), so "
                "their ratios say more about the load than the plan; the writes column is not measured here (—).", "",
                *check_graph(costs, runs)]
        res = a.results or RESULTS
        res.write_text(res.read_text().rstrip("\n") + "\n\n" + "\n".join(body) + "\n" if res.exists()
                       else "\n".join(body) + "\n")
        print("\n".join(body))
        return
    if a.child:
        print("BENCH-RESULT " + json.dumps(child_tasks(Path(a.child))), flush=True)
        return
    if a.quick:
        a.sizes, a.check = [1, 2], []
    a.costs = a.costs or (a.out / "plan_costs.json" if a.quick else COSTS)
    a.results = a.results or (a.out / "plan_costs.md" if a.quick else RESULTS)
    cmd, t0, load0 = graph.command_line("bench/plan_costs.py"), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()
    runs = [measure(mb, a.out, a.seed, a.reuse) for mb in sorted(a.sizes)]
    checks = [measure(mb, a.out, a.seed, a.reuse) for mb in a.check]
    ray_workers = {}
    if a.ray_result:
        g = json.loads(a.ray_result.read_text())
        for r in g["runs"]:
            for s in r["graph"]["steps"]:
                if s.get("ray_worker_mb"):
                    ray_workers[s["step"]] = max(ray_workers.get(s["step"], 0), s["ray_worker_mb"])
    load1 = os.getloadavg()
    costs = {"format": "mix_assets.plan_costs/1",
             "measured": {"command": cmd, "date": t0, "code": graph.git_rev(), "host": graph.machine(),
                          "load_average": [round(load0[0], 2), round(load1[0], 2)], "workers": WORKERS,
                          "ray_worker_peaks_from": str(a.ray_result) if a.ray_result else None,
                          "sizes": [{k: r[k] for k in ("mb", "bytes", "docs", "run_secs", "mp_run_secs", "cpu_secs")}
                                    for r in runs]},
             **fit(runs, ray_workers),
             "task_durations": {str(r["mb"]): {k: v["tasks"] for k, v in r["steps"].items() if v["tasks"]} for r in runs},
             "serial_secs": {str(r["mb"]): {k: round(v["serial_secs"] or 0, 3) for k, v in r["steps"].items()} for r in runs}}
    a.costs.parent.mkdir(parents=True, exist_ok=True)
    a.costs.write_text(json.dumps(costs, indent=1) + "\n")
    body = [f"## Run of {t0}", "", f"    {cmd}", "",
            f"Machine: {graph.machine()}; code at {graph.git_rev()}; {WORKERS} workers, local engine. Load average "
            f"(1 min) {load0[0]:.2f} at start, {load1[0]:.2f} at end (2 cores shared with other work: seconds "
            "are the loaded host's).", ""]
    for r in runs + checks:
        body += compare(costs, r)
    head = "# bench/plan_costs.py: the capacity plan's coefficients, and its estimates against measured runs\n\n"
    a.results.parent.mkdir(parents=True, exist_ok=True)
    a.results.write_text(head + "\n".join(body) + "\n")
    print("\n".join(body))
    print(f"wrote {a.costs} and {a.results}")


if __name__ == "__main__":
    main()
