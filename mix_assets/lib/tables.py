"""Parquet tables under the storage root: deterministic writes, reads, and the raw sources' paths."""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.lib import engine, layout


# Fixed writer options and no timestamps: the same table gives the same bytes on every build.
WRITER_OPTIONS = dict(compression="zstd", use_dictionary=True, write_statistics=True)


def write_parquet(storage, key: str, table: pa.Table) -> None:
    with storage.writing(key) as tmp:
        pq.write_table(table, tmp, **WRITER_OPTIONS)


def write_parquet_groups(storage, key: str, schema: pa.Schema, groups: Iterable[pa.Table]) -> None:
    """Write tables one after another with the options of `write_parquet`, each as its own row group
    (a table longer than pyarrow's default row group is split as `write_table` splits it), holding one
    at a time: a single table gives the bytes `write_parquet` gives."""
    with storage.writing(key) as tmp:
        with pq.ParquetWriter(tmp, schema, **WRITER_OPTIONS) as w:
            for t in groups:
                w.write_table(t)


def read_parquet(storage, key: str, columns: list[str] | None = None) -> pa.Table:
    return pq.read_table(storage.source(key), columns=columns)


def raw_paths(storage, sources) -> dict[str, str]:
    """{source: local path of its raw documents parquet} for the given source names."""
    return {s: storage.source(layout.RAW_DOCS.format(source=s)) for s in sources}


def row_ranges(storage, key: str, chunk_rows: int) -> list[engine.RowRange]:
    """`key` cut into map chunks that name where any worker reads it: the s3:// URL on an S3 root
    (range GETs through lib/transport, never a download into this step's cache), else the local path."""
    if storage.is_s3:
        return engine.row_ranges(storage.uri(key), chunk_rows, storage.s3_endpoint_url)
    return engine.row_ranges(storage.local_path(key), chunk_rows)
