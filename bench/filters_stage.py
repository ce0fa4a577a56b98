"""`document_filters` throughput and peak RSS against raw `encode_batch_fast` of the same text (issue 14).

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/filters_stage.py --sizes 10 40 \
        --workers 1 2 --out bench/results/filters_stage.md
    # old code vs new, same session (bench/results/filters_stage_compare.md):
    ... bench/filters_stage.py --sizes 40 --workers 1 2 --compare e482587 --repeats 2 \
        --out bench/results/filters_stage_compare.md

Corpus: ../mix_assets_tests/support/gen_corpus.py (order-2 Markov prose over the shared books, 10 % planted near-copies, as
bench/graph.py and bench/raw_source.py make it), about `--sizes` MB of UTF-8 text, stripped as
raw/<source> strips it, written as one source's documents parquet (doc_id, text, n_chars, n_bytes:
the columns the stage reads) in row groups of at most 8 MiB of text, as raw/<source> writes them (a map
chunk reads the row groups its rows overlap, so their size bounds a task's memory). Seeded by the size,
so every run of a size gets the same bytes.

Filters: configs/demo.yaml's `filters:` section as it stands (Gopher quality and repetition, C4 in mode
filter, FineWeb, language ID keeping en above 0.65 on the first 2,000 chars, the demo's guard), given
to the one source of a generated mix config, so `filter_params` / `guard_for` build what the asset builds.

Each measurement runs in a fresh subprocess, per size and worker count n:
  filters = the lib work of the `document_filters` asset: `decide_sources` (the map stage on the local
            engine with n threads, the spec's chunk_rows, writing filters/decisions/<source>.parquet),
            then `summarise_stored` and `pick_stored` (the report and samples, a row group at a time).
            Not included: Dagster, lineage, reading sample texts back and scrubbing them.
  encode  = the same texts in memory, `Tokenizer.encode_batch_fast` in batches of 1,000 documents
            (packing.encode_batch_docs) with a byte-level BPE (vocab 4096) trained on the corpus's first
            2 MB (as the demo trains one), RAYON_NUM_THREADS=n: the graph's reference (bench/graph.py).
Both children get RAYON_NUM_THREADS, POLARS_MAX_THREADS and OMP_NUM_THREADS = n, so 1 worker computes
on one core. MB/s = text bytes / wall seconds; ratio = filters MB/s / encode MB/s of the same n
(CPU s: user + system seconds of the child's work, getrusage).
Peak RSS = VmHWM of the child; base = VmRSS after the imports, before the work.

--compare REV: the same filters child also runs on the code of git revision REV (its mix_assets/ and
configs/, exported with `git archive` under bench/out/filters_stage/rev-<sha>/), interleaved with the
current code in the same session (old, new, encode per repeat; `--repeats` rounds, each figure the
best of them), writing its decisions to a storage of its own; the table shows both beside raw encode,
and the run fails unless the two decisions tables are equal (rows and values; their schema metadata
names the code, so the file bytes differ).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

from raw_source import _status, generate  # VmRSS / VmHWM of this process in MB; the bench corpus

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "filters_stage"
SOURCE = "prose"


def _cpu_secs() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child_gen(mb: int, folder: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    corpus = generate(mb)  # bench/raw_source.py's corpus of the same size
    from mix_assets.stages.tokens import tokenizer as tk
    from mix_assets.stages.sources.sources import ROW_GROUP_BYTES

    texts = [t.strip() for t in corpus.texts]
    nb = np.array([len(t.encode()) for t in texts], np.int64)
    docs = pa.table({"doc_id": [f"{SOURCE}-{i:08d}" for i in range(len(texts))], "text": texts,
                     "n_chars": [len(t) for t in texts], "n_bytes": nb})
    # row groups as raw/<source> writes them: a new one before the text would pass ROW_GROUP_BYTES
    starts = [0]
    for i in range(1, len(texts)):
        if nb[starts[-1]:i + 1].sum() > ROW_GROUP_BYTES:
            starts.append(i)
    with pq.ParquetWriter(folder / "documents.parquet", docs.schema) as w:
        for a, b in zip(starts, [*starts[1:], len(texts)]):
            w.write_table(docs.slice(a, b - a), row_group_size=b - a)
    sample, total = [], 0
    for t in texts:
        if total >= 2_000_000:
            break
        sample.append(t)
        total += len(t.encode())
    tk.train_bpe(sample, 4096, ["<|endoftext|>"], str(folder / "tokenizer"))
    demo = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg = {"name": f"filters_bench_{mb}mb", "target_tokens": 10**6, "seed": 1234,
           "sources": [{"name": SOURCE, "loader": {"kind": "jsonl", "paths": [str(folder / "unused.jsonl")]},
                        "text_field": "text", "license": "generated (CC0)",
                        "rationale": "Markov prose (bench/filters_stage.py).", "share": 1.0}],
           "tokenizer": {"kind": "train", "vocab_size": 4096}, "filters": demo["filters"],
           "engine": demo["engine"], "storage": {"root": str(folder / "storage")}}
    (folder / "mix.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (folder / "gen.json").write_text(json.dumps({"bytes": sum(len(t.encode()) for t in texts), "docs": len(texts)}))


def child_filters(folder: Path, workers: int, store: str = "storage") -> dict:
    import shutil

    from mix_assets.config import load_spec
    from mix_assets.stages.filters import decisions as lib
    from mix_assets.core import engine
    from mix_assets.core.storage import Storage

    spec = load_spec(folder / "mix.yaml")
    shutil.rmtree(folder / store, ignore_errors=True)  # no reuse of a previous run's decisions
    storage = Storage(root=str(folder / store))
    eng = engine.Engine(num_cpus=workers, chunk_rows=spec.engine.chunk_rows)
    params = {SOURCE: lib.filter_params(spec.filters_for(SOURCE))}
    base, t0, c0 = _status("VmRSS"), time.perf_counter(), _cpu_secs()
    lib.decide_sources(storage, {SOURCE: str(folder / "documents.parquet")}, {SOURCE: "bench"}, params, eng)
    t1 = time.perf_counter()
    summary = lib.summarise_stored(storage, [SOURCE], lib.guard_for(spec))
    picked = lib.pick_stored(storage, [SOURCE], spec.filters.samples_per_filter, set())
    t2, cpu = time.perf_counter(), _cpu_secs() - c0
    return {"decide_secs": t1 - t0, "summary_secs": t2 - t1, "secs": t2 - t0, "cpu_secs": cpu,
            "base_mb": base, "peak_mb": _status("VmHWM"), "docs": summary.documents,
            "kept_share": summary.kept / max(summary.documents, 1), "samples": len(picked),
            "first_failures": {k["filter"]: k["first_failure_docs"] for k in summary.kills}}


def child_encode(folder: Path) -> dict:
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    texts = pq.read_table(folder / "documents.parquet", columns=["text"]).column("text").to_pylist()
    tok = Tokenizer.from_file(str(folder / "tokenizer" / "tokenizer.json"))
    base, t0, c0, ntok = _status("VmRSS"), time.perf_counter(), _cpu_secs(), 0
    for i in range(0, len(texts), 1000):
        ntok += sum(len(e.ids) for e in tok.encode_batch_fast(texts[i : i + 1000], add_special_tokens=False))
    return {"secs": time.perf_counter() - t0, "cpu_secs": _cpu_secs() - c0, "tokens": ntok, "base_mb": base,
            "peak_mb": _status("VmHWM")}


def run(args: list[str], workers: int = 1, code: Path = REPO) -> str:
    n = str(workers)
    env = {**os.environ, "PYTHONPATH": str(code), "RAYON_NUM_THREADS": n, "POLARS_MAX_THREADS": n,
           "OMP_NUM_THREADS": n}
    return subprocess.run([sys.executable, __file__, *args], env=env, check=True, stdout=subprocess.PIPE,
                          text=True).stdout


def export_rev(rev: str) -> tuple[str, Path]:
    """(short sha, a folder holding REV's mix_assets/ and configs/), exported once with `git archive`."""
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, check=True, capture_output=True,
                         text=True).stdout.strip()
    dest = OUT / f"rev-{sha}"
    if not (dest / "mix_assets").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        tar = subprocess.run(["git", "archive", sha, "mix_assets", "configs"], cwd=REPO, check=True,
                             capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    return sha, dest


def same_decisions(folder: Path) -> bool:
    """The old and new runs' decisions are equal tables (the schema metadata, which names the code, aside)."""
    import pyarrow.parquet as pq

    key = Path("filters") / "decisions" / f"{SOURCE}.parquet"
    new, old = (pq.read_table(folder / st / key) for st in ("storage", "storage-old"))
    return new.replace_schema_metadata(None).equals(old.replace_schema_metadata(None))


def best(runs: list[dict]) -> dict:
    """Per figure the best (lowest seconds) of the repeats; the rest from the first."""
    return {**runs[0], **{k: min(r[k] for r in runs) for k in ("secs", "cpu_secs", "decide_secs") if k in runs[0]}}


def report(rows: list[dict], cmd: str, load: tuple, load_end: tuple) -> str:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    out = [f"# bench/filters_stage.py: document_filters vs raw encode_batch_fast — "
           f"{datetime.date.today()}", "", f"    {cmd}", "",
           f"Code at {rev.stdout.strip()}; {os.cpu_count()} CPUs, Python {platform.python_version()}. Load average "
           f"(1/5/15 min) at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, at end {load_end[0]:.2f} / "
           f"{load_end[1]:.2f} / {load_end[2]:.2f} (2 cores, shared with other work).", "",
           __doc__.split("\n\n", 2)[2].strip(), "",
           "| MB | docs | workers | filters s (decide + summary) | filters docs/s | filters MB/s | filters CPU s "
           "| peak RSS MB (base) | encode MB/s | encode CPU s | ratio (wall) | ratio (CPU s) | kept |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f, e, mb = r["filters"], r["encode"], r["bytes"] / 1e6
        out.append(f"| {mb:.1f} | {r['docs']:,} | {r['workers']} | {f['secs']:.1f} ({f['decide_secs']:.1f} + "
                   f"{f['summary_secs']:.2f}) | {r['docs'] / f['secs']:,.0f} | {mb / f['secs']:.2f} | "
                   f"{f['cpu_secs']:.1f} | {f['peak_mb']:.0f} ({f['base_mb']:.0f}) | {mb / e['secs']:.2f} | "
                   f"{e['cpu_secs']:.1f} | {e['secs'] / f['secs']:.3f} | {e['cpu_secs'] / f['cpu_secs']:.3f} | "
                   f"{f['kept_share']:.1%} |")
    out += ["", "ratio (CPU s) = encode CPU seconds / filters CPU seconds for the same text: the same comparison "
            "with the time other work on the machine took from either side left out."]
    old = [r for r in rows if "old" in r]
    if old:
        out += ["", f"Old code (--compare {old[0]['rev']}) beside the current code and raw encode, same session "
                f"(best of {old[0]['repeats']} interleaved repeats each):", "",
                "| MB | workers | filters CPU s new | old | old / new CPU | filters MB/s new | old | encode MB/s "
                "| ratio (CPU s) new | old | decisions equal |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in old:
            f, o, e, mb = r["filters"], r["old"], r["encode"], r["bytes"] / 1e6
            out.append(f"| {mb:.1f} | {r['workers']} | {f['cpu_secs']:.1f} | {o['cpu_secs']:.1f} | "
                       f"{o['cpu_secs'] / f['cpu_secs']:.2f} | {mb / f['secs']:.2f} | {mb / o['secs']:.2f} | "
                       f"{mb / e['secs']:.2f} | {e['cpu_secs'] / f['cpu_secs']:.3f} | {e['cpu_secs'] / o['cpu_secs']:.3f} "
                       f"| {'yes' if r['same'] else 'NO'} |")
    out += ["", "Peak RSS growth between the sizes (same worker count):", ""]
    for w in sorted({r["workers"] for r in rows}):
        mine = sorted((r for r in rows if r["workers"] == w), key=lambda r: r["bytes"])
        for a, b in zip(mine, mine[1:]):
            d = b["filters"]["peak_mb"] - a["filters"]["peak_mb"]
            out.append(f"- {w} worker(s): {a['bytes'] / 1e6:.1f} -> {b['bytes'] / 1e6:.1f} MB of text "
                       f"({a['docs']:,} -> {b['docs']:,} docs): peak {a['filters']['peak_mb']:.0f} -> "
                       f"{b['filters']['peak_mb']:.0f} MB ({d:+.0f} MB, "
                       f"{d * 1e6 / max(b['docs'] - a['docs'], 1):+.0f} bytes per added document)")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 40], help="MB of text per corpus")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="local engine threads per run")
    ap.add_argument("--out", type=Path, default=OUT / "report.md", help="where the markdown report goes")
    ap.add_argument("--compare", metavar="REV", help="also run the filters on git revision REV's code, same session")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved rounds per measurement (best of them)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kind, folder, *rest = a.child
        if kind == "gen":
            child_gen(int(rest[0]), Path(folder))
        else:
            got = child_filters(Path(folder), int(rest[0]), *rest[1:]) if kind == "filters" else child_encode(Path(folder))
            print(json.dumps(got))
        return
    cmd, load, rows = "python bench/filters_stage.py " + " ".join(sys.argv[1:]), os.getloadavg(), []
    rev, old_code = export_rev(a.compare) if a.compare else (None, None)
    for mb in a.sizes:
        folder = OUT / f"{mb}mb"
        if not (folder / "gen.json").exists():
            folder.mkdir(parents=True, exist_ok=True)
            run(["--child", "gen", str(folder), str(mb)])
        gen = json.loads((folder / "gen.json").read_text())
        for w in a.workers:
            fs, es, olds = [], [], []
            for _ in range(a.repeats):
                if old_code:
                    olds.append(json.loads(run(["--child", "filters", str(folder), str(w), "storage-old"], w, old_code)))
                fs.append(json.loads(run(["--child", "filters", str(folder), str(w)], w)))
                es.append(json.loads(run(["--child", "encode", str(folder)], w)))
            f, e = best(fs), best(es)
            rows.append({"mb": mb, "workers": w, **gen, "filters": f, "encode": e})
            if olds:
                rows[-1].update(old=best(olds), rev=rev, repeats=a.repeats, same=same_decisions(folder))
                print(json.dumps({"old_cpu_secs": rows[-1]["old"]["cpu_secs"], "new_cpu_secs": f["cpu_secs"],
                                  "old_secs": rows[-1]["old"]["secs"], "same": rows[-1]["same"]}), flush=True)
            mbs = gen["bytes"] / 1e6
            print(json.dumps({"mb": mb, "workers": w, "docs": gen["docs"], "filters_mb_s": round(mbs / f["secs"], 3),
                              "filters_docs_s": round(gen["docs"] / f["secs"], 1),
                              "encode_mb_s": round(mbs / e["secs"], 2),
                              "ratio": round(e["secs"] / f["secs"], 4), "peak_mb": round(f["peak_mb"]),
                              "base_mb": round(f["base_mb"]), "filters": f}), flush=True)
    text = report(rows, cmd, load, os.getloadavg())
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    print(text)
    if any(not r.get("same", True) for r in rows):
        sys.exit(f"the decisions of {rev} and the current code differ")


if __name__ == "__main__":
    main()
