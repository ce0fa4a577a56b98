"""dedup_keys' reduce (`reduce_signatures`) on Ray at 1 and N partitions: the step process's peak RSS and CPU
seconds beside the tasks' seconds, at two corpus sizes (issue 29).

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/dedup_partitions.py \\
        --sizes 100 400 --partitions 1 8 [--workers 2] [--before REV] [--folder /tmp/dedup-partitions] [--out <report.md>]

Corpus per size: bench/graph.py's generator (order-2 Markov prose over the shared books, 10 % planted
near-copies at Jaccard 0.80-0.85), spread over four sources as documents parquet files; their signature
files are written once (dedup_keys' map, threads) and kept in --folder. Each measurement is a fresh process:
a local Ray instance of --workers CPUs, then `reduce_signatures` over the stored signatures with
`dedup.partitions` = P (the map is not measured; no stored verified pairs are used or written, so every run
compares every candidate); the reduce writes the dedup_keys file (`reduce_to`; older code: `reduce_signatures`,
then the table written as the asset wrote it), whose sha256 is shown. Step process = the driver: `peak` its VmHWM
(the largest Ray worker's VmHWM beside it), `cpu` its
user+system seconds during the reduce, `wall` the reduce's seconds; `tasks` = the sum of the tasks' own
wall and thread-CPU seconds (each task timed inside its worker). The dedup_keys table's sha256 must be the
same for every P. The ratio the issue asks for: step-process CPU seconds / task CPU seconds. With --before, the reduce of that
revision's code (`git archive`; P shown as "before") is measured in the same way, beside.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("part_a", "part_b", "part_c", "part_d")


def _status(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


class Timed:
    """A task function that also returns its own wall and thread-CPU seconds (pickled by value: __main__)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, chunk):
        w, c = time.perf_counter(), time.thread_time()
        out = self.fn(chunk)
        return out, time.perf_counter() - w, time.thread_time() - c


def _worker_peaks() -> list[int]:
    """VmHWM (bytes) of every Ray worker process under this one (the local instance's workers: each one's peak
    over every task it ran)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    todo, out = list(kids.get(os.getpid(), [])), []
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            if b"default_worker" in cmd or cmd.startswith(b"ray::"):
                out += [int(line.split()[1]) * 1024 for line in open(f"/proc/{pid}/status")
                        if line.startswith("VmHWM:")]
        except OSError:
            continue
    return out


def child_prep(mb: int, folder: Path) -> dict:
    """The corpus as documents parquet files and their stored signatures."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(REPO))
    from mix_assets.core import engine
    from mix_assets.core.storage import Storage
    from mix_assets.stages.dedup import dedup as lib
    from mix_assets_tests.support import gen_corpus as gc
    from mix_assets_tests.support.shared_data import find_shared_data

    data = find_shared_data()
    books = sorted(p for n in ("gutenberg", "sherlock_holmes", "botchan", "nltk_state_union")
                   for p in (data / "sources" / n).glob("*.txt"))
    corpus = gc.generate_bytes(gc.MarkovModel.from_files(books, order=2), int(mb * 1e6), seed=13)
    texts = corpus.texts
    paths = {}
    for k, s in enumerate(SOURCES):
        rows = list(range(k, len(texts), len(SOURCES)))
        paths[s] = str(folder / f"{s}.parquet")
        pq.write_table(pa.table({"doc_id": [f"{s}-{i:08d}" for i in rows], "text": [texts[i] for i in rows],
                                 "n_chars": [len(texts[i]) for i in rows]}), paths[s], row_group_size=8192)
    storage = Storage(str(folder / "storage"))
    t0 = time.perf_counter()
    lib.sign_sources(storage, paths, {s: f"bench-{mb}-{s}" for s in SOURCES}, lib.DedupParams(),
                     engine.Engine(num_cpus=2))
    return {"docs": len(texts), "bytes": int(sum(len(t.encode()) for t in texts)),
            "sign_secs": time.perf_counter() - t0, "pairs": int(len(corpus.pairs))}


def child_reduce(folder: Path, partitions: int, workers: int) -> dict:
    from mix_assets.core import engine
    from mix_assets.core.storage import Storage
    from mix_assets.stages.dedup import dedup as lib

    eng = engine.Engine(kind="ray", num_cpus=workers, object_store_mb=512)
    before = partitions == 0  # another revision's code, without the knob
    params = lib.DedupParams() if before else lib.DedupParams(partitions=partitions)
    tasks = {"n": 0, "wall": 0.0, "cpu": 0.0}
    plain = engine.map_chunks

    def timed_map(fn, chunks, e):
        for out, w, c in plain(Timed(fn), chunks, e):
            tasks["n"] += 1
            tasks["wall"] += w
            tasks["cpu"] += c
            yield out

    engine.map_chunks = timed_map
    paths = {s: str(folder / f"{s}.parquet") for s in SOURCES}
    storage, key = Storage(str(folder / "storage")), "bench/dedup_keys.parquet"
    with engine.ray_session(eng):
        base, c0, w0 = _status("VmRSS"), _cpu(), time.perf_counter()
        if hasattr(lib, "reduce_to"):  # the table written by the reduce, never whole in this process
            st = lib.reduce_to(storage, key, paths, {s: 0 for s in SOURCES}, params, eng=eng, reuse_pairs=False)
        else:  # older code: the table built here, written as the asset wrote it
            from mix_assets.core import tables

            table, st = lib.reduce_signatures(storage, paths, {s: 0 for s in SOURCES}, params, eng=eng,
                                              reuse_pairs=False)
            tables.write_parquet(storage, key, table)
            del table
        wall, cpu, peak = time.perf_counter() - w0, _cpu() - c0, _status("VmHWM")
        workers = _worker_peaks()
    digest = storage.sha256(key)
    storage.delete(key)
    return {"partitions": "before" if before else partitions, "wall": wall, "cpu": cpu, "peak_mb": peak / 1e6, "base_mb": base / 1e6,
            "worker_peak_mb": max(workers, default=0) / 1e6,
            "tasks": tasks, "sha256": digest, "docs": st["documents"],
            "candidate_pairs": st["candidate_pairs"], "rounds": st.get("component_rounds", "-"),
            "near_dup": st["excluded_near_dup"]}


def run_child(args: list[str], tree: Path = REPO) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, __file__, "--child", *args], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"child {args} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(sizes: dict, runs: dict, workers: int) -> str:
    host = os.uname().nodename
    lines = [f"## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: dedup_keys reduce at 1 vs N partitions "
             f"(Ray, {workers} CPUs, host {host}, {os.cpu_count()} CPUs, LOADED by other sessions' jobs)", "",
             "Command: `PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/dedup_partitions.py "
             + " ".join(sys.argv[1:]) + "`", "",
             "| MB | docs | P | step peak RSS MB | largest worker peak MB | step wall s | step CPU s | tasks | task wall s "
             "| task CPU s | step CPU / task CPU | rounds | file sha256 |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for mb, gen in sizes.items():
        for r in runs[mb]:
            t = r["tasks"]
            lines.append(f"| {mb} | {gen['docs']:,} | {r['partitions']} | {r['peak_mb']:.0f} | "
                         f"{r.get('worker_peak_mb', 0):.0f} | {r['wall']:.1f} | "
                         f"{r['cpu']:.1f} | {t['n']} | {t['wall']:.1f} | {t['cpu']:.1f} | "
                         f"{r['cpu'] / max(t['cpu'], 1e-9):.2f} | {r['rounds']} | {r['sha256'][:16]} |")
    lines.append("")
    for mb in sizes:
        mine = [r for r in runs[mb] if r["partitions"] != "before"]
        a = min((r for r in mine if r["partitions"] == mine[0]["partitions"]), key=lambda r: r["peak_mb"])
        b = min((r for r in mine if r["partitions"] == mine[-1]["partitions"]), key=lambda r: r["peak_mb"])
        same = len({r["sha256"] for r in runs[mb]}) == 1
        lines.append(f"- {mb} MB: peak P={b['partitions']} / P={a['partitions']} = {b['peak_mb'] / a['peak_mb']:.2f}; "
                     f"step CPU P={b['partitions']} / P={a['partitions']} = {b['cpu'] / max(a['cpu'], 1e-9):.2f}; "
                     f"tables identical: {same}")
        old_runs = [r for r in runs[mb] if r["partitions"] == "before"]
        if old_runs:
            o = min(old_runs, key=lambda r: r["peak_mb"])
            lines.append(f"  before: peak P={a['partitions']} / before = {a['peak_mb'] / o['peak_mb']:.2f}, step CPU P="
                         f"{a['partitions']} / before = {a['cpu'] / max(o['cpu'], 1e-9):.2f}")
    if len(sizes) > 1:
        lo, hi = list(sizes)[0], list(sizes)[-1]
        for p in dict.fromkeys(r["partitions"] for r in runs[lo]):
            pk = [min(r["peak_mb"] for r in runs[mb] if r["partitions"] == p) for mb in (lo, hi)]
            lines.append(f"- P={p}: smallest step peak {hi} MB / {lo} MB = {pk[1] / pk[0]:.2f} "
                         f"({sizes[hi]['docs'] / sizes[lo]['docs']:.2f}x the documents)")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 400], help="corpus sizes in MB")
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--workers", type=int, default=2, help="CPUs of the local Ray instance")
    ap.add_argument("--before", default=None, help="also measure this git revision's reduce")
    ap.add_argument("--repeat", type=int, default=1, help="runs per P, the P order reversed every other repeat")
    ap.add_argument("--folder", default="/tmp/dedup-partitions", help="corpora and signatures (kept)")
    ap.add_argument("--out", default=None, help="append the report to this file")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kind, folder, *rest = a.child
        if kind == "prep":
            out = child_prep(int(rest[0]), Path(folder))
        else:
            out = child_reduce(Path(folder), int(rest[0]), int(rest[1]))
        print(json.dumps(out))
        return
    sizes, runs = {}, {}
    old = None
    if a.before:
        old = Path(a.folder) / "before"
        subprocess.run(["rm", "-rf", str(old)], check=True)
        old.mkdir(parents=True)
        subprocess.run(f"git -C {REPO} archive {a.before} | tar -x -C {old}", shell=True, check=True)
    for mb in a.sizes:
        folder = Path(a.folder) / f"{mb}mb"
        done = folder / "prep.json"
        if not done.exists():
            folder.mkdir(parents=True, exist_ok=True)
            done.write_text(json.dumps(run_child(["prep", str(folder), str(mb)])))
        sizes[mb] = json.loads(done.read_text())
        ps = a.partitions + ([0] if a.before else [])
        order = [p for k in range(a.repeat) for p in (ps if k % 2 == 0 else ps[::-1])]
        runs[mb] = sorted((run_child(["reduce", str(folder), str(p), str(a.workers)], old if p == 0 else REPO)
                           for p in order), key=lambda r: ps.index(0 if r["partitions"] == "before" else r["partitions"]))
        print(json.dumps({"mb": mb, "runs": runs[mb]}), flush=True)
    text = report(sizes, runs, a.workers)
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
