"""The map stages full vs with one of four sources changed (issue 27 items 4 and 5: per-source reuse).

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/map_reuse.py --mb 100 \
        --out bench/results/map_reuse.md

Corpus and config: bench/graph.py's (`child_gen --filters`: order-2 Markov prose over the shared books, 10 %
planted near-copies, about `--mb` MB over four sources part_a..part_d, configs/demo.yaml's filters, the
shared eval tasks), each source written straight to its raw documents parquet (doc_id, text stripped,
n_chars, n_bytes; row groups of at most 8 MiB of text as raw/<source> writes them), not through the raw stage.

Timed in this process, on the local engine with `--workers` threads and the config's chunk_rows, the lib work
of each map stage alone (no Dagster, no lineage):
  document_filters   = decisions.decide_sources over the four sources
  dedup signatures   = dedup.sign_sources (dedup_keys' map) ; dedup reduce = dedup.reduce_signatures (LSH,
                       verification, clusters: not incremental, shown for scale)
  contamination scan = eval_scan.write_contamination_report with the raw versions (the signatures are
                       already stored, so the pass signs nothing)
first on an empty storage ("full"), then after appending 2 % new documents (copies of part_a's first
documents under new ids) to part_d and giving it a new raw version ("1 of 4 changed"), on the same storage;
then resume: part_d given another raw version, each stage made to fail in the chunk after half of part_d's
(the chunks before it stored as parts, as a kill leaves them) and rerun, timed, its chunk calls counted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def write_raw(storage, source: str, texts: list[str], ids: list[str]) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mix_assets.core import layout
    from mix_assets.stages.sources.sources import ROW_GROUP_BYTES

    nb = np.array([len(t.encode()) for t in texts], np.int64)
    t = pa.table({"doc_id": ids, "text": texts, "n_chars": [len(x) for x in texts], "n_bytes": nb})
    starts, acc = [0], 0
    for i in range(len(texts)):
        if acc + nb[i] > ROW_GROUP_BYTES and i > starts[-1]:
            starts.append(i)
            acc = 0
        acc += nb[i]
    with storage.writing(layout.RAW_DOCS.format(source=source)) as tmp:
        with pq.ParquetWriter(tmp, t.schema) as w:
            for a, b in zip(starts, [*starts[1:], len(texts)]):
                w.write_table(t.slice(a, b - a), row_group_size=b - a)


def stages(storage, spec, versions: dict, eng) -> dict:
    from mix_assets.core import tables
    from mix_assets.stages.audit import eval_scan
    from mix_assets.stages.dedup import dedup
    from mix_assets.stages.filters import decisions

    names = [s.name for s in spec.sources]
    files = tables.raw_files(storage, names)
    out = {}
    t0 = time.perf_counter()
    params = {n: decisions.filter_params(spec.filters_for(n)) for n in names}
    out["filters_reused"] = decisions.decide_sources(storage, files, versions, params, eng)
    out["document_filters"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out["signatures_reused"] = dedup.sign_sources(storage, files, versions, dedup.dedup_params(spec), eng)
    out["dedup signatures (map)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    dedup.reduce_signatures(storage, files, {s.name: s.priority for s in spec.sources}, dedup.dedup_params(spec),
                            decisions.rejected_array(storage, names), eng)
    out["dedup reduce"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    scan, _ = eval_scan.write_contamination_report(storage, spec, eng, raw_versions=versions)
    out["contamination scan"] = time.perf_counter() - t0
    out["hits_reused"] = scan.reused_sources
    return out


class _Failed(Exception):
    pass


def interrupted(storage, spec, versions: dict, eng, source: str) -> dict:
    """Each map stage failed after half of `source`'s chunks (an exception injected in the next chunk, as a
    kill leaves the parts of the chunks before it), then rerun: the rerun's seconds and chunks computed."""
    from mix_assets.core import tables
    from mix_assets.stages.audit import eval_scan
    from mix_assets.stages.dedup import dedup
    from mix_assets.stages.filters import decisions

    names = [s.name for s in spec.sources]
    files = tables.raw_files(storage, names)
    half = len(tables.row_ranges(storage, f"raw/{source}/documents.parquet", eng.chunk_rows)) // 2
    params = {n: decisions.filter_params(spec.filters_for(n)) for n in names}
    runs = {"document_filters": (decisions, "decide_chunk",
                                 lambda: decisions.decide_sources(storage, files, versions, params, eng)),
            "dedup signatures (map)": (dedup, "sign_chunk", lambda: dedup.sign_sources(
                storage, files, versions, dedup.dedup_params(spec), eng)),
            "contamination scan": (eval_scan, "_scan_task", lambda: eval_scan.write_contamination_report(
                storage, spec, eng, raw_versions=versions))}
    out = {}
    for stage, (module, name, run) in runs.items():
        fn, calls = getattr(module, name), [0]

        def failing(*args, **kwargs):
            calls[0] += 1
            if calls[0] > half:
                raise _Failed()
            return fn(*args, **kwargs)

        def counted(*args, **kwargs):
            calls[0] += 1
            return fn(*args, **kwargs)

        setattr(module, name, failing)
        try:
            run()
        except _Failed:
            pass
        setattr(module, name, counted)
        calls[0], t0 = 0, time.perf_counter()
        run()
        out[stage] = (time.perf_counter() - t0, calls[0])
        setattr(module, name, fn)
    return out, half


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "map_reuse.md")
    a = ap.parse_args()
    import graph
    import pyarrow.parquet as pq

    from mix_assets.config import load_spec
    from mix_assets.core import engine, layout, tables
    from mix_assets.core.storage import Storage
    from mix_assets.stages.audit import eval_scan

    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    folder = Path(tempfile.mkdtemp(prefix="map_reuse-"))
    gen = graph.child_gen(a.mb, folder, seed=a.mb, bpt=4.0, filters=True)
    spec = load_spec(folder / "mix.yaml")
    storage = Storage(root=str(folder / "storage"))
    texts = {}
    for s in spec.sources:
        rows = [json.loads(line) for line in open(s.loader.paths[0])]
        texts[s.name] = [r["text"].strip() for r in rows]
        write_raw(storage, s.name, texts[s.name], [f"{s.name}-{i:08d}" for i in range(len(rows))])
    eval_scan.write_registry(storage, spec)
    eng = engine.Engine(num_cpus=a.workers, chunk_rows=spec.engine.chunk_rows)
    versions = {s.name: "v1" for s in spec.sources}
    full = stages(storage, spec, versions, eng)
    last = spec.sources[-1].name
    extra = max(1, len(texts[last]) // 50)
    new = texts[last] + texts[spec.sources[0].name][:extra]
    write_raw(storage, last, new, [f"{last}-{i:08d}" for i in range(len(new))])
    changed = stages(storage, spec, {**versions, last: "v2"}, eng)
    rows = pq.ParquetFile(storage.local_path(layout.RAW_DOCS.format(source=last))).metadata.num_rows
    resumed, half = interrupted(storage, spec, {**versions, last: "v3"}, eng, last)
    n_last = len(tables.row_ranges(storage, layout.RAW_DOCS.format(source=last), eng.chunk_rows))
    lines = [
        "# Map stages: full vs one of four sources changed (bench/map_reuse.py)", "",
        f"`PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/map_reuse.py --mb {a.mb} "
        f"--workers {a.workers}` at {rev}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.processor() or platform.machine()}, machine shared with other jobs (2 cores).", "",
        f"Corpus: {gen['bytes'] / 1e6:.1f} MB of text, {gen['docs']:,} documents over 4 sources; then {extra:,} "
        f"documents appended to {last} ({rows:,} rows, new raw version). Engine local, {a.workers} worker(s), "
        f"chunk_rows {spec.engine.chunk_rows}.", "",
        "| stage | full (s) | 1 of 4 changed (s) | changed / full |", "|---|---:|---:|---:|",
    ]
    for k in ("document_filters", "dedup signatures (map)", "contamination scan", "dedup reduce"):
        lines.append(f"| {k} | {full[k]:.1f} | {changed[k]:.1f} | {changed[k] / full[k]:.2f} |")
    lines += ["", f"Resume: {last} given another raw version (v3), each stage failed in chunk {half + 1} of {last}'s "
              f"{n_last} (an exception injected there: the chunks before it are stored as parts, as after a kill), "
              "then rerun:", "", "| stage | rerun after the failure (s) | chunks computed by the rerun |",
              "|---|---:|---:|"]
    for k, (secs, calls) in resumed.items():
        lines.append(f"| {k} | {secs:.1f} | {calls} of {n_last} |")
    lines += ["", f"Reused on the second run: filters {changed['filters_reused']}, signatures "
              f"{changed['signatures_reused']}, contamination hits {changed['hits_reused']} (the dedup reduce is "
              "not incremental: it bands every source's signatures again)."]
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
