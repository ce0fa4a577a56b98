"""Cross-document line dedup as a map / reduce / map on the engine (core/engine.py), no Dagster.

A line is a `\\n`-separated piece of a document's text; its key is XXH64 (seed 0) of the line's UTF-8 bytes with
surrounding (Unicode) whitespace stripped: fixed by the algorithm, the same in every process, library version
and run (stages/lines/kernels.py). Blank lines and lines shorter than `min_line_chars` are never counted nor
removed. Both maps are one compiled pass per chunk over the Arrow text buffers (kernels.py).

1. count map (`count_chunk`), over row ranges of every source's raw documents: per chunk the distinct
   (document, line hash) pairs grouped by hash, so a line counts once per document however often it repeats
   inside it: (hash, documents) sorted by hash;
2. reduce (`reduce_counts`): the chunks' counts summed per hash (a stable merge of the sorted parts, then sums per run,
   sorted by hash): the same array whatever the chunking, the order results arrive in or the worker count;
   `frequent` keeps the hashes with documents >= min_docs (written to layout.LINE_FREQUENT);
3. removal map (`apply_chunk`): per document the lines whose hash is frequent are removed (with their
   newline); a document that lost lines and keeps under `min_kept_share` of its non-blank characters (or under
   `min_kept_chars`) is dropped (reason DROP_REASON, through exclusion_masks); documents that lose nothing keep
   their text byte for byte. With the local engine (its tasks run in this process) the removal takes the
   chunk the count map read and its line keys (`HELD`, at most 512 MB, emptied after the run) instead of
   reading and hashing it again, and writes the new texts over the held ones (no second buffer); with Ray,
   past the budget or after a resume it reads them again: the same output either way. Output per source (layout.LINE_DOCS): raw/<source>'s rows in raw order with the
   new text, n_bytes / n_chars / est_tokens recomputed, and per document the lines and bytes removed and
   whether it is dropped.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mix_assets.core import chunks, engine, imports, layout, tables

FORMAT = "mix_assets.line_dedup/1"
META_KEY = b"mix_assets.line_dedup"
DROP_REASON = "line_dedup:too_little_left"
FREQUENT_SCHEMA = pa.schema([("hash", pa.uint64()), ("docs", pa.int64())])
# raw/<source>'s columns (stages/sources/sources.DOC_SCHEMA), then what line_dedup did to each document
STAT_FIELDS = [("removed_lines", pa.int32()), ("removed_bytes", pa.int64()), ("dropped", pa.bool_())]


class LineInputError(ValueError):
    """Raw documents line_dedup cannot read; the message names file, row and field."""


@dataclass(frozen=True)
class LineParams:
    """What decides the removals (plain values: travels to Ray workers, hashed into the key)."""

    min_docs: int = 10
    min_line_chars: int = 20
    min_kept_share: float = 0.2
    min_kept_chars: int = 1

    @classmethod
    def of(cls, spec) -> "LineParams":
        return cls(spec.min_docs, spec.min_line_chars, spec.min_kept_share, spec.min_kept_chars)


@functools.cache
def code() -> str:
    """This module's code and the project modules it reaches (the line key is kernels.py's own hash)."""
    return hashlib.sha256(imports.source_version(__name__).encode()).hexdigest()[:16]


def _buffers(text) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(the texts as one large_string array, its offsets as int64, its UTF-8 bytes): views, no copy of the bytes."""
    if isinstance(text, pa.ChunkedArray):  # one chunk: taken as it is (combine_chunks would copy it)
        a = text.chunk(0) if text.num_chunks == 1 else text.combine_chunks()
    else:
        a = text
    if a.type == pa.string():
        a = a.cast(pa.large_string())  # int32 offsets widened (kernels read int64 offsets)
    bufs = a.buffers()
    o = np.frombuffer(bufs[1], np.int64)[a.offset:a.offset + len(a) + 1]
    b = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return a, o, b


def _lines(text: pa.Array, min_line_chars: int):
    """One row per line of every document (polars, for the readers that need line texts: the removed-line
    samples, the bench): row (document index), line (as written), hash (kernels' key of the stripped line),
    counted (at least `min_line_chars` long once stripped), chars (stripped length)."""
    s = pl.from_arrow(text.cast(pa.large_string()) if not isinstance(text, pa.ChunkedArray)
                      else text.combine_chunks().cast(pa.large_string()))
    df = pl.DataFrame({"row": pl.int_range(0, len(s), eager=True, dtype=pl.Int64), "line": s.fill_null("")})
    df = df.with_columns(pl.col("line").str.split("\n")).explode("line")
    key = pl.col("line").str.strip_chars()
    df = df.with_columns(key.str.len_chars().alias("chars"))
    return df.with_columns(pl.Series("hash", textkeys_hash(df.select(key)["line"]), dtype=pl.UInt64),
                           (pl.col("chars") >= min_line_chars).alias("counted"))


def textkeys_hash(stripped: pl.Series) -> np.ndarray:
    """The kernels' key (XXH64 of the UTF-8 bytes) of already stripped lines."""
    from mix_assets.core import kernels_jit

    _, o, b = _buffers(stripped.to_arrow())
    return kernels_jit.xxh64_strings(o, b)


@dataclass(frozen=True)
class CountChunk:
    """One count task: rows of one source's raw documents."""

    source: str
    rows: engine.RowRange
    min_line_chars: int
    hold: bool = False  # keep the rows and line keys in this process for the removal map (local engine only)


def _read(rows: engine.RowRange, source: str, columns: list[str]) -> pa.Table:
    t = engine.read_rows(rows, columns)
    for name in ("doc_id", "text"):
        if name in columns and t.column(name).null_count:
            bad = rows.start + int(np.flatnonzero(np.asarray(t.column(name).is_null()))[0])
            raise LineInputError(f"{rows.path}: row {bad}: field {name!r} is null (source {source})")
    return t


def count_lines(text: pa.Array, min_line_chars: int, keep: bool = False, work: Optional["Work"] = None):
    """(distinct line hashes sorted, documents holding each): every counted line once per document (one
    compiled pass, kernels.doc_line_hashes). With `keep`, also (every line's hash, stripped characters, end
    and characters) in text order: what remove_lines would compute again (`lines=`). `work`: where the
    kernel's work arrays come from and go back to (else fresh ones)."""
    from mix_assets.stages.lines import kernels

    _, o, b = _buffers(text)
    # a counted line holds a byte and all but a document's last are followed by a newline: at most
    # (bytes + documents) / 2 + documents of them; lines: at most bytes + documents
    n = len(o) - 1
    size = int(o[-1] - o[0])
    cap = (size + n) // 2 + n + 1 if min_line_chars >= 1 else size + n + 1
    nl = size + n + 1 if keep else 0
    # a line's end, characters and stripped characters are under the chunk's bytes: int32 while that fits (the
    # kept line keys take 20 bytes a line instead of 32)
    index = np.int32 if size + n < 2**31 - 1 else np.int64
    arrays = work.take(cap, nl, index) if work is not None else kernels.work_arrays(cap, nl, index)
    try:
        k, li = kernels.doc_line_hashes(o, b, *kernels.words(b), min_line_chars, *arrays, keep)
        h = arrays[0][:k]
        h.sort()  # in place (np.unique would sort a copy)
        uniq, counts = kernels.runs(h)
        lines = tuple(a[:li].copy() for a in arrays[1:]) if keep else ()
    finally:
        if work is not None:
            work.give(arrays)
    return (uniq, counts, *lines)


def count_chunk(chunk: CountChunk) -> tuple[np.ndarray, np.ndarray]:
    """The count map's work on one chunk (pure but for `chunk.hold`: the chunk's rows and line keys are then
    kept in this process for its removal task, HELD)."""
    if not chunk.hold:
        t = _read(chunk.rows, chunk.source, ["doc_id", "text"])
        return count_lines(t.column("text"), chunk.min_line_chars)
    t = _read(chunk.rows, chunk.source, _columns(chunk.rows))
    i = t.schema.get_field_index("text")
    if t.column(i).num_chunks > 1:  # joined once here, not again by the removal
        t = t.set_column(i, t.schema.field(i), pa.chunked_array([t.column(i).combine_chunks()]))
    uniq, n, *lines = count_lines(t.column("text"), chunk.min_line_chars, keep=True, work=WORK)
    HELD.put((chunk.source, chunk.rows), (t, *lines))
    return uniq, n


class Work:
    """The count kernel's work arrays, handed from chunk to chunk of one run in this process (local engine):
    a chunk's arrays are written again by the next instead of fresh ones being mapped and faulted in page by
    page for every chunk. Sized by the largest chunk so far (only the pages written are taken); emptied
    after the run."""

    def __init__(self):
        self.free, self.lock = [], threading.Lock()

    def take(self, counted: int, lines: int, index=np.int64) -> tuple[np.ndarray, ...]:
        from mix_assets.stages.lines import kernels

        with self.lock:
            got = self.free.pop() if self.free else None
        if got is not None and got[0].shape[0] >= counted and got[1].shape[0] >= lines and got[2].dtype == index:
            return got
        return kernels.work_arrays(max(counted, got[0].shape[0] if got else 0),
                                   max(lines, got[1].shape[0] if got else 0), index)

    def give(self, arrays: tuple[np.ndarray, ...]) -> None:
        with self.lock:
            self.free.append(arrays)

    def clear(self) -> None:
        with self.lock:
            self.free = []


WORK = Work()  # a local engine's count work arrays, one set per thread counting at once, emptied after a run


class Held:
    """Chunks read and keyed by the count map, kept in this process for the removal map (at most `budget` bytes
    of Arrow data and line keys; past it a chunk is not kept and its removal reads and keys it again). Used only
    by the local engine, whose tasks run in this process; the removal's output is the same either way."""

    def __init__(self, budget: int):
        self.budget, self.size, self.items, self.lock = budget, 0, {}, threading.Lock()

    @staticmethod
    def _bytes(v) -> int:
        return int(sum(x.nbytes for x in v))

    def put(self, key, value) -> bool:
        with self.lock:
            nb = self._bytes(value)
            if self.size + nb > self.budget or key in self.items:
                return False
            self.items[key] = value
            self.size += nb
            return True

    def pop(self, key):
        with self.lock:
            v = self.items.pop(key, None)
            if v is not None:
                self.size -= self._bytes(v)
            return v

    def clear(self) -> None:
        with self.lock:
            self.items, self.size = {}, 0


HELD = Held(512 << 20)  # a local engine's chunks (text and line keys) between the two maps, at most 512 MB


def reduce_counts(parts: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The chunks' counts summed per hash, sorted by hash (independent of the parts' order and cut): each
    part is sorted, so one k-way merge of them (kernels.merge_counts) instead of a sort of them all."""
    from mix_assets.stages.lines import kernels

    parts = list(parts)
    if not parts:
        return np.array([], np.uint64), np.array([], np.int64)
    h = np.concatenate([p[0] for p in parts]).astype(np.uint64, copy=False)
    d = np.concatenate([p[1] for p in parts]).astype(np.int64, copy=False)
    starts = np.cumsum([0] + [len(p[0]) for p in parts], dtype=np.int64)
    return kernels.merge_counts(h, d, starts)


def frequent(hashes: np.ndarray, docs: np.ndarray, min_docs: int) -> pa.Table:
    """FREQUENT_SCHEMA: the hashes found in >= min_docs documents, sorted by hash."""
    keep = docs >= min_docs
    return pa.table({"hash": pa.array(hashes[keep], pa.uint64()), "docs": pa.array(docs[keep], pa.int64())},
                    schema=FREQUENT_SCHEMA)


def remove_lines(text: pa.Array, hashes: np.ndarray, p: LineParams, lines: Optional[tuple] = None,
                 in_place: bool = False) -> tuple[pa.Array, dict]:
    """(the texts without their frequent lines, per document: removed_lines, removed_bytes, dropped,
    kept_chars, chars, n_chars of the new text); a document losing nothing keeps its text as it was. One
    compiled pass (kernels.remove_frequent); `lines`: count_lines(keep=True)'s line keys of these texts.
    `in_place`: the caller owns `text` and reads it no more: with `lines` and a writable buffer the new texts
    are written over the old ones (no second copy of the chunk's text, no fresh pages to fault in)."""
    from mix_assets.stages.lines import kernels

    old, o, b = _buffers(text)
    n = len(old)
    base = int(o[0])
    data = old.buffers()[2]
    if in_place and lines is not None and len(lines[0]) and data is not None and b.flags.writeable:
        buf, nb = data, b[base:]
    else:
        lines = lines if lines is not None else (np.zeros(0, np.uint64), *(np.zeros(0, np.int64) for _ in range(3)))
        # a buffer of Arrow's pool: it takes back the pages of the chunks already written
        buf, base = pa.allocate_buffer(max(int(o[-1]) - base, 1)), 0
        nb = np.frombuffer(buf, np.uint8)
    no, w, removed, chars, kept, nchars = kernels.remove_frequent(
        o, b, p.min_line_chars, np.ascontiguousarray(hashes, np.uint64), *lines, nb)
    out = pa.LargeStringArray.from_buffers(n, pa.py_buffer(no), buf.slice(base, int(w)))
    if old.null_count:  # a null text stays null (it has one blank line, never removed unless blank lines count)
        out = pc.if_else(pc.is_null(old), old, out)
    changed = removed > 0
    dropped = changed & ((kept < p.min_kept_share * chars) | (kept < p.min_kept_chars))
    nb_old = np.diff(o)
    return out, {"removed_lines": removed, "removed_bytes": nb_old - np.diff(no), "dropped": dropped,
                 "kept_chars": kept, "chars": chars, "n_chars": nchars}


@dataclass(frozen=True)
class ApplyChunk:
    """One removal task: rows of one source's raw documents and the frequent hashes (sorted uint64)."""

    source: str
    rows: engine.RowRange
    hashes: np.ndarray = field(compare=False)
    params: LineParams = LineParams()


def _columns(rows: engine.RowRange) -> list[str]:
    with engine.open_parquet(rows.path if rows.endpoint_url is None else engine.FileAt(rows.path, rows.endpoint_url)) as f:
        return f.schema_arrow.names


def apply_chunk(chunk: ApplyChunk, doc_schema: Optional[pa.Schema] = None) -> pa.Table:
    """The removal map's work on one chunk (pure): raw's columns with the new text and its sizes recomputed
    (est_tokens scaled by the bytes kept, as raw estimates it from bytes), then STAT_FIELDS."""
    held = HELD.pop((chunk.source, chunk.rows))
    if held is not None:  # the count map's read and line keys (local engine)
        t, lines = held[0], held[1:]
    else:
        t, lines = _read(chunk.rows, chunk.source, _columns(chunk.rows)), None
    schema = t.schema
    # the chunk's table is this task's own (popped or just read): its text is rewritten in place
    text, st = remove_lines(t.column("text"), chunk.hashes, chunk.params, lines, in_place=True)
    nb_old = t.column("n_bytes").fill_null(0).to_numpy().astype(np.int64)
    nb = pc.binary_length(text).to_numpy(zero_copy_only=False).astype(np.int64)
    est_old = t.column("est_tokens").fill_null(1).to_numpy().astype(np.int64)
    changed = st["removed_lines"] > 0
    est = np.where(changed, np.maximum(1, np.round(nb * est_old / np.maximum(nb_old, 1))), est_old).astype(np.int64)
    cols = {"text": text, "n_bytes": pa.array(np.where(changed, nb, nb_old)),
            "n_chars": pa.array(st["n_chars"], pa.int64()), "est_tokens": pa.array(est)}
    out = {c: cols.get(c, t.column(c)) for c in schema.names}
    out.update({"removed_lines": pa.array(st["removed_lines"], pa.int32()),
                "removed_bytes": pa.array(np.where(changed, st["removed_bytes"], 0), pa.int64()),
                "dropped": pa.array(st["dropped"], pa.bool_())})
    return pa.table(out, schema=docs_schema(schema))


def docs_schema(raw_schema: pa.Schema) -> pa.Schema:
    """A line_dedup documents file's schema: raw's columns, then STAT_FIELDS."""
    return pa.schema([*raw_schema.remove_metadata(), *STAT_FIELDS])


# -- per-source totals and the most frequent removed lines ----------------------------------------------------
@dataclass
class SourceTotals:
    """What line_dedup did to one source."""

    docs: int = 0
    bytes_before: int = 0
    modified_docs: int = 0
    removed_lines: int = 0
    removed_bytes: int = 0
    dropped_docs: int = 0
    dropped_bytes: int = 0  # the bytes the dropped documents still held

    def add(self, t: pa.Table, nb_before: np.ndarray) -> None:
        rl = t.column("removed_lines").to_numpy().astype(np.int64)
        dr = t.column("dropped").to_numpy(zero_copy_only=False).astype(bool)
        nb = t.column("n_bytes").to_numpy().astype(np.int64)
        self.docs += t.num_rows
        self.bytes_before += int(nb_before.sum())
        self.modified_docs += int((rl > 0).sum())
        self.removed_lines += int(rl.sum())
        self.removed_bytes += int(t.column("removed_bytes").to_numpy().sum())
        self.dropped_docs += int(dr.sum())
        self.dropped_bytes += int(nb[dr].sum())

    def row(self, source: str, skipped: bool = False) -> dict:
        lost = self.removed_bytes + self.dropped_bytes
        return {"source": source, "docs": self.docs, "modified_docs": self.modified_docs,
                "removed_lines": self.removed_lines, "removed_bytes": self.removed_bytes,
                "dropped_docs": self.dropped_docs, "bytes_before": self.bytes_before,
                "lost_bytes_share": lost / max(self.bytes_before, 1), "skipped": skipped}


def over_share(rows: Sequence[dict], max_lost_share: float) -> list[dict]:
    """The sources that lost more than `max_lost_share` of their bytes (removed lines and dropped documents)."""
    return [r for r in rows if r["lost_bytes_share"] > max_lost_share]


def top_lines(texts: Iterable[pa.Array], top: pa.Table, k: int, min_line_chars: int) -> list[dict]:
    """The text of the `k` most frequent frequent lines (docs descending, then hash), found in `texts` (a
    source's raw texts, a batch at a time; stops once every one is found)."""
    if k <= 0 or not top.num_rows:
        return []
    order = np.lexsort((top.column("hash").to_numpy(), -top.column("docs").to_numpy()))[:k]
    want = {int(top.column("hash")[int(i)].as_py()): int(top.column("docs")[int(i)].as_py()) for i in order}
    found: dict[int, str] = {}
    for text in texts:
        df = _lines(text, min_line_chars).filter(pl.col("counted") & pl.col("hash").is_in(list(set(want) - set(found))))
        for h, line in zip(df["hash"].to_list(), df["line"].to_list()):
            found.setdefault(int(h), line.strip())
        if len(found) == len(want):
            break
    return [{"line": found[h], "docs": want[h], "hash": f"{h:016x}"} for h in sorted(want, key=lambda h: (-want[h], h))
            if h in found]


def describe(raw_versions: Mapping[str, Optional[str]], params: LineParams, skip: Sequence[str]) -> dict:
    """What the frequent set and every documents file are computed from (their schema metadata)."""
    return {"format": FORMAT, "raw": {k: raw_versions[k] for k in sorted(raw_versions)},
            "params": json.loads(json.dumps(params.__dict__)), "skip": sorted(skip), "code": code()}


# -- the stage: count map, reduce, removal map, files ----------------------------------------------------------
GROUP_ROWS = 65536  # rows per row group of a documents file, whatever the chunk size (same bytes on every engine)
WRITE_BATCH_ROWS = 1024  # the Parquet writer's batch (pyarrow's default write_batch_size, set explicitly below)
# A documents file is a second copy of its source's text, written once and read by every later stage:
# pyarrow's lz4 instead of the project's zstd costs less CPU to write and about half as much to read, for a
# file about 1.5x larger on prose (bench/results/line_dedup.md, "the stage with its files"). Same content.
# Dictionaries only for raw's few-valued string columns: the text, doc ids and numbers are (nearly) all distinct
# per row group, so the writer hashed their values into a dictionary only to fall back to plain (write about
# 0.02 CPU s less per 100 MB; same content, the file 0.3 % larger on the bench's text).
DOCS_WRITER_OPTIONS = {**tables.WRITER_OPTIONS, "compression": "lz4", "write_batch_size": WRITE_BATCH_ROWS,
                       "use_dictionary": ["source", "origin"]}


def aligned_groups(parts: Iterable[pa.Table], rows: int, schema: pa.Schema,
                   batch: int = WRITE_BATCH_ROWS) -> Iterator[pa.Table]:
    """The rows of `parts` in order, as tables of exactly `rows` rows (the last one shorter), each made of the
    parts' own Arrow chunks where a chunk boundary falls on a multiple of `batch` rows from the table's start,
    and of the rows around any other boundary joined (under `batch` rows each). The Parquet writer cuts its
    pages at its batches of `batch` rows, which start again at every Arrow chunk: with every boundary on a
    multiple its batches, hence its bytes, are those of the table joined into one chunk (test), without
    copying the whole group (a join into one chunk copies every byte of text once more)."""
    group: list[pa.Table] = []
    pending: list[pa.Table] = []  # the rows since the last multiple of `batch` in this group
    pn = gn = 0
    out = False
    for t in parts:
        while t.num_rows:
            take = min(t.num_rows, rows - gn)
            part, t = t.slice(0, take), t.slice(take)
            if pn:
                k = min(batch - pn, part.num_rows)
                pending.append(part.slice(0, k))
                pn, part = pn + k, part.slice(k)
                if pn == batch:
                    group.append(pa.concat_tables(pending).combine_chunks())
                    pending, pn = [], 0
            if part.num_rows:  # starts on a multiple: whole batches as they are, the rest pending
                whole = part.num_rows - part.num_rows % batch
                if whole:
                    group.append(part.slice(0, whole))
                if part.num_rows > whole:
                    pending, pn = [part.slice(whole)], part.num_rows - whole
            gn += take
            if gn == rows:
                yield _joined(group, pending, schema)
                group, pending, pn, gn, out = [], [], 0, 0, True
    if gn or not out:
        yield _joined(group, pending, schema)


def _joined(group: list, pending: list, schema: pa.Schema) -> pa.Table:
    tail = [pa.concat_tables(pending).combine_chunks()] if pending else []
    return pa.concat_tables(group + tail) if group or tail else schema.empty_table()


@dataclass
class Result:
    """What one line_dedup run wrote and counted."""

    lines: int  # distinct counted lines over the mix
    frequent: int  # of which found in >= min_docs documents
    sources: list[dict]  # SourceTotals.row per source, config order
    top: list[dict]  # the most frequent removed lines, scrubbed by the asset before they are shown


PARTS_STAGE = "lines"  # core/chunks.py: the chunk parts of a killed run live under parts/lines/


def group_ranges(file: engine.FileAt, chunk_rows: int) -> list[engine.RowRange]:
    """The file cut into consecutive row ranges of at most `chunk_rows` rows that follow its row groups: whole
    groups together while they fit, a larger group cut into `chunk_rows` pieces. A chunk then reads each of
    its row groups once and as one Arrow chunk (engine.row_ranges' fixed cut reads a group straddling two
    chunks twice and hands over several Arrow chunks, joined by a copy). Results do not depend on the cut."""
    with engine.open_parquet(file) as f:
        sizes = [f.metadata.row_group(g).num_rows for g in range(f.metadata.num_row_groups)]
    cuts, start, row = [], 0, 0
    for n in sizes:
        if row > start and row + n - start > chunk_rows:
            cuts.append((start, row))
            start = row
        row += n
        while row - start > chunk_rows:
            cuts.append((start, start + chunk_rows))
            start += chunk_rows
    if row > start:
        cuts.append((start, row))
    return [engine.RowRange(file.path, a, b, file.endpoint_url) for a, b in cuts]


def _count_table(chunk, got: tuple[np.ndarray, np.ndarray]) -> pa.Table:
    return pa.table({"hash": pa.array(got[0], pa.uint64()), "docs": pa.array(got[1], pa.int64())}, schema=FREQUENT_SCHEMA)


def dedup_lines(storage, files: Mapping[str, engine.FileAt], raw_versions: Mapping[str, Optional[str]], p: LineParams,
                skip: Sequence[str], eng: engine.Engine, samples: int = 0, log=None) -> Result:
    """`_dedup_lines`; whatever happens, nothing stays HELD (nor in WORK) after it."""
    try:
        return _dedup_lines(storage, files, raw_versions, p, skip, eng, samples, log)
    finally:
        HELD.clear()
        WORK.clear()


def _dedup_lines(storage, files: Mapping[str, engine.FileAt], raw_versions: Mapping[str, Optional[str]], p: LineParams,
                 skip: Sequence[str], eng: engine.Engine, samples: int = 0, log=None) -> Result:
    """Count every source's lines (map), sum them (reduce), write layout.LINE_FREQUENT, then each source's
    documents without the frequent lines (map; skipped sources: none written) and layout.LINE_REPORT.

    Resume after a kill: the count map keeps each chunk's counts as a keyed part (core/chunks.py, keyed by the
    source's raw version, the parameters and this code) until the run ends, so a rerun counts only the chunks
    it had not counted. The removal map stores no part: a chunk's removal is recomputed from raw and the
    frequent set for less than storing its text would cost (its whole new text written, fsynced, read back,
    deleted); a source whose documents file was written by a killed run of the same inputs (`done`) is kept."""
    names = list(files)
    meta = describe(raw_versions, p, skip)
    store = chunks.Parts(storage, PARTS_STAGE)
    own = {s: {"raw": raw_versions.get(s), "params": meta["params"], "code": meta["code"]} for s in names}
    work = [(s, rng) for s in names for rng in group_ranges(files[s], eng.chunk_rows)]
    count_meta = {s: {**own[s], "map": "count"} for s in names}
    keys, have, _ = store.keyed("line_dedup (count)", work, count_meta, log)
    HELD.clear()
    hold = eng.kind == "local"  # its tasks run in this process: the removal map finds what the count read
    counted = chunks.resume(count_chunk, [CountChunk(s, rng, p.min_line_chars, hold and s not in skip)
                                          for s, rng in work], keys, eng, store, encode=_count_table, have=have)
    hashes, docs = reduce_counts((t.column("hash").to_numpy(), t.column("docs").to_numpy()) for t, _ in counted)
    top = frequent(hashes, docs, p.min_docs)
    tables.write_parquet(storage, layout.LINE_FREQUENT,
                         top.replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True).encode()}))
    count_keys = keys  # kept until the end: a run killed in the removal map does not count again
    if log:
        log.info(f"line_dedup: {len(hashes):,} distinct lines over {len(names)} sources, {top.num_rows:,} in >= "
                 f"{p.min_docs} documents")
    wanted = top.column("hash").to_numpy().astype(np.uint64)
    rows = []
    for s in names:
        if s in skip:
            rows.append(_skipped_totals(files[s], s))
            continue
        with engine.open_parquet(files[s]) as f:
            schema = docs_schema(f.schema_arrow).with_metadata({META_KEY: json.dumps(meta, sort_keys=True).encode()})
        mine = group_ranges(files[s], eng.chunk_rows)
        key = layout.LINE_DOCS.format(source=s)
        if (totals := done(storage, key, meta)) is not None:
            for rng in mine:
                HELD.pop((s, rng))
            if log:
                log.info(f"line_dedup: kept {s}'s documents file, written by a killed run of the same inputs")
            rows.append(totals.row(s))
            continue
        totals = SourceTotals()
        results = engine.map_chunks(apply_chunk, [ApplyChunk(s, rng, wanted, p) for rng in mine], eng)

        def parts(results=results, totals=totals):
            for t in results:
                totals.add(t, _bytes_before(t))
                yield t.cast(schema)

        tables.write_parquet_groups(storage, key, schema, aligned_groups(parts(), GROUP_ROWS, schema),
                                    DOCS_WRITER_OPTIONS)
        rows.append(totals.row(s))
    shown = [] if not samples else top_lines(_texts([files[s] for s in names if s not in skip]), top, samples,
                                             p.min_line_chars)
    res = Result(len(hashes), top.num_rows, rows, shown)
    storage.write_text(layout.LINE_REPORT, json.dumps(
        {"lines": res.lines, "frequent": res.frequent, "params": meta["params"], "skip": meta["skip"],
         "sources": rows}, indent=1, sort_keys=True))
    store.drop(count_keys)
    return res


def _bytes_before(t: pa.Table) -> np.ndarray:
    return t.column("n_bytes").to_numpy().astype(np.int64) + t.column("removed_bytes").to_numpy()


def done(storage, key: str, meta: dict) -> Optional[SourceTotals]:
    """The totals of the documents file at `key` when it was computed from `meta` (its schema metadata says so:
    the same raw version of every source, parameters, skip list and code, hence the same frequent set), else
    None. Files are written whole or not at all (storage.writing), so one found is complete; without every
    source's raw version nothing is taken."""
    if any(v is None for v in meta["raw"].values()) or not storage.exists(key):
        return None
    with engine.open_parquet(tables.file_at(storage, key)) as f:
        if (f.schema_arrow.metadata or {}).get(META_KEY) != json.dumps(meta, sort_keys=True).encode():
            return None
        totals = SourceTotals()
        for i in range(f.num_row_groups):
            t = f.read_row_group(i, columns=["n_bytes", "removed_lines", "removed_bytes", "dropped"])
            totals.add(t, _bytes_before(t))
    return totals


def _skipped_totals(file: engine.FileAt, source: str) -> dict:
    t = SourceTotals()
    with engine.open_parquet(file) as f:
        for i in range(f.num_row_groups):
            nb = f.read_row_group(i, columns=["n_bytes"]).column("n_bytes").to_numpy().astype(np.int64)
            t.docs, t.bytes_before = t.docs + len(nb), t.bytes_before + int(nb.sum())
    return t.row(source, skipped=True)


def _texts(files: Sequence[engine.FileAt]) -> Iterable[pa.Array]:
    for file in files:
        with engine.open_parquet(file) as f:
            for i in range(f.num_row_groups):
                yield f.read_row_group(i, columns=["text"]).column("text").combine_chunks()


def modified_sources(spec) -> list[str]:
    """The sources whose text line_dedup rewrites (none without a `line_dedup:` section), config order."""
    ld = spec.line_dedup
    return [] if ld is None else [s.name for s in spec.sources if s.name not in ld.skip]


def text_files(storage, spec, sources: Sequence[str]) -> dict[str, engine.FileAt]:
    """{source: where any worker reads its documents' text}: line_dedup's file for a source it rewrites, else
    raw/<source>'s (tables.raw_files). What document_filters, the tokenizer and token_shards read."""
    mine = set(modified_sources(spec))
    raw = tables.raw_files(storage, [s for s in sources if s not in mine])
    return {s: raw[s] if s not in mine else tables.file_at(storage, layout.LINE_DOCS.format(source=s)) for s in sources}


def text_paths(storage, spec, sources: Sequence[str]) -> dict[str, str]:
    """`text_files` as this process reads them (local paths or open S3 files, tables.raw_paths)."""
    mine = set(modified_sources(spec))
    raw = tables.raw_paths(storage, [s for s in sources if s not in mine])
    return {s: raw[s] if s not in mine else storage.source(layout.LINE_DOCS.format(source=s)) for s in sources}


def dropped(storage, spec) -> Optional[tuple[pa.Array, pa.Array]]:
    """(doc ids, DROP_REASON) of every document line_dedup dropped; None without line dedup."""
    names = modified_sources(spec)
    if spec.line_dedup is None:
        return None
    ids = []
    for s in names:
        key = layout.LINE_DOCS.format(source=s)
        if storage.exists(key):
            t = pq.read_table(storage.source(key), columns=["doc_id", "dropped"])
            ids.append(t.filter(t.column("dropped")).column("doc_id").combine_chunks().cast(pa.string()))
    got = pa.concat_arrays(ids) if ids else pa.array([], pa.string())
    return got, pa.array([DROP_REASON] * len(got), pa.string())



def with_dropped(rejected: Optional[tuple[pa.Array, pa.Array]], storage, spec) -> Optional[tuple[pa.Array, pa.Array]]:
    """The filters' (doc ids, first failing rule) (`decisions.rejected_reasons`; None when no source has
    decisions) with the documents line_dedup dropped added (reason DROP_REASON), each document once: one the
    filters rejected keeps their reason. What exclusion_masks excludes."""
    got = dropped(storage, spec)
    if got is None or not len(got[0]):
        return rejected
    if rejected is None:
        return got
    before = pa.array(rejected[0]).cast(pa.string())
    new = pc.invert(pc.is_in(got[0], value_set=before))
    return (pa.concat_arrays([before, got[0].filter(new)]),
            pa.concat_arrays([pa.array(rejected[1]).cast(pa.string()), got[1].filter(new)]))


def with_dropped_ids(rejected: Optional[pa.Array], storage, spec) -> Optional[pa.Array]:
    """`with_dropped` for dedup_keys' `rejected` (doc ids only)."""
    got = with_dropped(None if rejected is None else (rejected, pa.nulls(len(rejected), pa.string())), storage, spec)
    return None if got is None else got[0]
