"""The cost of artifact keys in a build: computing and checking them, as a share of a full build (issue 27 target <= 2 %).

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/keys_cost.py --sizes 100
    ... bench/keys_cost.py --quick   # a 1 MB corpus, report in bench/out/keys_cost/quick.md

Corpus, config and timing: bench/incremental.py's (graph.py's generated corpus of 4 sources, a fixed
tokenizer file, `rebuild_mix` in a fresh process with the in-process executor; run seconds RUN_START ->
RUN_SUCCESS from the event log, process CPU seconds over the run). Two runs on one empty root:
  a  full build
  b  no-change rebuild (every asset a cache hit)
In the run's process every function of the key machinery is wrapped by a timer (wall: perf_counter; CPU:
the process's CPU seconds over the call, an upper bound since other threads count too; a call inside
another wrapped call counts once, in the outermost), grouped:
  keys     deriving and checking keys and looking them up: stages/common.code_version, chain_code_versions,
           current_code_versions, input_keys, reused (input keys, the roots' source-file fingerprints,
           the store lookup; on a hit the restore), checkout_inputs, _stored_result (a stored check
           result's lookup); core/keys.artifact_key, files_fingerprint; core/imports.source_version;
           core/objects.read_keyed, keyed_records
  filing   filing each artifact in the store: stages/common._stash, core/objects.stash, put_object, write_keyed
  lineage  the lineage records (core/lineage.write_record, verify_inputs: the outputs' sha256 and the
           inputs' byte checks, which predate keys; shown for scale)
Calls made while the definitions load (code versions: outside the run, once per process) are reported
apart from those during the run. The share is the group's seconds during the run / the run's.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import shutil
import sys
import threading
import time
from pathlib import Path

import graph  # bench/graph.py
import incremental  # bench/incremental.py: corpus, config, the timed child run

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "keys_cost"
RESULTS = REPO / "bench" / "results" / "incremental.md"
TARGET = incremental.TARGET_KEYS
WRAPPED = {
    "keys": {"mix_assets.stages.common": ["code_version", "chain_code_versions", "current_code_versions",
                                          "input_keys", "reused", "checkout_inputs", "_stored_result"],
             "mix_assets.core.keys": ["artifact_key", "files_fingerprint"],
             "mix_assets.core.imports": ["source_version"],
             "mix_assets.core.objects": ["read_keyed", "keyed_records"]},
    "filing": {"mix_assets.stages.common": ["_stash"],
               "mix_assets.core.objects": ["stash", "put_object", "write_keyed"]},
    "lineage": {"mix_assets.core.lineage": ["write_record", "verify_inputs"]},
}


# -- the child: a timed build with the key machinery wrapped ----------------------------------------------------
class Timers:
    def __init__(self) -> None:
        self.local = threading.local()
        self.lock = threading.Lock()
        self.phase = "definitions"
        self.totals: dict = {}  # (phase, group or "any") -> [calls, wall, cpu]
        self.funcs: dict = {}  # (phase, "module.name") -> [calls, wall, cpu]

    def wrap(self, group: str, qual: str, fn):
        @functools.wraps(fn)
        def timed(*a, **kw):
            depth = getattr(self.local, "depth", None)
            if depth is None:
                depth = self.local.depth = {}
            outer_any = not any(depth.values())
            outer_group = not depth.get(group)
            outer_fn = not depth.get(qual)
            depth[group] = depth.get(group, 0) + 1
            depth[qual] = depth.get(qual, 0) + 1
            w0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                w, c = time.perf_counter() - w0, time.process_time() - c0
                depth[group] -= 1
                depth[qual] -= 1
                with self.lock:
                    for flag, table, k in ((outer_any, self.totals, "any"), (outer_group, self.totals, group),
                                           (outer_fn, self.funcs, qual)):
                        if flag:
                            row = table.setdefault((self.phase, k), [0, 0.0, 0.0])
                            row[0] += 1
                            row[1] += w
                            row[2] += c

        timed.__wrapped_by_keys_cost__ = True
        return timed

    def install(self) -> dict:
        """Wrap every function of WRAPPED in its module and wherever a loaded mix_assets module bound it by name."""
        originals = {}
        for group, mods in WRAPPED.items():
            for mod, names in mods.items():
                m = importlib.import_module(mod)
                for n in names:
                    fn = getattr(m, n)
                    originals[id(fn)] = self.wrap(group, f"{mod.rsplit('.', 1)[-1]}.{n}", fn)
                    setattr(m, n, originals[id(fn)])
        rebind(originals)
        return originals


def rebind(originals: dict) -> None:
    for name, m in list(sys.modules.items()):
        if not name.startswith("mix_assets") or m is None:
            continue
        for attr, val in list(vars(m).items()):
            if id(val) in originals and not getattr(val, "__wrapped_by_keys_cost__", False):
                setattr(m, attr, originals[id(val)])


def child_run(cfg: Path) -> dict:
    import dagster as dg

    timers = Timers()
    originals = timers.install()
    import mix_assets.definitions  # noqa: F401 - loads every stage (their code versions: the definitions phase)

    rebind(originals)
    execute = dg.execute_job

    def execute_timed(*a, **kw):
        timers.phase = "run"
        try:
            return execute(*a, **kw)
        finally:
            timers.phase = "after"

    dg.execute_job = execute_timed
    out = incremental.child_run(cfg)
    out["timers"] = {"totals": [[*k, *v] for k, v in timers.totals.items()],
                     "funcs": [[*k, *v] for k, v in timers.funcs.items()]}
    return out


# -- the parent ----------------------------------------------------------------------------------------------
def run_child(cfg: Path, workers: int, log: Path) -> dict:
    import subprocess

    with open(log, "w") as fh:
        r = subprocess.run([sys.executable, __file__, "--child", str(cfg)], env=incremental._env(workers),
                           stdout=subprocess.PIPE, stderr=fh, text=True)
    return incremental._result(r.stdout, r.returncode, "run", log)


def _table(r: dict, phase: str, key: str) -> dict:
    return {row[1]: row[2:] for row in r["timers"][key] if row[0] == phase}


def report(mb: int, runs: dict) -> tuple[list[str], list[str]]:
    """(figures, detail lines) of one corpus size."""
    figs, lines = [], []
    full = runs["a"]
    for name, r in runs.items():
        tot = _table(r, "run", "totals")
        run_s, cpu_s = r.get("run_secs"), r.get("cpu_secs")
        label = {"a": "full build (a)", "b": "no-change rebuild (b)"}[name]
        for group in ("keys", "filing", "lineage", "any"):
            calls, w, c = tot.get(group, [0, 0.0, 0.0])
            what = {"any": "all three (outermost calls)"}.get(group, group)
            lines.append(f"| {mb} MB | {label} | {what} | {calls:,} | {w:.2f} | {c:.2f} | {graph.f(run_s)} | "
                         f"{cpu_s:.1f} | {w / run_s:.2%} | {c / cpu_s:.2%} |")
        defs = _table(r, "definitions", "totals").get("any", [0, 0.0, 0.0])
        lines.append(f"| {mb} MB | {label} | definitions load (outside the run) | {defs[0]:,} | {defs[1]:.2f} | "
                     f"{defs[2]:.2f} | | | | |")
    tot = _table(full, "run", "totals")
    k = tot.get("keys", [0, 0.0, 0.0])
    kf = [tot.get(g, [0, 0.0, 0.0]) for g in ("keys", "filing")]
    figs.append(f"{mb} MB: computing and checking keys in the full build (a): {k[1]:.2f} s wall ÷ run "
                f"{graph.f(full['run_secs'])} s = {k[1] / full['run_secs']:.2%} wall, {k[2]:.2f} ÷ {full['cpu_secs']:.1f} "
                f"CPU s = {k[2] / full['cpu_secs']:.2%} CPU (target <= {TARGET:.0%}: "
                f"{'met' if max(k[1] / full['run_secs'], k[2] / full['cpu_secs']) <= TARGET else 'NOT met'}); "
                f"with filing in the store {sum(x[1] for x in kf) / full['run_secs']:.2%} wall, "
                f"{sum(x[2] for x in kf) / full['cpu_secs']:.2%} CPU")
    if "b" in runs:
        b = runs["b"]
        figs.append(f"{mb} MB: no-change rebuild (b) {graph.f(b['run_secs'])} s ÷ full build (a) "
                    f"{graph.f(full['run_secs'])} s = {b['run_secs'] / full['run_secs']:.2f} wall, "
                    f"{b['cpu_secs']:.1f} ÷ {full['cpu_secs']:.1f} CPU s = {b['cpu_secs'] / full['cpu_secs']:.2f}; "
                    f"{len(b['reused_steps'])} steps say \"reused\"")
    funcs = _table(full, "run", "funcs")
    top = sorted(funcs.items(), key=lambda kv: -kv[1][1])[:8]
    lines.append("")
    lines.append(f"{mb} MB, full build (a), the wrapped functions by wall seconds (inclusive, outermost call of each): "
                 + "; ".join(f"`{q}` {v[1]:.2f} s / {v[2]:.2f} CPU s ({v[0]:,} calls)" for q, v in top))
    return figs, lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100], help="corpus sizes in MB")
    ap.add_argument("--workers", type=int, default=2, help="as bench/incremental.py --workers")
    ap.add_argument("--no-rebuild", action="store_true", help="leave out run b")
    ap.add_argument("--quick", action="store_true", help="a 1 MB corpus, writes bench/out/keys_cost/quick.md")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--out", type=Path, default=OUT, help="generated corpora, storage roots, logs")
    ap.add_argument("--results", type=Path, default=None,
                    help=f"report file, appended to (default {RESULTS}; --quick: bench/out/keys_cost/quick.md)")
    ap.add_argument("--child", nargs=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        out = child_run(Path(a.child[0]))
        print("BENCH-RESULT " + json.dumps(out, default=str), flush=True)
        return
    if a.quick:
        a.sizes = [1]
    a.results = a.results or (a.out / "quick.md" if a.quick else RESULTS)
    load0, t_start = Path("/proc/loadavg").read_text().strip(), time.strftime("%Y-%m-%d %H:%M:%S %Z")
    figs, lines = [], []
    for mb in a.sizes:
        folder = (a.out / f"{mb}mb").resolve()
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        gen = incremental.run_child("gen", [mb, folder, a.seed, 4.0, 4096], 1, folder / "gen.log")
        print(f"[{mb} MB] corpus {gen['bytes'] / 1e6:.1f} MB, {gen['docs']:,} docs", flush=True)
        cfg = graph.run_spec(folder / "mix.yaml", "local", a.workers, folder / "root")
        runs = {}
        for name in ("a",) if a.no_rebuild else ("a", "b"):
            runs[name] = r = run_child(cfg, a.workers, folder / f"{name}.log")
            print(f"[{mb} MB] {name}: run {graph.f(r['run_secs'])} s, {r['cpu_secs']:.1f} CPU s", flush=True)
        f, ls = report(mb, runs)
        figs += f
        lines += [f"| corpus | run | group | calls | wall s | CPU s | run wall s | run CPU s | wall share | CPU share |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"] + ls
        print("\n".join(f), flush=True)
    load1 = Path("/proc/loadavg").read_text().strip()
    body = "\n".join([f"## bench/keys_cost.py: the cost of keys, run of {t_start}", "",
                      f"    {graph.command_line('bench/keys_cost.py')}", "",
                      __doc__.split("\n\n", 2)[2].strip(), "",
                      f"Machine: {graph.machine()}; code at {graph.git_rev()}; engine local × {a.workers} workers, "
                      f"in-process executor. /proc/loadavg at start: `{load0}`; at end: `{load1}` (shared machine).",
                      "", *[f"- {x}" for x in figs], "", *lines, ""])
    a.results.parent.mkdir(parents=True, exist_ok=True)
    prev = a.results.read_text().rstrip("\n") + "\n\n" if a.results.exists() else ""
    a.results.write_text(prev + body)
    print(f"/proc/loadavg at end: {load1}; appended to {a.results}")


if __name__ == "__main__":
    main()
