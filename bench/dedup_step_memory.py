"""Peak RSS of the dedup_keys step per phase at two corpus sizes, and its bytes per added document (issue 13 §3).

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/dedup_step_memory.py \\
        --runs <small run> <large run>  [--before <git rev>]  [--folder /tmp/dedup-step-memory]  [--repeat 1]

A run is a folder with a mix.yaml and its storage root after a graph build up to dedup_keys (e.g. bench/graph.py's
<folder>/<size>mb/local-2-in_process). What dedup_keys reads (raw/, dedup/signatures/, lineage/, audit/) is copied
to --folder/<run name>/, and the mix.yaml with its storage and publish paths pointed there; the runs are not
written. Each measurement is the dedup_keys asset with its clusters_consistent check, `dg.materialize` in a
fresh process (as a step has a process to itself under the multiprocess executor): `base` = VmRSS once the
code and the Definitions are loaded, `peak` = VmHWM at the end. Per phase, the kernel's peak is reset at the
phase's start (/proc/self/clear_refs 5) and read at its end: verify (lineage inputs), sign (the map; reused
when the signatures are stored), lsh (`lsh.dedup`: bands, verification, clusters, keep rule), reduce (the
rest of `reduce_signatures`: reading the per-document columns before, building the table after),
write (dedup_keys.parquet), lineage, check (clusters_consistent), metadata, dagster (the rest of the run).
Beside each: VmRSS at the phase's end (what it left held). With --before, each run is measured with that
rev's code too (`git archive`), and the written dedup_keys.parquet and the step's metadata (minus peak_rss_mb
and *_seconds, *_per_second) must be the same. Cap (issue 13): the step's peak grows <= 600 B per added
document. With --repeat n, the sizes and code trees alternate n times; the report gives each repeat's bytes
per added document (its small and large measurement) and the median-peak measurement's phases.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from reduce_memory import _defs, _metadata, _status, before_tree

REPO = Path(__file__).resolve().parents[1]
CAP = 600  # bytes per added document (issue 13, Targets)
COPY = ["raw", "dedup/signatures", "lineage", "audit"]  # what dedup_keys and its lineage read
# (module, attribute) wrapped as a phase; attributes a code tree lacks are skipped
PHASES = [
    ("mix_assets.stages.dedup.assets", "verified_inputs", "verify"),
    ("mix_assets.stages.dedup.dedup", "sign_sources", "sign"),
    ("mix_assets.stages.dedup.dedup", "reduce_signatures", "reduce"),
    ("mix_assets.stages.dedup.lsh", "dedup", "lsh"),
    ("mix_assets.stages.dedup.dedup", "write_dedup_keys", "write"),
    ("mix_assets.stages.dedup.assets", "write_parquet", "write"),
    ("mix_assets.stages.dedup.assets", "recorded", "lineage"),
    ("mix_assets.stages.dedup.dedup", "check_clusters", "check"),
    ("mix_assets.stages.dedup.dedup", "check_clusters_file", "check"),
    ("mix_assets.console.metadata", "dedup_keys", "metadata"),
]
ORDER = ["verify", "sign", "lsh", "reduce", "write", "lineage", "check", "metadata", "dagster"]


# -- child (PYTHONPATH = the code tree under test) -------------------------------------------------------------
class Phases:
    """Per phase: the peak (VmHWM reset at each phase boundary) and VmRSS at its end."""

    def __init__(self):
        self.stack, self.peak, self.end = ["dagster"], {}, {}
        self._reset()

    @staticmethod
    def _reset():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    def _close(self, name: str) -> None:
        self.peak[name] = max(self.peak.get(name, 0), _status("VmHWM"))
        self.end[name] = _status("VmRSS")
        self._reset()

    def wrap(self, fn, name: str):
        def inner(*a, **k):
            self._close(self.stack[-1])
            self.stack.append(name)
            try:
                return fn(*a, **k)
            finally:
                self._close(self.stack.pop())
        return inner


def child(cfg: Path) -> dict:
    import importlib

    dg, spec, defs, assets, separate = _defs(cfg)
    ph = Phases()
    for mod, attr, name in PHASES:
        m = importlib.import_module(mod)
        if hasattr(m, attr):
            setattr(m, attr, ph.wrap(getattr(m, attr), name))
    base = _status("VmRSS")
    sel = dg.AssetSelection.assets("dedup_keys") - dg.AssetSelection.checks(*separate)
    t0 = time.perf_counter()
    r = dg.materialize(assets, resources=defs.resources, instance=dg.DagsterInstance.ephemeral(), selection=sel,
                       raise_on_error=False)
    secs = time.perf_counter() - t0
    ph._close("dagster")
    from mix_assets.core import layout

    root = Path(spec.storage.root)
    sha = hashlib.sha256((root / layout.DEDUP_KEYS).read_bytes()).hexdigest()
    meta = _metadata(r)
    docs = int(next(m["docs"] for m in meta.values() if "docs" in m and "lsh_bands" in m))
    return {"success": r.success, "base": base, "peak": max(ph.peak.values()), "secs": secs, "docs": docs,
            "phases": {n: [ph.peak[n], ph.end[n]] for n in ORDER if n in ph.peak}, "sha": sha,
            "metadata": meta}


# -- parent ------------------------------------------------------------------------------------------------------
def prepare(run: Path, folder: Path) -> Path:
    """A copy of what dedup_keys reads from `run`'s storage, and its mix.yaml pointed at the copy."""
    text = (run / "mix.yaml").read_text()
    import yaml

    spec = yaml.safe_load(text)
    out = folder / run.parent.name / run.name
    root = out / "storage"
    for part in COPY:
        src = Path(spec["storage"]["root"]) / part
        if src.exists() and not (root / part).exists():
            shutil.copytree(src, root / part)
    spec["storage"]["root"], spec["storage"]["cache_dir"] = str(root), str(out / "cache")
    spec.setdefault("publish", {})["url"] = str(out / "published")
    (out / "mix.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return out / "mix.yaml"


def measure(code: Path, cfg: Path, log: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "MIX_EXECUTOR": "in_process"}
    with open(log, "a") as fh:
        r = subprocess.run([sys.executable, __file__, "--child", str(cfg)], cwd=code, env=env,
                           stdout=subprocess.PIPE, stderr=fh, text=True)
    lines = [x for x in r.stdout.splitlines() if x.startswith("BENCH-RESULT ")]
    if r.returncode or not lines:
        raise SystemExit(f"child {cfg} failed (exit {r.returncode}); log: {log}\n{r.stdout[-2000:]}")
    return json.loads(lines[-1].removeprefix("BENCH-RESULT "))


def report(runs: list[str], res: dict, codes: list[str]) -> str:
    """`res`: {(code, run): [measurement per repeat]}. The table shows each code and run's median-peak
    measurement; bytes per added document pair repeat i's small and large run (interleaved in time)."""
    mb = 1e6
    lo, hi = runs[0], runs[-1]
    mid = {k: sorted(v, key=lambda r: r["peak"])[(len(v) - 1) // 2] for k, v in res.items()}
    out = ["MB = 1e6 bytes. peak = VmHWM of the step's process; per phase: its peak / VmRSS at its end "
           f"(the median-peak one of {len(res[(codes[0], lo)])} measurement(s)).", "",
           "| code | run | docs | base | peak | " + " | ".join(ORDER) + " | s | dedup_keys.parquet sha256 |",
           "|---|---|---|---|---|" + "---|" * len(ORDER) + "---|---|"]
    for code in codes:
        for run in runs:
            r = mid[(code, run)]
            cells = [f"{r['phases'][n][0] / mb:.0f} / {r['phases'][n][1] / mb:.0f}" if n in r["phases"] else "—"
                     for n in ORDER]
            ok = "" if all(x["success"] for x in res[(code, run)]) else " (failed)"
            out.append(f"| {code}{ok} | {run} | {r['docs']:,} | {r['base'] / mb:.0f} | {r['peak'] / mb:.0f} | "
                       + " | ".join(cells) + f" | {r['secs']:.1f} | {r['sha'][:16]} |")
    out.append("")
    for code in codes:
        pairs = list(zip(res[(code, lo)], res[(code, hi)]))
        added = max(pairs[0][1]["docs"] - pairs[0][0]["docs"], 1)
        per = [(b["peak"] - a["peak"]) / added for a, b in pairs]  # in repeat order
        red = [(_reduce_peak(b) - _reduce_peak(a)) / added for a, b in pairs]
        med = sorted(per)[(len(per) - 1) // 2]
        out.append(f"{code}: step peak " + ", ".join(f"{a['peak'] / mb:.0f} -> {b['peak'] / mb:.0f}" for a, b in pairs)
                   + f" MB over {pairs[0][0]['docs']:,} -> {pairs[0][1]['docs']:,} documents = "
                   + ", ".join(f"{x:,.0f}" for x in per) + f" B per added document (median {med:,.0f}; cap {CAP}: "
                   f"{'met' if max(per) <= CAP else 'NOT met' if min(per) > CAP else 'not in every repeat'}); "
                   "the reduce's peak (lsh, reduce phases): " + ", ".join(f"{x:,.0f}" for x in red) + " B/doc")
    if len(codes) > 1:
        diff = sorted({f"{r}: {k}" for r in runs for x in res[(codes[0], r)] for y in res[(codes[1], r)]
                       for k in _differs(x, y)})
        out.append(f"same dedup_keys.parquet and metadata (minus rates) as {codes[0]} in every measurement: "
                   + ("yes" if not diff else "NO: " + "; ".join(diff)))
    return "\n".join(out) + "\n"


def _reduce_peak(r: dict) -> int:
    return max(r["phases"].get(n, [0])[0] for n in ("lsh", "reduce"))


def _differs(a: dict, b: dict) -> list[str]:
    """What differs between two measurements' outputs: the file, or metadata entries (not timings or rates)."""
    out = ["dedup_keys.parquet"] if a["sha"] != b["sha"] else []
    for name in sorted(set(a["metadata"]) | set(b["metadata"])):
        ma, mb = a["metadata"].get(name, {}), b["metadata"].get(name, {})
        out += [f"{name}.{k}" for k in sorted(set(ma) | set(mb))
                if not k.endswith("per_second") and ma.get(k) != mb.get(k)]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, nargs=2, help="two graph run folders (mix.yaml + storage), smaller first")
    p.add_argument("--before", default=None, help="also measure this git rev's code (e.g. main)")
    p.add_argument("--folder", type=Path, default=Path("/tmp/dedup-step-memory"))
    p.add_argument("--repeat", type=int, default=1, help="measurements per code and run, interleaved")
    p.add_argument("--out", type=Path, default=None, help="write the report here (markdown) as well")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print("BENCH-RESULT " + json.dumps(child(a.child)))
        return
    if not a.runs:
        p.error("--runs is required")
    a.folder.mkdir(parents=True, exist_ok=True)
    trees = {"after": REPO}
    if a.before:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", a.before], check=True, stdout=subprocess.PIPE,
                             text=True).stdout.strip()
        trees = {f"before ({rev[:12]})": before_tree(rev, a.folder), **trees}
    cfgs = {str(run): prepare(run, a.folder) for run in a.runs}
    log, res = a.folder / "bench.log", {}
    for _ in range(a.repeat):  # interleaved: sizes and code trees alternate within each repeat
        for run, cfg in cfgs.items():
            for code, tree in trees.items():
                r = measure(tree, cfg, log)
                print(f"{run} {code}: peak {r['peak'] / 1e6:.0f} MB, base {r['base'] / 1e6:.0f} MB, "
                      f"{r['secs']:.1f} s, success {r['success']}", flush=True)
                res.setdefault((code, run), []).append(r)
    (a.folder / "results.json").write_text(json.dumps([{"code": c, "run": r, "repeat": i, **v}
                                                       for (c, r), vs in res.items() for i, v in enumerate(vs)]))
    text = report(list(cfgs), res, list(trees))
    print(text)
    if a.out:
        a.out.write_text(text)


if __name__ == "__main__":
    main()
