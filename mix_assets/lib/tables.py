"""Parquet tables under the storage root: deterministic writes, reads, and the raw sources' paths."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.lib import layout


def write_parquet(storage, key: str, table: pa.Table) -> None:
    # Fixed writer options and no timestamps: the same table gives the same bytes on every build.
    with storage.writing(key) as tmp:
        pq.write_table(table, tmp, compression="zstd", use_dictionary=True, write_statistics=True)


def read_parquet(storage, key: str, columns: list[str] | None = None) -> pa.Table:
    return pq.read_table(storage.source(key), columns=columns)


def raw_paths(storage, sources) -> dict[str, str]:
    """{source: local path of its raw documents parquet} for the given source names."""
    return {s: storage.source(layout.RAW_DOCS.format(source=s)) for s in sources}
