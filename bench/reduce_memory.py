"""Peak RSS of the per-document reduce steps at two corpus sizes, before and after a change (issue 13 §3).

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/reduce_memory.py --sizes 25 100
    ... --before <git rev, default: merge-base with main>  --folder /tmp/reduce-memory  --out <report.md>

Corpus per size: bench/graph.py's (../mix_assets_tests/support/gen_corpus.py Markov prose over the shared books, 10 % planted
near-copies at Jaccard 0.80-0.85, four JSONL sources, its mix.yaml), kept in --folder between runs.
The graph is materialised once per size with this checkout's code, in process, up to `manifest`
(its upstream assets and their own checks; separate check steps such as zero_eval_overlap and
shards_audit_clean are left out). Then, for each code tree (`before`: `git archive` of --before;
`after`: this checkout), each measured step runs in a fresh process with `dg.materialize` over that
storage: the assets exclusion_masks and validation_split (with the checks they emit themselves),
the checks val_disjoint_from_train, val_share_in_tolerance and manifest_self_consistent alone.
Per step: VmRSS once the code and the Definitions are loaded (`base`), VmHWM at the end (`peak`),
the sha256 of the files the step writes and its metadata (minus peak_rss_mb and *_seconds), which
must be the same before and after. Growth: peak at the larger size / peak at the smaller - 1
(target < 10 %), and (peak_hi - peak_lo) / (docs_hi - docs_lo) bytes per added document.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = [  # (label, asset key, check name or None)
    ("exclusion_masks", "exclusion_masks", None),
    ("validation_split", "validation_split", None),
    ("val_disjoint_from_train", "validation_split", "val_disjoint_from_train"),
    ("val_share_in_tolerance", "validation_split", "val_share_in_tolerance"),
    ("manifest_self_consistent", "manifest", "manifest_self_consistent"),
]
WRITES = {"exclusion_masks": ["EXCLUSION_MASKS", "COMPOSITION"], "validation_split": ["VALIDATION_SPLIT"]}  # core/layout


def _status(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


# -- children (run with PYTHONPATH = the code tree under test) ----------------------------------------------
def _defs(cfg: Path):
    import warnings

    warnings.filterwarnings("ignore")
    import dagster as dg

    from mix_assets.config import load_spec
    from mix_assets.definitions import build_definitions

    spec = load_spec(str(cfg))
    defs = build_definitions(spec)
    assets = list(defs.assets) + list(defs.asset_checks or [])
    separate = [k for a in assets if isinstance(a, dg.AssetChecksDefinition) for k in a.check_keys]
    return dg, spec, defs, assets, separate


def _metadata(result) -> dict:
    out = {}
    for ev in result.all_events:
        data = ev.event_specific_data
        mat = getattr(data, "materialization", None)
        ev_md = mat.metadata if mat is not None else getattr(data, "metadata", None)
        name = str(getattr(mat, "asset_key", None) or getattr(data, "check_name", ev.event_type_value))
        if ev.event_type_value in ("ASSET_MATERIALIZATION", "ASSET_CHECK_EVALUATION") and ev_md is not None:
            out[name] = {k: str(getattr(v, "value", v)) for k, v in sorted(ev_md.items())
                         if k != "peak_rss_mb" and not k.endswith("_seconds")}
    return out


def child_prep(cfg: Path) -> dict:
    dg, _, defs, assets, separate = _defs(cfg)
    sel = dg.AssetSelection.assets("manifest").upstream() - dg.AssetSelection.checks(*separate)
    r = dg.materialize(assets, resources=defs.resources, instance=dg.DagsterInstance.ephemeral(), selection=sel,
                       raise_on_error=False)
    return {"success": r.success}


def child_step(cfg: Path, label: str) -> dict:
    dg, spec, defs, assets, separate = _defs(cfg)
    _, key, check = next(s for s in STEPS if s[0] == label)
    if check:
        sel = dg.AssetSelection.checks(dg.AssetCheckKey(dg.AssetKey(key), check))
    else:
        sel = dg.AssetSelection.assets(key) - dg.AssetSelection.checks(*separate)
    base = _status("VmRSS")
    t0 = time.perf_counter()
    r = dg.materialize(assets, resources=defs.resources, instance=dg.DagsterInstance.ephemeral(), selection=sel,
                       raise_on_error=False)
    secs = time.perf_counter() - t0
    from mix_assets.core import layout

    root = Path(spec.storage.root)
    files = {k: hashlib.sha256((root / getattr(layout, k)).read_bytes()).hexdigest() for k in WRITES.get(label, [])}
    return {"success": r.success, "base": base, "peak": _status("VmHWM"), "secs": secs, "files": files,
            "metadata": _metadata(r)}


# -- parent ----------------------------------------------------------------------------------------
def run(code: Path, args: list[str], log: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "MIX_EXECUTOR": "in_process"}
    with open(log, "a") as fh:
        r = subprocess.run([sys.executable, __file__, "--child", *args], cwd=code, env=env,
                           stdout=subprocess.PIPE, stderr=fh, text=True)
    lines = [x for x in r.stdout.splitlines() if x.startswith("BENCH-RESULT ")]
    if r.returncode or not lines:
        raise SystemExit(f"child {args} failed (exit {r.returncode}); log: {log}\n{r.stdout[-2000:]}")
    return json.loads(lines[-1].removeprefix("BENCH-RESULT "))


def corpus(mb: int, folder: Path) -> tuple[Path, int]:
    """bench/graph.py's corpus and mix.yaml for `mb` MB (generated once), and its document count."""
    out = folder / f"{mb}mb"
    if not (out / "gen.json").exists():
        out.mkdir(parents=True, exist_ok=True)
        code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import graph; "
                "print('GEN ' + json.dumps(graph.child_gen(int(sys.argv[2]), __import__('pathlib').Path(sys.argv[3]),"
                " 0, 4.0)))")
        r = subprocess.run([sys.executable, "-c", code, str(REPO / "bench"), str(mb), str(out)], check=True,
                           stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        (out / "gen.json").write_text(next(x for x in r.stdout.splitlines() if x.startswith("GEN "))[4:])
    return out / "mix.yaml", json.loads((out / "gen.json").read_text())["docs"]


def before_tree(rev: str, folder: Path) -> Path:
    out = folder / f"code-{rev[:12]}"
    if not out.exists():
        out.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, stdout=subprocess.PIPE).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def report(sizes: list[int], docs: dict, res: dict, rev: str) -> str:
    lo, hi = sizes[0], sizes[-1]
    lines = [f"Sizes {lo} and {hi} MB ({docs[lo]:,} and {docs[hi]:,} documents); before = `{rev[:12]}`, "
             "after = this checkout. MB = 1e6 bytes; peak = the step process's VmHWM; step = peak - base, "
             "base = its VmRSS with the code and Definitions loaded (the dagster import, ~215-230 MB).", "",
             "| step | code | peak MB " + " / ".join(f"{s}" for s in sizes) + " | step MB " + " / ".join(
                 f"{s}" for s in sizes) + " | peak growth (target < 10 %) | B per added doc: peak / step "
             f"| s at {hi} MB | same outputs as before |", "|---|---|---|---|---|---|---|---|"]
    for label, *_ in STEPS:
        for code in ("before", "after"):
            r = {s: res[(code, label, s)] for s in sizes}
            peak = {s: r[s]["peak"] / 1e6 for s in sizes}
            step = {s: (r[s]["peak"] - r[s]["base"]) / 1e6 for s in sizes}
            added = max(docs[hi] - docs[lo], 1)
            same = "—" if code == "before" else ("yes" if all(
                (res[("before", label, s)]["files"], res[("before", label, s)]["metadata"]) ==
                (r[s]["files"], r[s]["metadata"]) for s in sizes) else "**no**")
            ok = "" if all(r[s]["success"] for s in sizes) else " (step failed)"
            lines.append(
                f"| {label}{ok} | {code} | " + " / ".join(f"{peak[s]:.0f}" for s in sizes) + " | "
                + " / ".join(f"{step[s]:.0f}" for s in sizes) + f" | {peak[hi] / peak[lo] - 1:+.1%} | "
                f"{(peak[hi] - peak[lo]) * 1e6 / added:,.0f} / {(step[hi] - step[lo]) * 1e6 / added:,.0f} | "
                f"{r[hi]['secs']:.1f} | {same} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[25, 100], help="corpus sizes in MB (smallest first)")
    p.add_argument("--before", default=None, help="git rev of the 'before' code (default: merge-base HEAD main)")
    p.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "reduce-memory")
    p.add_argument("--out", type=Path, default=None, help="write the report here (markdown) as well")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        kind, cfg, *rest = a.child
        out = child_prep(Path(cfg)) if kind == "prep" else child_step(Path(cfg), rest[0])
        print("BENCH-RESULT " + json.dumps(out))
        return
    rev = a.before or subprocess.run(["git", "-C", str(REPO), "merge-base", "HEAD", "main"], check=True,
                                     stdout=subprocess.PIPE, text=True).stdout.strip()
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", rev], check=True, stdout=subprocess.PIPE,
                         text=True).stdout.strip()
    a.folder.mkdir(parents=True, exist_ok=True)
    trees = {"before": before_tree(rev, a.folder), "after": REPO}
    log = a.folder / "bench.log"
    docs, res = {}, {}
    for mb in sorted(a.sizes):
        cfg, docs[mb] = corpus(mb, a.folder)
        if not (cfg.parent / "prepared").exists():
            if not run(REPO, ["prep", str(cfg)], log)["success"]:
                raise SystemExit(f"preparing {cfg} failed; log: {log}")
            (cfg.parent / "prepared").write_text("ok")
        for label, *_ in STEPS:
            for code, tree in trees.items():
                res[(code, label, mb)] = r = run(tree, ["step", str(cfg), label], log)
                print(f"{mb} MB {label} {code}: peak {r['peak'] / 1e6:.0f} MB, base {r['base'] / 1e6:.0f} MB, "
                      f"{r['secs']:.1f} s, success {r['success']}", flush=True)
    (a.folder / "results.json").write_text(json.dumps({"docs": docs, "rev": rev, "runs": [
        {"code": c, "step": st, "mb": mb, **r} for (c, st, mb), r in res.items()]}, indent=1))
    text = report(sorted(a.sizes), docs, res, rev)
    print(text)
    if a.out:
        a.out.write_text(text)


if __name__ == "__main__":
    main()
