"""Benchmark: token_shards (stages/tokens/shards.build_token_shards) of the code at REV beside this checkout's, and
raw `encode_batch_fast` of the same raw text (the whole-graph ratio's reference), fresh processes.

    PYTHONPATH=. .venv/bin/python bench/token_shards.py --run /tmp/lead21/bR/400mb/local-2-in_process-r1 \\
        --old main --repeats 3

`--run`: a finished bench/graph.py run folder (its mix.yaml and storage/ with raw/, split/ and
mix/tokenizer/); each process copies those into its own temporary storage root (not timed). Each repeat
runs old, new and the reference in three fresh processes, interleaved (the order rotating); engine
local with `--cpus` threads, RAYON_NUM_THREADS=2 (as bench/graph.py). Per run: wall and CPU seconds
(user / system), minor page faults and peak RSS of the process; the reference encodes every raw
document's text in batches of packing.encode_batch_docs with 2 Rust threads, and its CPU per encoded MB
is printed beside token_shards' (which encodes only the documents its budgets need). Checked: every
file under mix/ (shards, doc index) and tokens/shard_stats.json are the same bytes old and new.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WAYS = ("old", "new", "reference")


def _usage() -> dict:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"user": r.ru_utime, "sys": r.ru_stime, "minflt": r.ru_minflt, "wall": time.monotonic()}


def _delta(a: dict, b: dict) -> dict:
    d = {k: b[k] - a[k] for k in a}
    d["cpu"] = d["user"] + d["sys"]
    with open("/proc/self/status") as f:
        d["peak_rss_mb"] = next(int(x.split()[1]) for x in f if x.startswith("VmHWM")) / 1024
    return d


def _copy_inputs(run: Path, root: Path) -> None:
    for part in ("raw", "split", "mix/tokenizer"):
        shutil.copytree(run / "storage" / part, root / part)


def measure(run: Path, cpus: int, warm: bool = False) -> dict:
    """In this process (whichever mix_assets is on the path): token_shards on a copy of the run's inputs;
    `warm`: the second of two builds (the first, not timed, fills the token-id cache: an incremental rebuild)."""
    from mix_assets.config import load_spec
    from mix_assets.core import engine, layout
    from mix_assets.stages.tokens.shards import build_token_shards
    from mix_assets.core.storage import Storage

    spec = load_spec(run / "mix.yaml")
    with tempfile.TemporaryDirectory(prefix="bench-token-shards-") as tmp:
        _copy_inputs(run, Path(tmp) / "storage")
        storage = Storage(str(Path(tmp) / "storage"))
        if warm:
            build_token_shards(storage, spec, scratch_dir=tmp, eng=engine.Engine(num_cpus=cpus))
        u0 = _usage()
        res = build_token_shards(storage, spec, scratch_dir=tmp, eng=engine.Engine(num_cpus=cpus))
        got = _delta(u0, _usage())
        mix = Path(tmp) / "storage" / layout.MIX_DIR
        files = sorted(p for p in mix.rglob("*") if p.is_file() and "tokenizer" not in p.parts)
        digest = hashlib.sha256()
        for p in [*files, Path(storage.local_path(layout.SHARD_STATS))]:
            digest.update(str(p.relative_to(tmp)).encode() + hashlib.sha256(p.read_bytes()).digest())
    return {**got, "bytes": res.encoded_bytes, "tokens": res.encoded_tokens, "files": len(files),
            "digest": digest.hexdigest()}


def reference(run: Path) -> dict:
    """encode_batch_fast over every raw document's text (bench/graph.py child_encode's loop)."""
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    from mix_assets.config import load_spec

    spec = load_spec(run / "mix.yaml")
    tok = Tokenizer.from_file(str(run / "storage" / "mix" / "tokenizer" / "tokenizer.json"))
    texts = []
    for s in spec.sources:
        texts += pq.read_table(run / "storage" / "raw" / s.name / "documents.parquet", columns=["text"]).column(0).to_pylist()
    nbytes = sum(len(x.encode()) for x in texts)
    n = spec.packing.encode_batch_docs
    u0 = _usage()
    ntok = 0
    for i in range(0, len(texts), n):
        ntok += sum(len(e.ids) for e in tok.encode_batch_fast(texts[i : i + n], add_special_tokens=False))
    return {**_delta(u0, _usage()), "bytes": nbytes, "tokens": ntok}


def _median(xs: list) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def _per_mb(g: dict) -> str:
    return f"{g['cpu'] / (g['bytes'] / 1e6):.3f}" if g["bytes"] else "—"


def compare(a) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from lsh_reduce import REPO, old_code  # the same git archive export

    code = {"old": old_code(a.old, Path(tempfile.gettempdir()) / "bench-token-shards"), "new": REPO, "reference": REPO}
    runs = {w: [] for w in WAYS}
    print(f"{a.run}: token_shards{' (warm: second build, token-id cache hits)' if a.warm else ''}, {a.old} (old) vs "
          f"this checkout (new), engine local x{a.cpus}, RAYON_NUM_THREADS=2; "
          f"reference: encode_batch_fast of every raw document")
    print("| repeat | way | wall s | CPU s | user s | sys s | minor faults | peak RSS MB | MB encoded | CPU s / MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in range(a.repeats):
        for way in WAYS[r % 3:] + WAYS[: r % 3]:
            env = dict(os.environ, PYTHONPATH=str(code[way]), RAYON_NUM_THREADS="2")
            flag = ["--reference-child"] if way == "reference" else ["--measure"] + (["--warm"] if a.warm else [])
            done = subprocess.run([sys.executable, __file__, "--run", str(a.run), "--cpus", str(a.cpus), *flag],
                                  env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{way} failed:\n{done.stderr[-3000:]}")
            g = json.loads(done.stdout.strip().splitlines()[-1])
            runs[way].append(g)
            print(f"| {r + 1} | {way} | {g['wall']:.1f} | {g['cpu']:.1f} | {g['user']:.1f} | {g['sys']:.1f} | "
                  f"{g['minflt']} | {g['peak_rss_mb']:.0f} | {g['bytes'] / 1e6:.1f} | {_per_mb(g)} |",
                  flush=True)
    med = {w: {k: _median([g[k] for g in runs[w]]) for k in ("wall", "cpu", "peak_rss_mb")} for w in WAYS}
    for k, what in (("wall", "wall s"), ("cpu", "CPU s"), ("peak_rss_mb", "peak RSS MB")):
        print(f"median {what}: old {med['old'][k]:.1f}, new {med['new'][k]:.1f} "
              f"(new / old {med['new'][k] / med['old'][k]:.3f})")
    if a.warm:  # nothing encoded: no per-MB figure
        per_mb = None
    else:
        per_mb = {w: _median([g["cpu"] / (g["bytes"] / 1e6) for g in runs[w]]) for w in WAYS}
    if per_mb:
        print(f"median CPU s per encoded MB: old {per_mb['old']:.3f}, new {per_mb['new']:.3f}, reference "
              f"{per_mb['reference']:.3f} (old / reference {per_mb['old'] / per_mb['reference']:.2f}, new / reference "
              f"{per_mb['new'] / per_mb['reference']:.2f})")
    same = len({g["digest"] for w in ("old", "new") for g in runs[w]}) == 1
    print(f"same shards, doc index and shard_stats.json every old and new run: {same}")
    if not same:
        raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="a bench/graph.py run folder (mix.yaml, storage/)")
    ap.add_argument("--old", default="main", help="git revision of the old code (default: main)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=2, help="in-process engine threads")
    ap.add_argument("--warm", action="store_true",
                    help="time the second of two builds on the same storage (token-id cache hits: an incremental rebuild)")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--reference-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure or a.reference_child:
        print(json.dumps(measure(a.run, a.cpus, a.warm) if a.measure else reference(a.run)))
        return
    compare(a)


if __name__ == "__main__":
    main()
