"""token_shards alone on each engine: seconds, CPU seconds and peak RSS, beside another checkout's code.

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/tokens_engine.py --mb 50 \
        --before /tmp/old-checkout --reps 2

Corpus and config: bench/graph.py's (../mix_assets_tests/support/gen_corpus.py Markov prose, 10 % planted near-copies,
four sources, trained 4096-token BPE, `<|endoftext|>` separator, 1 Mi-token shards); the graph
up to token_shards (raw, dedup, audit, masks, split, tokenizer) is built once in this checkout.
Then each variant rebuilds token_shards (stages/tokens/shards.build_token_shards) in a fresh subprocess,
variants interleaved per repetition, RAYON_NUM_THREADS=--threads:
  before   = `--before`'s mix_assets (e.g. a `git archive` of the previous commit), its own call
  local-N  = this checkout, engine kind local, num_cpus N (threads in the step's process)
  ray-N    = this checkout, a new local Ray instance with N CPUs (started before the clock; its
             start is reported apart)
Seconds = wall of the build_token_shards call; CPU s = user + system of the process and all its
descendants (Ray's raylet and workers included) over the call, from /proc; peak RSS = the driver's
VmHWM, and the largest VmHWM of its descendants (a Ray worker, the raylet, GCS). Each variant's shard_stats.json sha256 is printed: they must all be equal.
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
OUT = REPO / "bench" / "out" / "tokens_engine"
TICK = os.sysconf("SC_CLK_TCK")


def _descendants(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def tree_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of this process and each live descendant, by pid."""
    cpu = {}
    for p in _descendants(os.getpid()):
        try:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            cpu[p] = (int(f[11]) + int(f[12])) / TICK
        except (OSError, IndexError):
            pass
    return cpu


def peak_rss_mb(pid: int | str = "self") -> float:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def child(variant: str, cfg: str, code: str) -> dict:
    sys.path.insert(0, code)
    from mix_assets.config import load_spec
    from mix_assets.core import layout
    from mix_assets.stages.tokens import shards
    from mix_assets.core.storage import Storage

    spec = load_spec(cfg)
    st = Storage(str(spec.resolve(spec.storage.root)), cache_dir=str(spec.resolve(spec.storage.cache_dir)))
    kw, ray_secs = {}, 0.0
    if variant != "before":
        from mix_assets.core import engine

        kind, n = variant.split("-")
        eng = engine.Engine(kind=kind, num_cpus=int(n))
        kw = {"eng": eng, "token_cache": False}  # every variant encodes (not the token-id cache's reads)
        if kind == "ray":
            import ray

            t0 = time.perf_counter()
            ray.init(address="local", **engine.ray_init_options(eng))
            ray_secs = time.perf_counter() - t0
    cpu0, t0 = tree_cpu(), time.perf_counter()
    res = shards.build_token_shards(st, spec, **kw)
    wall = time.perf_counter() - t0
    cpu1 = tree_cpu()
    cpu = sum(v - cpu0.get(p, 0.0) for p, v in cpu1.items())
    child_rss = max((peak_rss_mb(p) for p in cpu1 if p != os.getpid()), default=0.0)
    if ray_secs:
        import ray

        ray.shutdown()
    return {"variant": variant, "secs": wall, "cpu_secs": cpu, "ray_start_secs": ray_secs,
            "peak_rss_mb": peak_rss_mb(), "child_rss_mb": child_rss, "encoded_mb": res.encoded_bytes / 1e6,
            "rounds": res.rounds, "encoded_train_docs": {k: v.encoded_train_documents for k, v in res.sources.items()},
            "stats_sha256": hashlib.sha256(st.read_bytes(layout.SHARD_STATS)).hexdigest()}


def run(args: list[str], threads: int, log: Path) -> dict:
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "MIX_EXECUTOR": "in_process",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    with open(log, "a") as fh:
        r = subprocess.run([sys.executable, __file__, *args], env=env, stdout=subprocess.PIPE, stderr=fh,
                           text=True)
    lines = [x for x in r.stdout.splitlines() if x.startswith("BENCH-RESULT ")]
    if r.returncode or not lines:
        raise SystemExit(f"{args[:2]} failed (exit {r.returncode}); log: {log}")
    return json.loads(lines[-1].removeprefix("BENCH-RESULT "))


def upstream(cfg: Path) -> float:
    """The graph up to token_shards, once (this checkout)."""
    import dagster as dg

    from mix_assets.config import load_spec
    from mix_assets.definitions import build_definitions

    defs = build_definitions(load_spec(str(cfg)))
    sel = dg.AssetSelection.assets("token_shards").upstream() - dg.AssetSelection.assets("token_shards")
    t0 = time.perf_counter()
    r = dg.materialize(list(defs.assets), resources=defs.resources, instance=dg.DagsterInstance.ephemeral(),
                       selection=sel, raise_on_error=False)
    if not r.success:
        raise SystemExit("the graph up to token_shards failed")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=50, help="corpus size in MB")
    ap.add_argument("--variants", nargs="+", default=["before", "local-1", "local-2", "ray-1", "ray-2"])
    ap.add_argument("--before", type=Path, help="a checkout whose mix_assets is the 'before' variant")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2, help="RAYON_NUM_THREADS of every variant")
    ap.add_argument("--seed", type=int, default=13, help="corpus seed (bench/graph.py's)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print("BENCH-RESULT " + json.dumps(child(*a.child)))
        return
    folder = a.out / f"{a.mb}mb"
    cfg, log = folder / "mix.yaml", a.out / "log.txt"
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "storage" / "tokenizer").exists():
        sys.path.insert(0, str(REPO / "bench"))
        import graph

        graph.child_gen(a.mb, folder, a.seed, 4.0)
        print(f"graph up to token_shards: {upstream(cfg):.1f} s", flush=True)
    variants = [v for v in a.variants if v != "before" or a.before]
    for rep in range(a.reps):
        for v in variants:
            code = str(a.before if v == "before" else REPO)
            la = os.getloadavg()
            r = run(["--child", v, str(cfg), code], a.threads, log)
            print(f"rep {rep} {v:8s} {r['secs']:6.1f} s  cpu {r['cpu_secs']:6.1f} s  "
                  f"rss {r['peak_rss_mb']:5.0f} MB (largest child {r['child_rss_mb']:4.0f})  "
                  f"encoded {r['encoded_mb']:.1f} MB  ray start {r['ray_start_secs']:.1f} s  "
                  f"load {la[0]:.2f} {la[1]:.2f}  stats {r['stats_sha256'][:12]}  rounds {r.get('rounds')}  "
                  f"encoded train docs {r.get('encoded_train_docs')}", flush=True)


if __name__ == "__main__":
    main()
