"""token_shards' pass 2 alone (stages/tokens/shards._pack): its peak RSS over its start, old code vs this checkout.

    PYTHONPATH=$PWD .venv/bin/python bench/pack_memory.py --appearances 170000 680000 2720000 --old main
    ... bench/pack_memory.py --run OUT/1600mb/local-2-multiprocess --old main   # the whole step, real inputs

Per size N and way (old: mix_assets at `--old`, exported with git archive; new: this checkout), a fresh
process builds four sources' documents as token_shards holds them (Arrow doc_id strings `part_x-%09d`,
int64 offsets and lengths; N / 4 documents each, one appearance each, 3 tokens, a fake spill reader
returning zeros: the shard bytes are not what is measured) and runs `_pack` for the train split on a
temporary storage root. Measured: VmHWM (reset with /proc/self/clear_refs just before the call) minus
VmRSS at the call, so the pass's own peak above what the step held before it; wall and CPU seconds of
the call. The stream docs' sha256 must agree between old and new (the stream order and its file bytes).
Not measured here: pass 1 (the encode map), whose memory is the engine's window of chunk results.
`--run`: instead, `build_token_shards` on a finished bench/graph.py run's inputs (raw, split, tokenizer and
its token-id cache, hard-linked into a temporary storage root, so pass 1 reads the cache and encodes
nothing), local engine x2, old and new one after the other: the peak of pass 1 (`_encode_sources`) and of
each split's pass 2 (`_pack`), each VmHWM reset at its start; shard_stats.json and the stream docs compared.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "pack_memory.md"
NAMES = ("part_a", "part_b", "part_c", "part_d")


def _status(key: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith(key)) / 1024


def child(n: int) -> dict:
    import numpy as np
    import pyarrow as pa

    from mix_assets.core import tables
    from mix_assets.core.storage import Storage
    from mix_assets.stages.tokens import shards as S

    per, parts = {}, []
    for s in NAMES:
        k = n // len(NAMES)
        sd = S._SourceDocs(pa.array([f"{s}-{i:09d}" for i in range(k)]), 0, np.full(k, 1000, np.int64), name=s)
        sd.offset[:] = 0
        sd.length[:] = 3
        per[s] = sd
        parts.append((np.arange(k, dtype=np.int64), np.zeros(k, np.int64), np.full(k, 3, np.int64)))

    class Zeros:
        def read(self, offset: int, n: int):
            return np.zeros(n, np.uint16)

    plan = S.PackingPlan(seq_len=512, sample_len=512, shard_tokens=1 << 20, separator_id=None, seed=1234)
    with tempfile.TemporaryDirectory(prefix="bench-pack-memory-") as tmp:
        st = Storage(tmp)
        tables.release_unused()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        r0, t0 = _status("VmRSS:"), time.perf_counter()
        u0 = resource.getrusage(resource.RUSAGE_SELF)
        stats = S._pack("train", per, list(NAMES), parts, Zeros(), plan, "uint16", st)
        u1 = resource.getrusage(resource.RUSAGE_SELF)
        return {"n": n, "rss_before_mb": r0, "peak_mb": _status("VmHWM:"), "secs": time.perf_counter() - t0,
                "cpu": (u1.ru_utime - u0.ru_utime) + (u1.ru_stime - u0.ru_stime), "samples": stats.samples,
                "documents": stats.documents, "stream_docs": st.sha256("tokens/stream_docs/train.parquet")}


def child_run(run: Path) -> dict:
    import hashlib

    from mix_assets.config import load_spec
    from mix_assets.core import engine
    from mix_assets.core.storage import Storage
    from mix_assets.stages.tokens import shards as S

    phases = []
    for name in ("_encode_sources", "_pack"):
        fn = getattr(S, name)

        def timed(*a, _fn=fn, _name=name, **k):
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            r0, t0 = _status("VmRSS:"), time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                phases.append({"phase": _name, "rss_before_mb": r0, "peak_mb": _status("VmHWM:"),
                               "secs": time.perf_counter() - t0})
        setattr(S, name, timed)
    spec = load_spec(run / "mix.yaml")
    with tempfile.TemporaryDirectory(prefix="bench-pack-memory-") as tmp:
        root = Path(tmp) / "storage"
        for part in ("raw", "split", "mix/tokenizer", "tokens/cache"):
            (root / part).parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-al", str(run / "storage" / part), str(root / part)], check=True)
        st = Storage(str(root))
        S.build_token_shards(st, spec, scratch_dir=tmp, eng=engine.Engine(num_cpus=2))
        digest = hashlib.sha256(b"".join(bytes.fromhex(st.sha256(k)) for k in (
            "tokens/shard_stats.json", "tokens/stream_docs/train.parquet", "tokens/stream_docs/val.parquet")))
        return {"phases": phases, "peak_mb": _status("VmHWM:"), "digest": digest.hexdigest()}


def main_run(a, code: dict) -> None:
    rows = ["| way | phase | RSS at its start MB | its peak MB | seconds |", "|---|---|---|---|---|"]
    got = {}
    for way in ("old", "new"):
        env = dict(os.environ, PYTHONPATH=str(code[way]), RAYON_NUM_THREADS="2")
        done = subprocess.run([sys.executable, __file__, "--child-run", str(a.run)], env=env, capture_output=True,
                              text=True)
        if done.returncode:
            raise SystemExit(f"{way} failed:\n{done.stderr[-3000:]}")
        g = got[way] = json.loads(done.stdout.strip().splitlines()[-1])
        for p, split in zip(g["phases"], ("pass 1 (token-id cache)", "pass 2 train", "pass 2 val")):
            rows.append(f"| {way} | {split} | {p['rss_before_mb']:.0f} | {p['peak_mb']:.0f} | {p['secs']:.1f} |")
            print(rows[-1], flush=True)
    peak = {w: max(p["peak_mb"] for p in got[w]["phases"]) for w in got}
    same = got["old"]["digest"] == got["new"]["digest"]
    cmd = "PYTHONPATH=$PWD .venv/bin/python bench/pack_memory.py " + " ".join(sys.argv[1:])
    body = [f"## Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on a graph run's inputs", "",
            f"    {cmd}", "", f"`build_token_shards` on `{a.run}`'s inputs, old `{a.old}` vs this checkout; load "
            f"average (1 min) {os.getloadavg()[0]:.2f} at the end (seconds are the loaded host's).", "", *rows, "",
            f"- the step's largest phase peak: new / old {peak['new']:.0f} / {peak['old']:.0f} MB = "
            f"{peak['new'] / peak['old']:.2f}",
            f"- shard_stats.json (every shard's sha256) and both stream docs files the same old and new: {same}", ""]
    a.results.write_text((a.results.read_text().rstrip("\n") + "\n\n" if a.results.exists() else "") + "\n".join(body))
    print("\n".join(body))
    if not same:
        raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--appearances", type=int, nargs="+", default=[170_000, 680_000])
    ap.add_argument("--old", default="main", help="git revision of the old code (default: main)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="appends a section (created if missing)")
    ap.add_argument("--run", type=Path, help="a bench/graph.py run folder (mix.yaml, storage/ with its token cache)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--child-run", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child)))
        return
    if a.child_run:
        print(json.dumps(child_run(a.child_run)))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from lsh_reduce import old_code  # the same git archive export

    code = {"old": old_code(a.old, Path(tempfile.gettempdir()) / "bench-pack-memory"), "new": REPO}
    if a.run:
        return main_run(a, code)
    load0 = os.getloadavg()
    rows = ["| appearances | way | peak over start MB | bytes / appearance | wall s | CPU s | stream docs sha256 |",
            "|---|---|---|---|---|---|---|"]
    ratios = []
    for n in a.appearances:
        got = {}
        for way in ("old", "new"):
            env = dict(os.environ, PYTHONPATH=str(code[way]))
            done = subprocess.run([sys.executable, __file__, "--child", str(n)], env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{way} failed:\n{done.stderr[-3000:]}")
            g = got[way] = json.loads(done.stdout.strip().splitlines()[-1])
            d = g["peak_mb"] - g["rss_before_mb"]
            rows.append(f"| {n:,} | {way} | {d:.0f} | {d * 2**20 / n:.0f} | {g['secs']:.1f} | {g['cpu']:.1f} | "
                        f"`{g['stream_docs'][:12]}` |")
            print(rows[-1], flush=True)
        same = got["old"]["stream_docs"] == got["new"]["stream_docs"] and got["old"]["documents"] == got["new"]["documents"]
        if not same:
            raise SystemExit(f"{n}: old and new stream docs or document counts differ")
        o, w = (got[x]["peak_mb"] - got[x]["rss_before_mb"] for x in ("old", "new"))
        ratios.append(f"{n:,} appearances: new / old pass-2 peak {w:.0f} / {o:.0f} MB = {w / o:.2f}; CPU s "
                      f"{got['new']['cpu']:.1f} / {got['old']['cpu']:.1f} = {got['new']['cpu'] / got['old']['cpu']:.2f}")
    load1 = os.getloadavg()
    cmd = "PYTHONPATH=$PWD .venv/bin/python bench/pack_memory.py " + " ".join(sys.argv[1:])
    body = [f"## Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "", f"    {cmd}", "",
            f"Old: `{a.old}`; new: this checkout. Load average (1 min) {load0[0]:.2f} at start, {load1[0]:.2f} at end "
            "(2 cores shared with other work: seconds are the loaded host's; the peaks are not timing).", "",
            *rows, "", *[f"- {x}" for x in ratios], "- stream docs (sha256) and distinct document counts: the same old "
            "and new at every size.", ""]
    head = "# bench/pack_memory.py: token_shards' pass 2 alone, peak RSS old vs new\n\n" + __doc__.split("\n\n", 2)[2] + "\n"
    text = (a.results.read_text().rstrip("\n") + "\n\n" if a.results.exists() else head + "\n") + "\n".join(body)
    a.results.write_text(text)
    print("\n".join(body))


if __name__ == "__main__":
    main()
