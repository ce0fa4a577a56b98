"""Parquet tables under the storage root: deterministic writes, reads, and the raw sources' paths."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Iterable, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.core import engine, layout, transport


# Fixed writer options and no timestamps: the same table gives the same bytes on every build.
WRITER_OPTIONS = dict(compression="zstd", use_dictionary=True, write_statistics=True)
# Row groups of 64 Ki rows (not pyarrow's 1 Mi default): a reader holds one group at a time, so the
# per-document reduce steps (exclusion_masks, validation_split, their checks) stay flat in memory from
# 65 k documents on rather than from 1 M (bench/reduce_memory.py; docs/scale.md).
ROW_GROUP_ROWS = 64 * 1024


def write_parquet(storage, key: str, table: pa.Table) -> None:
    with storage.writing(key) as tmp:
        pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS, **WRITER_OPTIONS)


def write_parquet_groups(storage, key: str, schema: pa.Schema, groups: Iterable[pa.Table],
                         options: Optional[dict] = None) -> None:
    """Write tables one after another with the options of `write_parquet`, each as its own row group
    (a table longer than pyarrow's default row group is split as `write_table` splits it), holding one
    at a time: a single table gives the bytes `write_parquet` gives. `options`: other fixed writer options
    for one file kind (default WRITER_OPTIONS)."""
    with storage.writing(key) as tmp:
        with pq.ParquetWriter(tmp, schema, **(WRITER_OPTIONS if options is None else options)) as w:
            for t in groups:
                w.write_table(t, row_group_size=ROW_GROUP_ROWS)


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


_LIBC = _libc()


def release_unused() -> None:
    """Return the freed pages of Arrow's pool (mimalloc's per-thread caches) and of glibc's heap to the
    system: a reduce's temporaries otherwise stay resident, and the next phase's add on top (issue 13)."""
    pa.default_memory_pool().release_unused()
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)


# A local file is read through a buffer of this many bytes per column, page by page, instead of a row
# group's whole column chunks at once: a reduce step's peak then does not grow as the groups of its
# inputs fill (dedup_keys: +12 MB in one pass from 41 k to 165 k documents unbuffered, +0 buffered at
# 64 KiB, +10 at 256 KiB; /tmp measurement, stop 23). Open files (S3) keep pyarrow's coalesced reads.
READ_BUFFER_BYTES = 64 * 1024


def parquet_file(source) -> pq.ParquetFile:
    """A `pq.ParquetFile` over a path (buffered: READ_BUFFER_BYTES), an open file, or itself."""
    if isinstance(source, pq.ParquetFile):
        return source
    if isinstance(source, (str, os.PathLike)) and not transport.is_s3(str(source)):
        return pq.ParquetFile(source, buffer_size=READ_BUFFER_BYTES, pre_buffer=False)
    return pq.ParquetFile(source)


def iter_batches(source, columns: list[str], batch_rows: int):
    """Record batches of a Parquet file (a path, an open file or a `pq.ParquetFile`) one row group after
    another: memory bounded by a row group's columns (pyarrow's iter_batches over the whole file reads
    ahead into later row groups; measured in bench/reduce_memory.py), a path's by a page per column
    (`parquet_file`). Decoded on this thread, and the pool's freed pages returned after each group:
    Arrow's reader threads and mimalloc's per-thread caches otherwise keep a few times a group's bytes
    resident (issue 13)."""
    f = parquet_file(source)
    for i in range(f.metadata.num_row_groups):
        yield from f.iter_batches(batch_size=batch_rows, row_groups=[i], columns=columns, use_threads=False)
        pa.default_memory_pool().release_unused()


def read_parquet(storage, key: str, columns: list[str] | None = None) -> pa.Table:
    return pq.read_table(storage.source(key), columns=columns)


def raw_paths(storage, sources) -> dict[str, str]:
    """{source: what pyarrow reads its raw documents parquet from, in this process} (a local path, or an
    open S3 file: not for map tasks, which take `raw_files`)."""
    return {s: storage.source(layout.RAW_DOCS.format(source=s)) for s in sources}


def file_at(storage, key: str) -> engine.FileAt:
    """Where any worker reads `key`: the s3:// URL on an S3 root (range GETs through core/transport,
    never a download into this step's cache), else the local path."""
    if storage.is_s3:
        return engine.FileAt(storage.uri(key), storage.s3_endpoint_url)
    return engine.FileAt(storage.local_path(key))


def raw_files(storage, sources) -> dict[str, engine.FileAt]:
    """{source: where any worker reads its raw documents parquet} (map stages and their reduces)."""
    return {s: file_at(storage, layout.RAW_DOCS.format(source=s)) for s in sources}


def row_ranges(storage, key: str, chunk_rows: int) -> list[engine.RowRange]:
    """`key` cut into map chunks that name where any worker reads it (`file_at`)."""
    return engine.row_ranges(file_at(storage, key), chunk_rows)
