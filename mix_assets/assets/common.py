"""Small helpers shared by the stage modules: asset keys, code versions, parquet I/O via storage."""

from __future__ import annotations

import hashlib
import inspect
import io

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.lib import lineage
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


def raw_name(source: str) -> str:
    """The lineage name of `raw/<source>` (its asset key as the UI writes it)."""
    return f"raw/{source}"


def verified_inputs(storage: Storage, consumer: str, inputs: list[str]) -> dict[str, str]:
    """Data versions of `inputs` once lineage proves they belong together; a dg.Failure names what to redo."""
    try:
        return lineage.verify_inputs(storage, consumer, inputs)
    except lineage.StaleInputError as e:
        raise dg.Failure(
            description=str(e),
            metadata={"stale_assets": ", ".join(e.rematerialise) or "none",
                      "problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in e.problems))},
            allow_retries=False,
        ) from None


def recorded(storage: Storage, asset: str, outputs, inputs: dict[str, str]) -> dict:
    """Write `asset`'s lineage record (last, after its files); return the Dagster side of it.

    The result goes into `MaterializeResult(**recorded(...))` merged with the asset's metadata: its
    data version (the UI marks children of a changed version stale) and what it was computed from.
    """
    rec = lineage.write_record(storage, asset, outputs, inputs)
    return {
        "data_version": dg.DataVersion(rec["data_version"][:16]),
        "metadata": {"computed_from": dg.MetadataValue.json({k: v[:16] for k, v in rec["inputs"].items()})},
    }


def with_lineage(result_metadata: dict, lineage_result: dict, **kwargs) -> dg.MaterializeResult:
    """A MaterializeResult carrying the asset's metadata plus its lineage (see `recorded`)."""
    return dg.MaterializeResult(
        metadata={**result_metadata, **lineage_result["metadata"]},
        data_version=lineage_result["data_version"],
        **kwargs,
    )


def write_parquet(storage: Storage, key: str, table: pa.Table) -> None:
    # Fixed writer options and no timestamps: the same table gives the same bytes on every build.
    with storage.writing(key) as tmp:
        pq.write_table(table, tmp, compression="zstd", use_dictionary=True, write_statistics=True)


def read_parquet(storage: Storage, key: str, columns: list[str] | None = None) -> pa.Table:
    return pq.read_table(storage.source(key), columns=columns)


def md_table(header: list[str], rows: list[list[object]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()
