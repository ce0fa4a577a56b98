"""validation_split as engine tasks over doc_id ranges of dedup_keys (issue 29): no process holds every document.

dedup_keys is sorted by doc_id; it is cut into contiguous row ranges (`range_count`: `partitions`, or more when
that would put over RANGE_ROWS rows in one, so a join task's memory is bounded by RANGE_ROWS whatever the corpus
and the configured count), and range k holds the ids from its first id up to the next range's first
(`key_ranges`, read from row-group statistics where a range starts a group). Two rounds of tasks, taken in
task order:

1. `scatter_task`, one per row range of each raw file: checks its rows (null id, wrong source: the file and
   row named) and writes doc_id, n_bytes and raw row to a scratch Parquet file, one row group per doc_id range
   (layout.REDUCE_SCRATCH, local or S3, so a task on any worker reads it).
2. `join_task`, one per range: its dedup_keys rows, its raw rows of every source (one row group of each
   scatter file) and the excluded ids of its range (the exclusion_masks row groups whose statistics overlap
   it, `excluded_in`); per source (sorted) the kept rows in doc_id order with their side,
   written as one row group each of a scratch file; it returns counts, and the first repeated raw id and
   the first lost document of each source (smallest raw row) for the driver's errors.

A document's side is a pure function of (seed, cluster_id) (`split.assign_split`), so a cluster never
straddles the split whatever the ranges; the driver then copies, source after source, each range's row
group in range order into the split file: the rows of the one-process stream (`split.kept_batches`), in
the same order and row groups, so the same bytes for any partition and worker count. The driver holds the
splitter ids and per-task counts (O(ranges)), and each scatter file's {range: row group}.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mix_assets.core import engine, layout, tables
from mix_assets.core.idset import UNSORTED, IdSet, _fixed, unsorted_row
from mix_assets.stages.dedup import partitioned as part
from mix_assets.stages.dedup import signatures as sig
from mix_assets.stages.split import split as lib

SCATTER_SCHEMA = pa.schema([("doc_id", pa.string()), ("n_bytes", pa.int64()), ("row", pa.int64())])
KEY_COLUMNS = ["doc_id", "source", "cluster_id", "exact_key"]
# raw rows per scatter task (~2 MB of doc_id and n_bytes): fewer, larger scatter files to read per join task
SCATTER_ROWS = tables.ROW_GROUP_ROWS
# Most dedup_keys rows per join task. A join task holds ~0.5 KB per row (its key columns, raw index, kept rows
# with their side, the writer's buffers), so with `partitions` = 1 one task held the whole corpus in the step's
# process on the local engine: the step's peak grew 358 -> 660 MB from 100 MB to 1.6 GB (bench/results/graph.md).
RANGE_ROWS = 32 * 1024


def range_count(rows: int, partitions: int) -> int:
    """How many doc_id ranges the join runs in: `partitions`, or enough that none holds over RANGE_ROWS rows
    (the bytes are the same for any count)."""
    return max(partitions, -(-rows // RANGE_ROWS))


def key_ranges(keys: engine.FileAt, partitions: int) -> tuple[list[engine.RowRange], list[str]]:
    """dedup_keys cut into at most `partitions` row ranges of about equal rows, and the first doc_id of
    every range but the first (the splitters: sorted when the file is)."""
    with engine.open_parquet(keys) as f:
        md = f.metadata
        n = md.num_rows
        starts = sorted({min(n, (n * k) // partitions) for k in range(partitions)} - {n}) or [0]
        ends = np.cumsum([md.row_group(g).num_rows for g in range(md.num_row_groups)])
        col = f.schema_arrow.get_field_index("doc_id")
        first: list[str] = []
        for s in starts[1:]:
            g = int(np.searchsorted(ends, s, side="right"))
            g0 = int(ends[g - 1]) if g else 0
            st = md.row_group(g).column(col).statistics
            if s == g0 and st is not None and st.has_min_max and isinstance(st.min, str):
                first.append(st.min)  # the group's smallest id is its first row when the file is sorted
            else:
                first.append(f.read_row_group(g, columns=["doc_id"], use_threads=False).column(0)[s - g0].as_py())
    ranges = [engine.RowRange(keys.path, a, b, keys.endpoint_url) for a, b in zip(starts, starts[1:] + [n])]
    return ranges, first


def key_rows(keys: engine.FileAt) -> int:
    with engine.open_parquet(keys) as f:
        return f.metadata.num_rows


def excluded_in(masks: engine.FileAt, lo: Optional[str], hi: Optional[str]) -> IdSet:
    """The excluded ids of exclusion_masks in [lo, hi) (None: unbounded), read from every row group whose doc_id
    statistics overlap it, or that has none (exact whatever the file's order; ~one row group when it is sorted
    by doc_id, as build_exclusion_masks writes it)."""
    ids = []
    with engine.open_parquet(masks) as f:
        md = f.metadata
        col = f.schema_arrow.get_field_index("doc_id")
        for g in range(md.num_row_groups):
            st = md.row_group(g).column(col).statistics
            if st is not None and st.has_min_max and isinstance(st.min, str) and isinstance(st.max, str) and \
                    ((hi is not None and st.min >= hi) or (lo is not None and st.max < lo)):
                continue
            got = f.read_row_group(g, columns=["doc_id"], use_threads=False).column(0).cast(pa.string())
            if lo is not None:  # only the range's ids go into the set (a group may span many ranges)
                got = got.filter(pc.greater_equal(got, lo).fill_null(False))
            if hi is not None:
                got = got.filter(pc.less(got, hi).fill_null(False))
            ids.append(got)
    return IdSet(pa.chunked_array(ids, pa.string()) if ids else pa.array([], pa.string()))


def range_of(ids: pa.Array, splitters: list[str]) -> np.ndarray:
    """The range (0 .. len(splitters)) of every id: how many splitters are <= it (byte order, as Arrow sorts)."""
    if not splitters or not len(ids):
        return np.zeros(len(ids), np.int64)
    sp = pa.array(splitters, pa.string())
    width = int(max(pc.max(pc.binary_length(ids)).as_py() or 0, pc.max(pc.binary_length(sp)).as_py())) + 1
    return np.searchsorted(_fixed(sp, width), _fixed(ids, width), side="right").astype(np.int64)


# -- 1. raw rows to doc_id ranges ---------------------------------------------------------------------
@dataclass(frozen=True)
class ScatterTask:
    source: str
    rows: engine.RowRange
    name: str  # its scratch file


def _released(fn):
    """`fn`, then its freed pages returned to the system: on the local engine the tasks' threads are the step's
    process, and each thread's cache of freed pages (mimalloc, glibc) otherwise adds to its peak."""
    @functools.wraps(fn)
    def run(*args):
        out = fn(*args)
        tables.release_unused()
        return out
    return run


@_released
def scatter_task(sc: part.Scratch, splitters: list[str], task: ScatterTask) -> dict[int, int]:
    """Check one raw row range and write it to `task.name`, a row group per doc_id range (pure); returns
    {range: row group}."""
    t = engine.read_rows(task.rows, ["doc_id", "source", "n_bytes"])
    path = task.rows.path
    bad = lib._first_null(t, "doc_id")
    if bad is not None:
        raise lib.SplitError(f"{path}: row {task.rows.start + bad}: field doc_id is null")
    wrong = pc.not_equal(t.column("source"), task.source).fill_null(True)
    if pc.any(wrong).as_py():
        bad = int(np.flatnonzero(wrong.to_numpy(zero_copy_only=False))[0])
        raise lib.SplitError(f"{path}: row {task.rows.start + bad}: field source is "
                             f"{t.column('source')[bad].as_py()!r}, expected {task.source!r}")
    doc = t.column("doc_id").cast(pa.string()).combine_chunks()
    k = range_of(doc, splitters)
    order = np.argsort(k, kind="stable")
    out = pa.table({"doc_id": doc, "n_bytes": t.column("n_bytes").cast(pa.int64()).fill_null(0),
                    "row": np.arange(task.rows.start, task.rows.stop, dtype=np.int64)}, schema=SCATTER_SCHEMA)
    out, k = out.take(pa.array(order)), k[order]
    groups, bounds = {}, np.searchsorted(k, np.arange(len(splitters) + 2))
    with sc.storage().writing(sc.key(task.name)) as tmp, pq.ParquetWriter(tmp, SCATTER_SCHEMA) as w:
        for r in range(len(splitters) + 1):
            if bounds[r + 1] > bounds[r]:
                groups[r] = len(groups)
                w.write_table(out.slice(bounds[r], bounds[r + 1] - bounds[r]), row_group_size=len(out) or 1)
    return groups


def _group(sc: part.Scratch, name: str, g: int, columns=None) -> pa.Table:
    with sc.storage().open(sc.key(name)) as f:
        return pq.ParquetFile(f).read_row_group(g, columns=columns, use_threads=False)


# -- 2. the join per range ------------------------------------------------------------------------------
@dataclass
class RangeResult:
    """What a join task hands back (counts and first problems; the rows stay in its scratch file)."""

    name: str
    groups: dict  # {source: row group of its kept rows}
    rows: int
    first: Optional[str]
    last: Optional[str]
    unsorted: Optional[int]  # first dedup_keys row (file numbering) null or not above the one before
    null_cluster: Optional[int]  # first dedup_keys row with a null cluster_id
    summary: dict = field(default_factory=dict)  # {source: [docs, val_docs, bytes, val_bytes]}
    repeated: dict = field(default_factory=dict)  # {source: (raw row, doc_id)} of its first repeated id here
    lost: dict = field(default_factory=dict)  # {source: (raw row, doc_id)} of its first kept doc without a key


@dataclass(frozen=True)
class JoinTask:
    k: int
    keys: engine.RowRange
    lo: Optional[str] = None  # the range's ids: [lo, hi) (None: unbounded)
    hi: Optional[str] = None


@_released
def join_task(sc: part.Scratch, scattered: dict, masks: engine.FileAt, seed: int, val_fraction: float,
              task: JoinTask) -> RangeResult:
    """Range k's kept documents per source with their side, written to scratch (pure). `scattered`:
    {source: [(scatter file, {range: group})]} in raw row order; `masks`: exclusion_masks."""
    excluded = excluded_in(masks, task.lo, task.hi)
    keys = engine.read_rows(task.keys, KEY_COLUMNS)
    doc = keys.column("doc_id").cast(pa.string()).combine_chunks()
    res = RangeResult(f"join-{task.k}", {}, len(doc), doc[0].as_py() if len(doc) else None,
                      doc[-1].as_py() if len(doc) else None, unsorted_row(doc, None, task.keys.start),
                      None)
    null = lib._first_null(keys, "cluster_id")
    res.null_cluster = None if null is None else task.keys.start + null
    src = keys.column("source").cast(pa.string()).combine_chunks()
    parts = []
    for source in sorted(scattered):
        got = [_group(sc, name, groups[task.k]) for name, groups in scattered[source] if task.k in groups]
        raw = pa.concat_tables([SCATTER_SCHEMA.empty_table(), *got]).combine_chunks()
        rdoc = raw.column("doc_id").chunk(0) if raw.column("doc_id").num_chunks else pa.array([], pa.string())
        index = IdSet(rdoc)
        pos = index.index(rdoc)
        rows = raw.column("row").to_numpy()
        if len(index) < len(rdoc):
            dup = np.flatnonzero(np.bincount(pos)[pos] > 1)
            first = dup[np.argmin(rows[dup])]
            res.repeated[source] = (int(rows[first]), rdoc[int(first)].as_py())
        nb, rrow, ex = np.zeros(len(index), np.int64), np.zeros(len(index), np.int64), np.zeros(len(index), bool)
        nb[pos], rrow[pos] = raw.column("n_bytes").to_numpy(), rows
        ex[pos] = excluded.contains(rdoc)
        matched = np.zeros(len(index), bool)
        mine = np.flatnonzero(pc.equal(src, source).fill_null(False).to_numpy(zero_copy_only=False))
        at = index.index(doc.take(pa.array(mine, pa.int64()))) if len(mine) else np.zeros(0, np.int64)
        keep = at >= 0
        keep[keep] = ~ex[at[keep]]
        take, at = mine[keep], at[keep]
        matched[at] = True
        lost = np.flatnonzero(~matched & ~ex)
        if len(lost):
            first = lost[np.argmin(rrow[lost])]
            res.lost[source] = (int(rrow[first]), rdoc[int(np.flatnonzero(pos == first)[0])].as_py())
        if not len(take):
            continue
        idx = pa.array(take, pa.int64())
        kept = pa.table({"doc_id": doc.take(idx), "source": pa.array([source] * len(take), pa.string()),
                         "n_bytes": pa.array(nb[at], pa.int64()),
                         "cluster_id": keys.column("cluster_id").cast(pa.string()).take(idx),
                         "exact_key": keys.column("exact_key").cast(pa.string()).take(idx)})
        out = lib.assign_split(kept, seed, val_fraction)
        is_val = pc.equal(out.column("split"), "val").to_numpy(zero_copy_only=False)
        n_b = out.column("n_bytes").to_numpy()
        res.summary[source] = [out.num_rows, int(is_val.sum()), int(n_b.sum()), int(n_b[is_val].sum())]
        res.groups[source] = len(parts)
        parts.append(out)
    with sc.storage().writing(sc.key(res.name)) as tmp, pq.ParquetWriter(tmp, lib.SPLIT_SCHEMA) as w:
        for t in parts:
            w.write_table(t, row_group_size=max(t.num_rows, 1))
    return res


# -- the step ---------------------------------------------------------------------------------------------
def build_split_in_ranges(storage, sources: list[str], seed: int, val_fraction: float, partitions: int,
                          eng: engine.Engine) -> lib.SplitSummary:
    """`split.build_validation_split` as tasks on `eng` over `partitions` doc_id ranges (the same bytes)."""
    names = sorted(sources)
    raw = tables.raw_files(storage, names)
    keys = tables.file_at(storage, layout.DEDUP_KEYS)
    keys_where = storage.uri(layout.DEDUP_KEYS)
    for s in names:
        with engine.open_parquet(raw[s]) as f:
            missing = [c for c in ("doc_id", "source", "n_bytes") if c not in f.schema_arrow.names]
            if missing:
                raise lib.SplitError(f"{raw[s]}: missing column(s) {missing}; has {f.schema_arrow.names}")
    masks = tables.file_at(storage, layout.EXCLUSION_MASKS)
    with engine.open_parquet(masks) as f:
        if "doc_id" not in f.schema_arrow.names:
            raise lib.SplitError(f"{masks}: missing column doc_id; has {f.schema_arrow.names}")
    ranges, splitters = key_ranges(keys, range_count(key_rows(keys), partitions))
    summary = lib.SplitSummary(per_source={})
    with part.scratch(storage, "validation_split") as sc:
        # scatter tasks of up to SCATTER_ROWS rows: each join task reads one row group of every scatter file
        work = [ScatterTask(s, r, f"raw-{s}-{i}") for s in names
                for i, r in enumerate(engine.row_ranges(raw[s], max(eng.chunk_rows, SCATTER_ROWS)))]
        scattered: dict = {s: [] for s in names}
        for t, groups in zip(work, engine.map_chunks(functools.partial(scatter_task, sc, splitters), work, eng)):
            scattered[t.source].append((t.name, groups))
        results = list(engine.map_chunks(
            functools.partial(join_task, sc, scattered, masks, seed, val_fraction),
            [JoinTask(k, r, ([None] + splitters)[k], (splitters + [None])[k]) for k, r in enumerate(ranges)], eng))
        _raise_problems(results, names, keys_where)
        for s in names:
            per = [r.summary[s] for r in results if s in r.summary]
            if per:
                docs, val, nb, val_b = (sum(x[i] for x in per) for i in range(4))
                summary.docs, summary.val_docs = summary.docs + docs, summary.val_docs + val
                summary.bytes, summary.val_bytes = summary.bytes + nb, summary.val_bytes + val_b
                summary.per_source[s] = {"train_docs": docs - val, "val_docs": val}

        def parts():  # a range's rows of a source are one row group: copied a batch at a time
            for s in names:
                for r in results:
                    if s in r.groups:
                        with sc.storage().open(sc.key(r.name)) as f:
                            for b in pq.ParquetFile(f).iter_batches(lib.SPLIT_GROUP_ROWS, row_groups=[r.groups[s]],
                                                                    use_threads=False):
                                yield pa.Table.from_batches([b])

        with storage.writing(layout.VALIDATION_SPLIT) as tmp, pq.ParquetWriter(tmp, lib.SPLIT_SCHEMA) as w:
            for group in sig.regroup(parts(), lib.SPLIT_GROUP_ROWS, lib.SPLIT_SCHEMA):
                w.write_table(group)
                del group
    return summary


def _raise_problems(results: list[RangeResult], names: list[str], keys_where: str) -> None:
    """The one-process stream's errors, in its order: per source (sorted) a repeated raw id, then (with the
    first source) dedup_keys out of order or a null cluster_id, then a kept document without a key row."""
    bad, last, row = None, None, 0
    for r in results:  # the order of dedup_keys across and inside ranges
        here = row if last is not None and r.first is not None and not r.first > last else r.unsorted
        if here is not None:
            bad = ("order", here)
            break
        if r.null_cluster is not None:
            bad = ("null", r.null_cluster)
            break
        last, row = (r.last if r.rows else last), row + r.rows
    for k, s in enumerate(names):
        rep = [r.repeated[s] for r in results if s in r.repeated]
        if rep:
            raise lib.SplitError(f"raw documents: doc_id {min(rep)[1]!r} appears more than once across {names}")
        if k == 0 and bad is not None:
            what = f"doc_id is {UNSORTED}" if bad[0] == "order" else "cluster_id is null"
            raise lib.SplitError(f"{keys_where}: row {bad[1]}: field {what}")
        lost = [r.lost[s] for r in results if s in r.lost]
        if lost:
            raise lib.SplitError(f"{keys_where}: no row for kept document {min(lost)[1]!r} (source {s!r}); "
                                 "dedup_keys must cover every raw document")


def build_validation_split(storage, sources: list[str], seed: int, val_fraction: float,
                           eng: Optional[engine.Engine] = None, partitions: int = 1) -> lib.SplitSummary:
    """Read raw/<source>, dedup_keys and exclusion_masks through `storage`; write the split file a row
    group of SPLIT_GROUP_ROWS rows at a time. The join runs as tasks on `eng` (default this thread) over
    `partitions` doc_id ranges of dedup_keys (more when one would hold over RANGE_ROWS rows) (`build_split_in_ranges`): the rows of `split.kept_batches`
    (the one-process stream, kept as the reference) with their side, the same bytes for any partition and
    worker count."""
    if partitions < 1:
        raise ValueError(f"validation_split: partitions is {partitions}, expected at least 1")
    return build_split_in_ranges(storage, sources, seed, val_fraction, partitions, eng or engine.Engine(num_cpus=1))
