"""exclusion_masks and validation_split as engine tasks (issue 29): the step process's CPU seconds and peak RSS
beside the tasks' seconds, at two corpus sizes, and beside another revision's one-process steps.

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/joins.py \\
        --sizes 100 400 --partitions 1 8 [--workers 2] [--engine ray|local] [--before REV] [--folder /tmp/joins]
        [--out <report.md>]

Corpus and config per size: bench/graph.py's generator and config (Markov prose, 10 % planted near-copies,
audited against the shared evals with mask_contaminated on), its upstream (raw .. exclusion_masks) built once
with local threads and kept in --folder. Each measurement is a fresh process on those files: a local Ray
instance of --workers CPUs (`--engine local`: --workers threads in the step process, whose peak then holds the
tasks' memory too), then `build_exclusion_masks` (partitions do not apply: row-range tasks) or
`build_validation_split` with `dedup.partitions` = P. Step process = the driver: `peak` its VmHWM, `cpu` its
user+system seconds during the step function, `wall` its seconds; `tasks` = the sum of the tasks' own wall and
thread-CPU seconds (timed inside the workers). The outputs' sha256 must be the same in every run. With
--before, that revision's step functions (`git archive`; one process, no engine) run beside, as "before".
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from dedup_partitions import _cpu, _status  # noqa: E402  (the same CPU and RSS reads)


class Timed:
    """A task function that also returns its own wall and thread-CPU seconds (pickled by value: __main__)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, chunk):
        w, c = time.perf_counter(), time.thread_time()
        out = self.fn(chunk)
        return out, time.perf_counter() - w, time.thread_time() - c


def child_prep(mb: int, folder: Path) -> dict:
    """The corpus, its config (graph.py's) and the upstream of validation_split, built with local threads."""
    import dagster as dg
    import yaml

    import graph
    from mix_assets.config import load_spec
    from mix_assets.definitions import build_definitions

    gen = graph.child_gen(mb, folder, 13, 4.0)
    cfg = folder / "mix.yaml"
    raw = yaml.safe_load(cfg.read_text())
    raw["engine"] = {"kind": "local", "num_cpus": 2}
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))
    os.environ["MIX_CONFIG"] = str(cfg)
    defs = build_definitions(load_spec(cfg))
    job = dg.define_asset_job("upstream", selection=dg.AssetSelection.assets("validation_split").upstream())
    defs = dg.Definitions.merge(defs, dg.Definitions(jobs=[job]))
    res = defs.resolve_job_def("upstream").execute_in_process(instance=dg.DagsterInstance.ephemeral(),
                                                                raise_on_error=False)
    if not res.success:
        raise SystemExit("upstream build failed")
    return {"docs": gen["docs"], "bytes": gen["bytes"]}


def child_step(folder: Path, step: str, partitions: int, workers: int, kind: str = "ray") -> dict:
    from mix_assets.core import engine, layout
    from mix_assets.resources import MixResource

    mix = MixResource(config_path=str(folder / "mix.yaml"))
    spec, storage = mix.spec, mix.storage
    names = [s.name for s in spec.sources]
    before = partitions == 0
    tasks = {"n": 0, "wall": 0.0, "cpu": 0.0}
    plain = engine.map_chunks

    def timed_map(fn, chunks, e):
        for out, w, c in plain(Timed(fn), chunks, e):
            tasks["n"] += 1
            tasks["wall"] += w
            tasks["cpu"] += c
            yield out

    engine.map_chunks = timed_map
    eng = engine.Engine(kind=kind, num_cpus=workers, object_store_mb=512)
    with (engine.ray_session(eng) if not before else _nothing()):
        base, c0, w0 = _status("VmRSS"), _cpu(), time.perf_counter()
        if step == "masks":
            from mix_assets.stages.dedup import dedup as lib

            got = lib.build_exclusion_masks(storage, spec) if before else lib.build_exclusion_masks(storage, spec, eng)
            rows, keys = got.excluded_docs, [layout.EXCLUSION_MASKS, layout.COMPOSITION]
        else:
            if before:
                from mix_assets.stages.split.split import build_validation_split

                got = build_validation_split(storage, names, spec.seed, spec.split.val_fraction)
            else:
                from mix_assets.stages.split.ranges import build_validation_split

                got = build_validation_split(storage, names, spec.seed, spec.split.val_fraction, eng, partitions)
            rows, keys = got.docs, [layout.VALIDATION_SPLIT]
        wall, cpu, peak = time.perf_counter() - w0, _cpu() - c0, _status("VmHWM")
    digest = hashlib.sha256(b"".join(open(storage.local_path(k), "rb").read() for k in keys)).hexdigest()
    return {"partitions": "before" if before else partitions, "wall": wall, "cpu": cpu, "peak_mb": peak / 1e6,
            "base_mb": base / 1e6, "tasks": tasks, "sha256": digest, "rows": rows}


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def run_child(args: list[str], tree: Path = REPO) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, __file__, "--child", *args], env=env, capture_output=True, text=True,
                         cwd="/tmp")
    if out.returncode:
        raise SystemExit(f"child {args} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(sizes: dict, runs: dict, workers: int, kind: str = "ray") -> str:
    where = f"Ray, {workers} CPUs" if kind == "ray" else f"local engine, {workers} threads in the step process"
    lines = [f"## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: exclusion_masks and validation_split as "
             f"tasks ({where}, host {os.uname().nodename}, {os.cpu_count()} CPUs, LOADED by other "
             "sessions' jobs)", "",
             "Command: `PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/joins.py "
             + " ".join(sys.argv[1:]) + "`", "",
             "| MB | docs | step | P | step peak RSS MB | (at start) | step wall s | step CPU s | tasks | task wall s "
             "| task CPU s | step CPU / task CPU | rows | outputs sha256 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for mb, gen in sizes.items():
        for step in ("masks", "split"):
            for r in runs[mb][step]:
                t = r["tasks"]
                ratio = f"{r['cpu'] / t['cpu']:.2f}" if t["cpu"] else "-"
                lines.append(f"| {mb} | {gen['docs']:,} | {step} | {r['partitions']} | {r['peak_mb']:.0f} | "
                             f"{r['base_mb']:.0f} | {r['wall']:.1f} | {r['cpu']:.1f} | {t['n']} | {t['wall']:.1f} | "
                             f"{t['cpu']:.1f} | {ratio} | {r['rows']:,} | {r['sha256'][:16]} |")
    lines.append("")
    for mb in sizes:
        for step in ("masks", "split"):
            same = len({r["sha256"] for r in runs[mb][step]}) == 1
            lines.append(f"- {mb} MB {step}: outputs identical in every run: {same}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 400], help="corpus sizes in MB")
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 8], help="validation_split's ranges")
    ap.add_argument("--workers", type=int, default=2, help="CPUs of the local Ray instance (local: threads)")
    ap.add_argument("--engine", choices=["ray", "local"], default="ray", help="where the tasks run")
    ap.add_argument("--before", default=None, help="also measure this git revision's one-process steps")
    ap.add_argument("--folder", default="/tmp/joins", help="corpora and upstream (kept)")
    ap.add_argument("--out", default=None, help="append the report to this file")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kind, folder, *rest = a.child
        if kind == "prep":
            out = child_prep(int(rest[0]), Path(folder))
        else:
            out = child_step(Path(folder), rest[0], int(rest[1]), int(rest[2]), *rest[3:])
        print(json.dumps(out))
        return
    old = None
    if a.before:
        old = Path(a.folder) / "before"
        subprocess.run(["rm", "-rf", str(old)], check=True)
        old.mkdir(parents=True)
        subprocess.run(f"git -C {REPO} archive {a.before} | tar -x -C {old}", shell=True, check=True)
    sizes, runs = {}, {}
    for mb in a.sizes:
        folder = Path(a.folder) / f"{mb}mb"
        done = folder / "prep.json"
        if not done.exists():
            folder.mkdir(parents=True, exist_ok=True)
            done.write_text(json.dumps(run_child(["prep", str(folder), str(mb)])))
        sizes[mb] = json.loads(done.read_text())
        runs[mb] = {}
        for step, ps in (("masks", [1]), ("split", a.partitions)):
            ps = ps + ([0] if a.before else [])
            runs[mb][step] = [run_child(["step", str(folder), step, str(p), str(a.workers), a.engine],
                                        old if p == 0 else REPO)
                              for p in ps]
        print(json.dumps({"mb": mb, "runs": runs[mb]}), flush=True)
    text = report(sizes, runs, a.workers, a.engine)
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
