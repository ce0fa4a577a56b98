"""The serial per-document steps (exclusion_masks, validation_split, manifest, published_revision and
their checks, not shards_audit_clean), old code beside this checkout's, on a finished bench/graph.py run.

    .venv/bin/python bench/serial_steps.py --run /tmp/graph-bench/400mb/local-2-in_process --old 0045cad [--reps 3]

Each repeat, old then new: the run folder (mix.yaml, storage/ with every upstream's outputs) is copied
to a temporary folder (its published revision removed, paths in mix.yaml rewritten), and the steps
are materialised in process in a fresh subprocess from that code (`--old`: a `git archive` of the
revision's mix_assets/). Prints each step's seconds (STEP_START to STEP_SUCCESS; median of the
repeats and every repeat) old and new, and whether the outputs (masks/, split/, the published files)
and the check results were identical in every run.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KEYS = ["exclusion_masks", "validation_split", "manifest", "published_revision"]
JOB = r'''
import sys, warnings
warnings.filterwarnings("ignore")
import mix_assets
print("CODE", mix_assets.__file__)
import dagster as dg
from mix_assets.config import load_spec
from mix_assets.definitions import build_definitions
defs = build_definitions(load_spec(sys.argv[1]))
skip = dg.AssetSelection.checks(dg.AssetCheckKey(dg.AssetKey("manifest"), "shards_audit_clean"))
job = dg.define_asset_job("serial", selection=dg.AssetSelection.assets(*sys.argv[2].split(",")) - skip)
d = dg.Definitions(assets=defs.assets, asset_checks=defs.asset_checks, jobs=[job], resources=defs.resources,
                   executor=dg.in_process_executor)
inst = dg.DagsterInstance.ephemeral()
r = d.resolve_job_def("serial").execute_in_process(instance=inst, raise_on_error=False)
start = {}
for e in inst.all_logs(r.run_id):
    ev = e.dagster_event
    if ev is None:
        continue
    if ev.event_type_value == "STEP_START":
        start[ev.step_key] = e.timestamp
    elif ev.event_type_value == "STEP_SUCCESS":
        print("SECONDS", ev.step_key, e.timestamp - start[ev.step_key])
    elif ev.event_type_value == "ASSET_CHECK_EVALUATION":
        print("CHECK", ev.event_specific_data.check_name, ev.event_specific_data.passed)
print("SUCCESS", r.success)
'''


def outputs_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for sub in (folder / "storage" / "masks", folder / "storage" / "split", folder / "published"):
        for p in sorted(x for x in sub.rglob("*") if x.is_file()):
            h.update(str(p.relative_to(folder)).encode() + p.read_bytes())
    return h.hexdigest()[:12]


def one_run(code: Path, run: Path, tmp: Path) -> tuple[dict, str]:
    work = tmp / "run"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(run, work, ignore=shutil.ignore_patterns("dagster_home", "published"))
    shutil.rmtree(work / "storage" / "publish", ignore_errors=True)
    (work / "mix.yaml").write_text((run / "mix.yaml").read_text().replace(str(run), str(work)))
    env = {"PYTHONPATH": str(code), "MIX_SHARED_DATA": "/work/shared/data", "RAYON_NUM_THREADS": "2",
           "PATH": "/usr/bin:/bin", "MIX_CONFIG": str(work / "mix.yaml")}
    out = subprocess.run([sys.executable, "-c", JOB, str(work / "mix.yaml"), ",".join(KEYS)], env=env,
                         capture_output=True, text=True, cwd=str(code)).stdout.splitlines()  # "" first on sys.path
    loaded = next((x.split()[1] for x in out if x.startswith("CODE")), "")
    assert loaded.startswith(str(code) + "/"), f"ran {loaded or 'nothing'}, not the code of {code}"
    secs = {p[1]: float(p[2]) for p in (x.split() for x in out) if p[0] == "SECONDS"}
    checks = sorted(x for x in out if x.startswith(("CHECK", "SUCCESS")))
    return secs, outputs_hash(work) + " " + hashlib.sha256("\n".join(checks).encode()).hexdigest()[:8]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished bench/graph.py run folder (mix.yaml, storage/)")
    ap.add_argument("--old", required=True, help="the git revision to compare with (its mix_assets/)")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="serial-steps-") as t:
        tmp = Path(t)
        (tmp / "old").mkdir()
        arch = subprocess.run(["git", "-C", str(REPO), "archive", a.old, "mix_assets"], check=True,
                              capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp / "old")], input=arch, check=True)
        secs: dict = {"old": {}, "new": {}}
        seen = set()
        for rep in range(a.reps):
            for name, code in (("old", tmp / "old"), ("new", REPO)):
                got, digest = one_run(code, a.run.resolve(), tmp)
                seen.add(digest)
                for k, v in got.items():
                    secs[name].setdefault(k, []).append(v)
                print(f"repeat {rep + 1} {name}: {sum(got.values()):.2f} s over {len(got)} steps, outputs {digest}",
                      flush=True)
    print(f"\n{a.run}: {a.reps} repeats, old = {a.old}, new = this checkout")
    print("| step | old s (median; runs) | new s (median; runs) | new / old |\n|---|---|---|---|")
    tot = [0.0, 0.0]
    for k in sorted(secs["old"]):
        o, n = secs["old"][k], secs["new"].get(k, [float("nan")])
        mo, mn = statistics.median(o), statistics.median(n)
        tot = [tot[0] + mo, tot[1] + mn]
        print(f"| {k} | {mo:.2f} ({', '.join(f'{x:.2f}' for x in o)}) | {mn:.2f} ({', '.join(f'{x:.2f}' for x in n)})"
              f" | {mn / mo:.2f} |")
    print(f"| sum of medians | {tot[0]:.2f} | {tot[1]:.2f} | {tot[1] / tot[0]:.2f} |")
    print("outputs and check results identical in every run" if len(seen) == 1 else f"OUTPUTS DIFFER: {sorted(seen)}")


if __name__ == "__main__":
    main()
