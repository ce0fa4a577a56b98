"""Cross-document line dedup (stages/lines/lines.py) beside datatrove's sentence dedup on the same documents.

Generated web-like documents (seeded): unique body lines of random words, 0-4 header/footer lines drawn from a
pool of boilerplate lines (Zipf-like), and in 1 % of the documents a body line repeated inside that document.
Both sides run on the same documents, each in its own process:

  ours       lines.dedup_lines (count map, reduce, removal map; local engine, 1 worker), parquet in and out,
             its compiled kernels (stages/lines/kernels.py) imported before the timer, like polars and pyarrow;
             run 1 + --repeats times in one process: the first run pays numba's loading of the cached kernels
             (once per process), the others are warm (the ratios use the least CPU of them; with --repeats > 1
             every warm run's user + system CPU and ratio are shown; the first run's CPU ratio too),
             min_docs 2 (a line in >= 2 documents goes), no document dropped (min_kept_share 0, min_kept_chars 0)
  datatrove  datatrove 0.10.1's three stages (SentenceDedupSignature, SentenceFindDedups, SentenceDedupFilter)
             configured as close to line dedup as it goes: n_sentences 1, split_sentences False (a "sentence" is
             a line of splitlines()), min_doc_words 0, min_num_sentences 0, and a text normalisation that only
             strips (lowercase, punctuation, numbers, diacritics off; its default lowercases, drops punctuation
             and maps digits to 0); documents given in memory, its folders on local disk

Also, like for like: ours in memory (the stage's count / reduce / removal functions on in-memory Arrow chunks, no
Parquet, no chunk parts) beside datatrove in memory, and datatrove reading the same raw Parquet file with its
ParquetReader and writing the kept documents with its ParquetWriter beside the stage (Parquet in and out); its
writer uses the codec of the stage's documents file (lines.DOCS_WRITER_OPTIONS; zstd before it existed) and, like
the stage's writer, no content-defined chunking and no page index (its defaults turn both on: extra work the
stage does not do).

Reported: wall and CPU seconds of each (CPU: the process's user + system time over the timed part), the
ratio, and the removals: the set of (document, line index) each removes, their overlap, and the differences
by cause. datatrove keeps one copy of every duplicated line ("all but one", C4's rule) and removes a line's
repeats inside one document; ours removes every copy of a line found in >= min_docs documents and counts a
line once per document. Needs a datatrove venv (pyproject's [bench] extra pins datatrove==0.10.1):

    python3 -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install 'datatrove==0.10.1' 'xxhash==3.8.2' pyarrow
    PYTHONPATH=$PWD .venv/bin/python bench/line_dedup.py --mb 20 --datatrove-python /tmp/dtvenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = None


def generate(mb: float, seed: int = 11) -> list[str]:
    """Documents totalling about `mb` MB (see the module docstring)."""
    global WORDS
    r = random.Random(seed)
    WORDS = [("".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(2, 9)))) for _ in range(5000)]
    pool = [" ".join(r.choice(WORDS) for _ in range(r.randint(3, 12))).capitalize() + r.choice([".", ":", " |", ""])
            for _ in range(300)]
    weights = [1 / (k + 1) for k in range(len(pool))]
    docs, size = [], 0
    while size < mb * 1e6:
        body = [" ".join(r.choice(WORDS) for _ in range(r.randint(6, 25))).capitalize() + "." for _ in range(r.randint(3, 25))]
        if r.random() < 0.01:
            body.insert(r.randrange(len(body) + 1), body[0])
        head = r.choices(pool, weights, k=r.randint(0, 2))
        foot = r.choices(pool, weights, k=r.randint(0, 2))
        text = "\n".join([*head, *body, *foot])
        docs.append(text)
        size += len(text.encode())
    return docs


DATATROVE_CHILD = r'''
import json, os, resource, sys, time
import numpy as np
from datatrove.data import Document
from datatrove.pipeline.dedup.sentence_dedup import (SentDedupConfig, SentenceDedupFilter, SentenceDedupSignature,
                                                     SentenceFindDedups)
from datatrove.utils.text import TextNormConfig

docs_path, work, out, mode, raw_dir, codec = sys.argv[1:7]
texts = [json.loads(l) for l in open(docs_path)]
if mode in ("lines", "lines-files"):
    cfg = SentDedupConfig(n_sentences=1, split_sentences=False, min_doc_words=0, min_num_sentences=0,
                          norm_config=TextNormConfig(lowercase=False, norm_whitespace=False, remove_punctuation=False,
                                                     norm_unicode_diacritics=False, norm_numbers=False))
else:  # its defaults: spans of 3 spaCy sentences, normalised text, documents under 50 words or 3 sentences dropped
    cfg = SentDedupConfig()
docs = lambda: (Document(text=t, id=str(i)) for i, t in enumerate(texts))

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

if mode == "lines-files":  # the raw Parquet file read by its ParquetReader, the kept documents written
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import ParquetWriter
    docs = lambda: ParquetReader(raw_dir, text_key="text", id_key="doc_id").run(rank=0, world_size=1)
t0, c0 = time.perf_counter(), cpu()
SentenceDedupSignature(output_folder=f"{work}/sigs", config=cfg).run(docs(), rank=0, world_size=1)
SentenceFindDedups(data_folder=f"{work}/sigs", output_folder=f"{work}/dups", config=cfg).run(rank=0, world_size=1)
kept = SentenceDedupFilter(data_folder=f"{work}/dups", config=cfg).run(docs(), rank=0, world_size=1)
if mode == "lines-files":
    kept = ParquetWriter(f"{work}/out", compression=codec, use_content_defined_chunking=False,
                         write_page_index=False).run(kept, rank=0, world_size=1)
kept = [d.text for d in kept]
wall, cpus = time.perf_counter() - t0, cpu() - c0
dups = np.fromfile(f"{work}/dups/0000/00000.c4_dup", dtype=[("doc", "<u4"), ("sent", "<u2")]) \
    if os.path.exists(f"{work}/dups/0000/00000.c4_dup") else np.array([], dtype=[("doc", "<u4"), ("sent", "<u2")])
json.dump({"wall": wall, "cpu": cpus, "docs_out": len(kept),
           "removed": sorted([int(d), int(s)] for d, s in zip(dups["doc"], dups["sent"]))}, open(out, "w"))
'''


def docs_codec() -> str:
    """The codec of the stage's documents file (zstd, the project's, for code before lines.DOCS_WRITER_OPTIONS)."""
    from mix_assets.core import tables
    from mix_assets.stages.lines import lines as lib

    return getattr(lib, "DOCS_WRITER_OPTIONS", tables.WRITER_OPTIONS)["compression"]


PARAMS = dict(min_docs=2, min_line_chars=1, min_kept_share=0.0, min_kept_chars=0)
CHUNK_ROWS = 8192


def write_raw(docs: list[str], path: Path) -> None:
    """The documents as a raw/<source> documents file (stages/sources DOC_SCHEMA), read by both sides."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mix_assets.stages.sources.sources import DOC_SCHEMA, ROW_GROUP_BYTES, ROW_GROUP_ROWS

    nb = [len(t.encode()) for t in docs]
    t = pa.table({"doc_id": [str(i) for i in range(len(docs))], "source": ["web"] * len(docs), "text": docs,
                  "row_index": list(range(len(docs))), "origin": [""] * len(docs), "n_bytes": nb,
                  "n_chars": [len(t) for t in docs], "est_tokens": [max(1, b // 4) for b in nb]}, schema=DOC_SCHEMA)
    # row groups as raw/<source> cuts them (at most ROW_GROUP_BYTES of text, sources.iter_sample): a chunk reads
    # the groups it overlaps, not the whole file
    with pq.ParquetWriter(path, DOC_SCHEMA) as w:
        start, size = 0, 0
        for i, b in enumerate(nb):
            if i > start and (i - start >= ROW_GROUP_ROWS or size + b > ROW_GROUP_BYTES):
                w.write_table(t.slice(start, i - start))
                start, size = i, 0
            size += b
        w.write_table(t.slice(start))


def run_ours_memory(docs: list[str]) -> dict:
    """The stage's own count map, reduce and removal map functions (lines.count_lines, reduce_counts, frequent,
    remove_lines) on the documents in memory, chunked as the stage chunks them, the count's line keys handed to
    the removal as the local engine's stage does (lines.HELD): no Parquet read or write, no chunk parts
    (datatrove's in-memory run is handed its documents the same way)."""
    import numpy as np
    import pyarrow as pa

    from mix_assets.stages.lines import lines as lib

    arr = pa.array(docs, pa.large_string())
    p = lib.LineParams(**PARAMS)
    t0, c0 = time.perf_counter(), time.process_time()
    chunks = [arr.slice(i, CHUNK_ROWS) for i in range(0, len(arr), CHUNK_ROWS)]
    counted = [lib.count_lines(c, p.min_line_chars, keep=True) for c in chunks]  # line keys kept, as HELD does
    hashes, counts = lib.reduce_counts(c[:2] for c in counted)
    wanted = lib.frequent(hashes, counts, p.min_docs).column("hash").to_numpy().astype(np.uint64)
    removed = sum(int(lib.remove_lines(c, wanted, p, k[2:])[1]["removed_lines"].sum()) for c, k in zip(chunks, counted))
    return {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "removed_lines": removed}


def run_ours(docs: list[str], raw: Path, work: Path) -> dict:
    """Our stage on the raw documents file; returns wall, cpu and the removed (doc, line)."""
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mix_assets.core import engine
    from mix_assets.core.storage import Storage
    from mix_assets.stages.lines import kernels  # noqa: F401  numba and the cached kernels load before the timer,
    from mix_assets.stages.lines import lines as lib  # as polars and pyarrow do (once per worker process)

    path = raw
    storage = Storage(root=str(work / "storage"))
    params = lib.LineParams(**PARAMS)
    eng = engine.Engine(num_cpus=1, chunk_rows=CHUNK_ROWS)
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    res = lib.dedup_lines(storage, {"web": engine.FileAt(str(path))}, {"web": "bench"}, params, [], eng)
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    user, sys_ = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
    cpu, faults = user + sys_, r1.ru_minflt - r0.ru_minflt
    # removed (doc, line index), untimed: the same line frame the stage builds
    frequent = pq.read_table(storage.source("lines/frequent.parquet")).column("hash").to_numpy()
    df = lib._lines(pa.array(docs, pa.large_string()), 1).with_columns(
        pl.int_range(pl.len()).over("row").alias("idx"))
    gone = df.filter(pl.col("counted") & pl.col("hash").is_in(pl.Series(frequent, dtype=pl.UInt64).implode()))
    removed = set(zip(gone["row"].to_list(), gone["idx"].to_list()))
    assert sum(r["removed_lines"] for r in res.sources) == len(removed)
    return {"wall": wall, "cpu": cpu, "user": user, "sys": sys_, "faults": faults, "removed": removed,
            "frequent": int(len(frequent))}


def causes(docs: list[str], ours: set, theirs: set) -> dict:
    """Differences by cause: datatrove's kept first copy of a duplicated line; a line repeated inside one
    document only (datatrove removes its repeats, ours counts it once); anything else."""
    where: dict[str, list] = {}
    for d, text in enumerate(docs):
        for i, line in enumerate(text.split("\n")):
            if line.strip():
                where.setdefault(line.strip(), []).append((d, i))
    only_ours, only_theirs = ours - theirs, theirs - ours
    first_copy = in_doc = other_o = other_t = 0
    for line, occ in where.items():
        n_docs = len({d for d, _ in occ})
        for k, o in enumerate(occ):
            if o in only_ours:
                if n_docs >= 2 and k == 0:
                    first_copy += 1
                else:
                    other_o += 1
            elif o in only_theirs:
                if n_docs == 1 and k > 0:
                    in_doc += 1
                else:
                    other_t += 1
    return {"only_ours": len(only_ours), "only_datatrove": len(only_theirs),
            "datatrove_keeps_first_copy": first_copy, "repeat_inside_one_document": in_doc,
            "other_only_ours": other_o, "other_only_datatrove": other_t}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--datatrove-python", required=False, help="python of a venv with datatrove==0.10.1")
    ap.add_argument("--out", help="append the Markdown result here")
    ap.add_argument("--repeats", type=int, default=1,
                    help="warm runs of the stage in its process (the ratios use the least CPU; all are shown)")
    ap.add_argument("--skip-defaults", action="store_true",
                    help="do not run datatrove with its defaults (spaCy sentences: minutes on a loaded host)")
    a = ap.parse_args()
    if not a.datatrove_python:
        ap.error("--datatrove-python is required (see the module docstring)")
    docs = generate(a.mb)
    mb = sum(len(t.encode()) for t in docs) / 1e6
    with tempfile.TemporaryDirectory(prefix="line_dedup_bench_") as tmp:
        work = Path(tmp)
        src = work / "docs.jsonl"
        src.write_text("".join(json.dumps(t) + "\n" for t in docs))
        (work / "child.py").write_text(DATATROVE_CHILD)
        (work / "raw").mkdir()
        raw = work / "raw" / "raw.parquet"
        write_raw(docs, raw)
        dts = {}
        for mode in ("lines", "lines-files") + (() if a.skip_defaults else ("default",)):
            t0 = time.perf_counter()
            subprocess.run([a.datatrove_python, str(work / "child.py"), str(src), str(work / f"dt-{mode}"),
                            str(work / f"dt-{mode}.json"), mode, str(work / "raw"), docs_codec()], check=True,
                           env={**os.environ, "PYTHONPATH": ""})
            dts[mode] = {**json.loads((work / f"dt-{mode}.json").read_text()), "total": time.perf_counter() - t0}
        dt, df, dd = dts["lines"], dts["lines-files"], dts.get("default")
        (work / "ours").mkdir()
        cold = run_ours(docs, raw, work / "ours")  # the process's first call of the kernels loads their cached code
        warm = []
        for i in range(max(1, a.repeats)):  # warm: what every later chunk and run of a worker process pays
            (work / f"ours{i + 2}").mkdir()
            warm.append(run_ours(docs, raw, work / f"ours{i + 2}"))
            assert warm[-1]["removed"] == cold["removed"]
        ours = min(warm, key=lambda r: r["cpu"])
        mem = min((run_ours_memory(docs) for _ in range(3)), key=lambda r: r["cpu"])  # warm, the least of 3
        assert mem["removed_lines"] == len(ours["removed"])
    assert sorted(map(tuple, df["removed"])) == sorted(map(tuple, dt["removed"]))  # files or memory: same removals
    theirs = {tuple(x) for x in dt["removed"]}
    both = ours["removed"] & theirs
    union = ours["removed"] | theirs
    diff = causes(docs, ours["removed"], theirs)
    explained = diff["datatrove_keeps_first_copy"] + diff["repeat_inside_one_document"]
    rows = [
        f"| documents | {len(docs):,} ({mb:.1f} MB) |",
        f"| ours, first run in the process (numba loads its cached kernels): wall s / CPU s | {cold['wall']:.2f} / "
        f"{cold['cpu']:.2f} ({mb / cold['wall']:.1f} MB/s) |",
        f"| ours, warm{f' (least CPU of {len(warm)} runs; the ratios below)' if len(warm) > 1 else ' (the ratios below)'}"
        f": wall s / CPU s | {ours['wall']:.2f} / {ours['cpu']:.2f} ({mb / ours['wall']:.1f} MB/s) |",
        *([f"| ours, every warm run: CPU s (user + system; minor page faults) | "
           + ", ".join(f"{r['cpu']:.2f} ({r['user']:.2f} + {r['sys']:.2f}; {r['faults']:,})" for r in warm)
           + f" |", f"| ratio files, each warm run / datatrove set to lines with files: CPU s | "
           + ", ".join(f"{df['cpu'] / r['cpu']:.1f}x" for r in warm) + " |"] if len(warm) > 1 else []),
        *([f"| datatrove, its defaults (3-sentence spans, spaCy sentences): wall s / CPU s | {dd['wall']:.2f} / "
           f"{dd['cpu']:.2f} ({mb / dd['wall']:.1f} MB/s) |",
           f"| throughput ratio ours / datatrove defaults: wall / CPU s | **{dd['wall'] / ours['wall']:.1f}x** / "
           f"**{dd['cpu'] / ours['cpu']:.1f}x** (target >= 10x) |"] if dd else
          ["| datatrove, its defaults | not run (--skip-defaults) |"]),
        f"| datatrove set to lines (n_sentences 1, splitlines, strip only), documents in memory: wall s / CPU s | "
        f"{dt['wall']:.2f} / {dt['cpu']:.2f} ({mb / dt['wall']:.1f} MB/s) |",
        f"| ours as the stage (Parquet in, Parquet out, chunk parts) / datatrove set to lines in memory: wall / CPU s | "
        f"**{dt['wall'] / ours['wall']:.1f}x** / **{dt['cpu'] / ours['cpu']:.1f}x** (first run: "
        f"{dt['cpu'] / cold['cpu']:.1f}x CPU s) |",
        f"| like for like, in memory: the stage's count / reduce / removal functions on the documents in memory "
        f"(no Parquet): wall s / CPU s | {mem['wall']:.2f} / {mem['cpu']:.2f} ({mb / mem['wall']:.1f} MB/s) |",
        f"| ratio in memory, ours / datatrove set to lines in memory: wall / CPU s | "
        f"**{dt['wall'] / mem['wall']:.1f}x** / **{dt['cpu'] / mem['cpu']:.1f}x** (target >= 10x) |",
        f"| like for like, files: datatrove set to lines reading the same raw Parquet file (its ParquetReader) and "
        f"writing the kept documents (its ParquetWriter, {docs_codec()} as the stage's documents file): wall s / CPU s | "
        f"{df['wall']:.2f} / {df['cpu']:.2f} |",
        f"| ratio files, ours as the stage / datatrove set to lines with files: wall / CPU s | "
        f"**{df['wall'] / ours['wall']:.1f}x** / **{df['cpu'] / ours['cpu']:.1f}x** (target >= 10x) |",
        "| **removals below: datatrove set to lines** | |",
        f"| removed lines: ours / datatrove / both | {len(ours['removed']):,} / {len(theirs):,} / {len(both):,} |",
        f"| identical removals (both / either) | **{len(both) / max(len(union), 1):.4%}** (target >= 99 %) |",
        f"| only ours: datatrove's kept first copy of a duplicated line / other | "
        f"{diff['datatrove_keeps_first_copy']:,} / {diff['other_only_ours']:,} |",
        f"| only datatrove: a line's repeat inside one document / other | "
        f"{diff['repeat_inside_one_document']:,} / {diff['other_only_datatrove']:,} |",
        f"| identical once those two rules are accounted for | "
        f"{(len(both) + explained) / max(len(union), 1):.4%} |",
    ]
    table = "| measure | value |\n|---|---|\n" + "\n".join(rows)
    print(table)
    if a.out:
        with open(a.out, "a") as f:
            f.write(f"\n`bench/line_dedup.py --mb {a.mb:g} --repeats {a.repeats}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                    f"host load {os.getloadavg()[0]:.1f} at the end)\n\n{table}\n")


if __name__ == "__main__":
    sys.exit(main())
