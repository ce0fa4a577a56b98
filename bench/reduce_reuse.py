"""dedup_keys' reduce full vs one of four sources changed, without and with the stored verified pairs (issue 27
item 4; stages/dedup/pairs.py).

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data /work/main/.venv/bin/python bench/reduce_reuse.py --mb 100 \
        [--repeats 3] [--folder /tmp/reduce_reuse] [--out bench/results/reduce_reuse.md]

Corpus: bench/map_reuse.py's (bench/graph.py's prose, `child_gen --filters`, four sources part_a..part_d written
straight to raw parquet), signed with the real map (`dedup.sign_sources`, raw version v1). The change is
map_reuse's: 2 % new documents (copies of part_a's first documents under new ids) appended to part_d, which
gets raw version v2 and is signed again (not timed). No filter decisions (rejected = None).

Each reduce runs in a fresh process (as a Dagster step does: imports, numba's cached kernels loaded on first
use); timed inside it: `dedup.reduce_signatures` alone, wall and CPU seconds; printed with the sha256 of the
dedup_keys table written as Parquet. Modes: "no reuse" = `reuse_pairs=False` (the reduce as before this
change: it compares every candidate pair), "reuse" = the stored pairs: "full" starts with dedup/pairs/
emptied, "1 of 4 changed" with the pairs the full reuse run stored for the v1 data. Runs interleaved per repeat.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
NAMES = ["part_a", "part_b", "part_c", "part_d"]

CHILD = """
import hashlib, io, json, sys, time
import pyarrow.parquet as pq
from mix_assets.core import engine, tables
from mix_assets.core.storage import Storage
from mix_assets.stages.dedup import dedup
st = Storage(sys.argv[1]); names = {names!r}
files = tables.raw_files(st, names)
eng = engine.Engine(num_cpus=1)
c, t = time.process_time(), time.perf_counter()
table, s = dedup.reduce_signatures(st, files, {{n: 0 for n in names}}, dedup.DedupParams(), None, eng,
                                   reuse_pairs=sys.argv[2] == "reuse")
wall, cpu = time.perf_counter() - t, time.process_time() - c
b = io.BytesIO(); pq.write_table(table, b)
print(json.dumps(dict(wall=wall, cpu=cpu, sha=hashlib.sha256(b.getvalue()).hexdigest(), docs=table.num_rows,
                      reused=s["pairs_reused"], compared=s["pairs_compared"], candidates=s["candidate_pairs"])))
"""


def reduce_once(root: Path, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD.format(names=NAMES), str(root), mode], cwd=REPO,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def sign(storage, versions: dict) -> None:
    from mix_assets.core import engine, tables
    from mix_assets.stages.dedup import dedup

    dedup.sign_sources(storage, tables.raw_files(storage, NAMES), versions, dedup.DedupParams(),
                       engine.Engine(num_cpus=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--folder", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "reduce_reuse.md")
    a = ap.parse_args()
    import graph
    from map_reuse import write_raw

    from mix_assets.core.storage import Storage

    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    folder = a.folder or Path(tempfile.mkdtemp(prefix="reduce_reuse-"))
    folder.mkdir(parents=True, exist_ok=True)
    gen = graph.child_gen(a.mb, folder, seed=a.mb, bpt=4.0, filters=True)
    root = folder / "storage"
    storage = Storage(root=str(root))
    texts = {}
    for n in NAMES:
        rows = [json.loads(line) for line in open(folder / "corpus" / f"{n}.jsonl")]
        texts[n] = [r["text"].strip() for r in rows]
        write_raw(storage, n, texts[n], [f"{n}-{i:08d}" for i in range(len(rows))])
    sign(storage, {n: "v1" for n in NAMES})
    pairs, snapshot = root / "dedup" / "pairs", folder / "pairs-v1"
    runs: dict = {}

    def record(label, res):
        runs.setdefault(label, []).append(res)
        print(label, json.dumps(res), flush=True)

    for _ in range(a.repeats):
        record(("full", "no reuse"), reduce_once(root, "none"))
        shutil.rmtree(pairs, ignore_errors=True)
        record(("full", "reuse"), reduce_once(root, "reuse"))
    shutil.copytree(pairs, snapshot)
    extra = max(1, len(texts["part_d"]) // 50)
    new = texts["part_d"] + texts["part_a"][:extra]
    write_raw(storage, "part_d", new, [f"part_d-{i:08d}" for i in range(len(new))])
    sign(storage, {**{n: "v1" for n in NAMES}, "part_d": "v2"})
    for _ in range(a.repeats):
        record(("changed", "no reuse"), reduce_once(root, "none"))
        shutil.rmtree(pairs)
        shutil.copytree(snapshot, pairs)
        record(("changed", "reuse"), reduce_once(root, "reuse"))

    def med(label, k):
        return statistics.median(r[k] for r in runs[label])

    same = {c: len({r["sha"] for m in ("no reuse", "reuse") for r in runs[(c, m)]}) == 1 for c in ("full", "changed")}
    lines = [
        f"## {gen['bytes'] / 1e6:.0f} MB: {gen['docs']:,} documents over 4 sources, then {extra:,} appended to part_d",
        "", f"`PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data /work/main/.venv/bin/python bench/reduce_reuse.py "
        f"--mb {a.mb} --repeats {a.repeats}` at {rev}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} "
        "UTC, local engine 1 worker, shared 2-core machine.", "",
        "| run | pairs stored | wall s (each repeat) | median wall | CPU s (each) | median CPU | pairs compared / candidates |",
        "|---|---|---|---:|---|---:|---|"]
    for c in ("full", "changed"):
        for m in ("no reuse", "reuse"):
            rs = runs[(c, m)]
            walls, cpus = (" / ".join(format(r[k], ".2f") for r in rs) for k in ("wall", "cpu"))
            lines.append(f"| {'full' if c == 'full' else '1 of 4 changed'} | {m} | {walls} | "
                         f"{med((c, m), 'wall'):.2f} | {cpus} | {med((c, m), 'cpu'):.2f} | "
                         f"{rs[-1]['compared']:,} / {rs[-1]['candidates']:,} |")
    lines += ["", f"changed ÷ full (median CPU): no reuse {med(('changed', 'no reuse'), 'cpu') / med(('full', 'no reuse'), 'cpu'):.2f}, "
              f"reuse {med(('changed', 'reuse'), 'cpu') / med(('full', 'no reuse'), 'cpu'):.2f}. Same dedup_keys bytes "
              f"with and without reuse: full {same['full']}, changed {same['changed']} "
              f"(sha256 {runs[('full', 'reuse')][0]['sha'][:16]}…, {runs[('changed', 'reuse')][0]['sha'][:16]}…)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out.exists():
        a.out.write_text(a.out.read_text().rstrip("\n") + "\n\n" + text)
    else:
        a.out.write_text("# dedup_keys' reduce: full vs one source changed, with stored verified pairs "
                         "(bench/reduce_reuse.py)\n\n" + text)


if __name__ == "__main__":
    main()
