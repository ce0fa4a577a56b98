"""The serial steps' per-document code as first written, kept verbatim: the oracle the faster versions
must match exactly (mix_assets_tests/lib/test_serial_identity.py)."""

from __future__ import annotations

from typing import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.lib import tables
from mix_assets.lib.dedup import READ_BATCH_ROWS


def snippets(paths: Mapping[str, str], wanted: set[str], chars: int = 240) -> dict[str, str]:
    """First `chars` characters (whitespace collapsed) of the wanted documents' texts."""
    out: dict[str, str] = {}
    if not wanted:
        return out
    want = pa.array(sorted(wanted), pa.string())
    for name in sorted(paths):
        for batch in tables.iter_batches(paths[name], ["doc_id", "text"], READ_BATCH_ROWS):
            mask = pc.is_in(batch.column("doc_id").cast(pa.string()), value_set=want)
            if not pc.any(mask).as_py():
                continue
            sel = batch.filter(mask)
            for doc, text in zip(sel.column("doc_id").to_pylist(), sel.column("text").to_pylist()):
                flat = " ".join((text or "").split())
                out[doc] = flat[:chars] + ("…" if len(flat) > chars else "")
    return out
