"""The serial steps' per-document code as first written, kept verbatim: the oracle the faster versions
must match exactly (mix_assets_tests/stages/dedup/test_serial_identity.py)."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mix_assets.core import tables
from mix_assets.stages.dedup.dedup import READ_BATCH_ROWS
from mix_assets.core.idset import IdSet
from mix_assets.stages.split.split import (
    KEY_BATCH_ROWS, Disjointness, SplitError, _keys_in_order, _sides_of, _split_batches, raw_index,
)


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


def kept_batches(raw_paths: dict[str, str], dedup_keys_path: str, exclusion_masks_path: str):
    """The kept documents (KEPT_COLUMNS), sorted by source then doc_id, as a stream of tables: per source
    (sorted) its raw index (`raw_index`), then one pass over dedup_keys (sorted by doc_id) a batch at a
    time, keeping its rows of that source that are raw documents and not excluded. Held: the excluded
    ids and one source's raw index; never the dedup_keys table."""
    excluded = IdSet(pq.read_table(exclusion_masks_path, columns=["doc_id"]).column(0).cast(pa.string()))
    for source, path in sorted(raw_paths.items()):
        raw = raw_index(path, source, excluded, list(raw_paths))
        matched = np.zeros(len(raw.ids), bool)
        last, row = None, 0
        for b in tables.iter_batches(dedup_keys_path, ["doc_id", "source", "cluster_id", "exact_key"], KEY_BATCH_ROWS):
            doc = b.column(0).cast(pa.string())
            _keys_in_order(b, doc, last, row, dedup_keys_path)
            last, row = (doc[-1].as_py() if len(doc) else last), row + len(doc)
            pos = raw.ids.index(doc)
            pos[~pc.equal(b.column(1), source).fill_null(False).to_numpy(zero_copy_only=False)] = -1
            pos[pos >= 0] = np.where(raw.excluded[pos[pos >= 0]], -1, pos[pos >= 0])
            take = np.flatnonzero(pos >= 0)
            if not len(take):
                continue
            matched[pos[take]] = True
            idx = pa.array(take, pa.int64())
            yield pa.table({"doc_id": doc.take(idx), "source": pa.array([source] * len(take), pa.string()),
                            "n_bytes": pa.array(raw.n_bytes[pos[take]], pa.int64()),
                            "cluster_id": b.column(2).cast(pa.string()).take(idx),
                            "exact_key": b.column(3).cast(pa.string()).take(idx)})
        lost = np.flatnonzero(~matched & ~raw.excluded)
        if len(lost):
            first = int(raw.row[lost].min())
            doc = pq.ParquetFile(path).read(columns=["doc_id"]).column(0)[first].as_py()  # error path only
            raise SplitError(f"{dedup_keys_path}: no row for kept document {doc!r} (source {source!r}); "
                             "dedup_keys must cover every raw document")


def measure_disjointness(split) -> Disjointness:
    """Count doc ids, clusters and exact keys that appear on both sides of the split (a table or a split
    file, read three times a batch at a time). Held: the val side's doc ids, clusters and exact keys
    (`IdSet`s, their bytes + 1 each per val document), nothing per train document."""
    cols = ["doc_id", "cluster_id", "exact_key"]
    val: dict[str, list] = {c: [] for c in cols}
    for b in _split_batches(split, cols + ["split"]):
        v = pa.array(_sides_of(b)[0])
        for c in cols:
            val[c].append(b.column(c).cast(pa.string()).filter(v))
    sets = {c: IdSet(pa.chunked_array(val.pop(c), pa.string())) for c in cols}
    shared = {c: np.zeros(len(sets[c]), bool) for c in cols}
    n_val = 0
    for b in _split_batches(split, cols + ["split"]):
        v, t = _sides_of(b)
        n_val += int(v.sum())
        train = pa.array(t)
        for c in cols:
            pos = sets[c].index(b.column(c).cast(pa.string()).filter(train))
            shared[c][pos[pos >= 0]] = True
    touching = 0
    for b in _split_batches(split, ["cluster_id", "exact_key", "split"]):
        v = pa.array(_sides_of(b)[0])
        hit = np.zeros(int(pc.sum(v).as_py() or 0), bool)
        for c in ("cluster_id", "exact_key"):
            pos = sets[c].index(b.column(c).cast(pa.string()).filter(v))
            hit |= (pos >= 0) & shared[c][np.maximum(pos, 0)] if len(shared[c]) else False
        touching += int(hit.sum())
    return Disjointness(*(int(shared[c].sum()) for c in cols), touching, n_val)
