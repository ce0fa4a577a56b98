"""Small helpers shared by the stage modules: asset keys, code versions, parquet I/O via storage."""

from __future__ import annotations

import hashlib
import inspect
import io

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.lib.storage import Storage


def raw_key(source: str) -> dg.AssetKey:
    return dg.AssetKey(["raw", source])


def code_version(*parts: object) -> str:
    """A code_version from the source of the given functions/modules and any config values.

    A changed stage or changed config then marks the asset stale in the UI.
    """
    h = hashlib.sha256()
    for p in parts:
        if inspect.ismodule(p) or inspect.isfunction(p) or inspect.isclass(p):
            h.update(inspect.getsource(p).encode())
        else:
            h.update(repr(p).encode())
    return h.hexdigest()[:12]


def write_parquet(storage: Storage, key: str, table: pa.Table) -> None:
    # Fixed writer options and no timestamps: the same table gives the same bytes on every build.
    with storage.writing(key) as tmp:
        pq.write_table(table, tmp, compression="zstd", use_dictionary=True, write_statistics=True)


def read_parquet(storage: Storage, key: str, columns: list[str] | None = None) -> pa.Table:
    return pq.read_table(storage.local_path(key), columns=columns)


def md_table(header: list[str], rows: list[list[object]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()
