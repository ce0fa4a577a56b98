"""The validation split: kept documents -> train/val, decided per near-duplicate cluster.

Kept documents = the rows of every `raw/<source>` file minus the doc_ids in `exclusion_masks`.
Each kept document takes its `cluster_id` from `dedup_keys`; the side of a document is a pure
function of (seed, cluster_id), so a cluster never straddles the split and the assignment does
not depend on processing order, worker count or which other documents exist.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

SPLIT_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("cluster_id", pa.string()),
        ("exact_key", pa.string()),
        ("n_bytes", pa.int64()),
        ("split", pa.string()),
    ]
)


class SplitError(ValueError):
    """Inputs that cannot be split; the message names the file, the row and the field."""


def _require(table: pa.Table, columns: list[str], path: str) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise SplitError(f"{path}: missing column(s) {missing}; has {table.column_names}")


def _first_null(table: pa.Table, column: str) -> int | None:
    col = table.column(column)
    if col.null_count == 0:
        return None
    return int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])


def kept_documents(raw_paths: dict[str, str], dedup_keys_path: str, exclusion_masks_path: str) -> pa.Table:
    """doc_id, source, cluster_id, exact_key, n_bytes of every kept document (text is not read)."""
    parts = []
    for source, path in sorted(raw_paths.items()):
        t = pq.read_table(path, columns=["doc_id", "source", "n_bytes"])
        _require(t, ["doc_id", "source", "n_bytes"], path)
        row = _first_null(t, "doc_id")
        if row is not None:
            raise SplitError(f"{path}: row {row}: field doc_id is null")
        wrong = pc.not_equal(t.column("source"), source)
        if pc.any(wrong).as_py():
            row = int(np.flatnonzero(wrong.to_numpy(zero_copy_only=False))[0])
            raise SplitError(
                f"{path}: row {row}: field source is {t.column('source')[row].as_py()!r}, expected {source!r}"
            )
        parts.append(t.select(["doc_id", "source", "n_bytes"]).cast(
            pa.schema([("doc_id", pa.string()), ("source", pa.string()), ("n_bytes", pa.int64())])
        ))
    docs = pa.concat_tables(parts) if parts else pa.table({"doc_id": [], "source": [], "n_bytes": []})
    ids = docs.column("doc_id")
    if pc.count_distinct(ids).as_py() != len(ids):
        counts = pc.value_counts(ids)
        dup = next(v["values"].as_py() for v in counts if v["counts"].as_py() > 1)
        raise SplitError(f"raw documents: doc_id {dup!r} appears more than once across {sorted(raw_paths)}")

    masks = pq.read_table(exclusion_masks_path, columns=["doc_id"])
    docs = docs.filter(pc.invert(pc.is_in(docs.column("doc_id"), value_set=masks.column("doc_id"))))

    keys = pq.read_table(dedup_keys_path, columns=["doc_id", "cluster_id", "exact_key"])
    for col in ("doc_id", "cluster_id"):
        row = _first_null(keys, col)
        if row is not None:
            raise SplitError(f"{dedup_keys_path}: row {row}: field {col} is null")
    joined = docs.join(keys, "doc_id", join_type="left outer")
    row = _first_null(joined, "cluster_id")
    if row is not None:
        raise SplitError(
            f"{dedup_keys_path}: no row for kept document {joined.column('doc_id')[row].as_py()!r} "
            f"(source {joined.column('source')[row].as_py()!r}); dedup_keys must cover every raw document"
        )
    if joined.num_rows != docs.num_rows:
        raise SplitError(f"{dedup_keys_path}: doc_id repeated; every document needs exactly one row")
    return joined.sort_by([("source", "ascending"), ("doc_id", "ascending")])


def unit_hash(seed: int, key: str) -> float:
    """A uniform number in [0, 1) that depends only on (seed, key)."""
    return xxhash.xxh64_intdigest(key.encode("utf-8"), seed=seed & 0xFFFFFFFFFFFFFFFF) / 2.0**64


def assign_split(kept: pa.Table, seed: int, val_fraction: float) -> pa.Table:
    """Add `split` ("train" | "val"): val when hash(seed, cluster_id) < val_fraction."""
    clusters = kept.column("cluster_id").to_pylist()
    u = np.fromiter((unit_hash(seed, c) for c in clusters), dtype=np.float64, count=len(clusters))
    split = np.where(u < val_fraction, "val", "train")
    out = kept.append_column("split", pa.array(split.tolist(), pa.string()))
    return out.select(SPLIT_SCHEMA.names).cast(SPLIT_SCHEMA)


@dataclass(frozen=True)
class Disjointness:
    """How far train and val touch; every count must be 0 for a valid split."""

    shared_doc_ids: int  # doc ids on both sides
    shared_clusters: int  # near-dup clusters with members on both sides
    shared_exact_keys: int  # normalised-text hashes on both sides (independent of the clustering)
    val_docs_with_train_dup: int  # val documents sharing a cluster or an exact key with a train doc
    val_docs: int

    @property
    def cross_split_near_dup_rate(self) -> float:
        return self.val_docs_with_train_dup / self.val_docs if self.val_docs else 0.0

    @property
    def ok(self) -> bool:
        return not (self.shared_doc_ids or self.shared_clusters or self.shared_exact_keys)


def measure_disjointness(split: pa.Table) -> Disjointness:
    """Count doc ids, clusters and exact keys that appear on both sides of the split."""
    is_val = pc.equal(split.column("split"), "val")
    train, val = split.filter(pc.invert(is_val)), split.filter(is_val)

    def shared(col: str) -> set:
        return set(val.column(col).to_pylist()) & set(train.column(col).to_pylist()) - {None}

    ids, clusters, keys = shared("doc_id"), shared("cluster_id"), shared("exact_key")
    touching = sum(
        1
        for c, k in zip(val.column("cluster_id").to_pylist(), val.column("exact_key").to_pylist())
        if c in clusters or k in keys
    )
    return Disjointness(len(ids), len(clusters), len(keys), touching, val.num_rows)


@dataclass(frozen=True)
class ValShare:
    docs: int
    val_docs: int
    bytes: int
    val_bytes: int
    target: float
    tolerance: float  # relative

    @property
    def share(self) -> float:
        return self.val_docs / self.docs if self.docs else 0.0

    @property
    def byte_share(self) -> float:
        return self.val_bytes / self.bytes if self.bytes else 0.0

    @property
    def ok(self) -> bool:
        return self.val_docs > 0 and abs(self.share - self.target) <= self.tolerance * self.target


def measure_val_share(split: pa.Table, target: float, tolerance: float) -> ValShare:
    is_val = pc.equal(split.column("split"), "val")
    nb = split.column("n_bytes")
    return ValShare(
        docs=split.num_rows,
        val_docs=int(pc.sum(pc.cast(is_val, pa.int64())).as_py() or 0),
        bytes=int(pc.sum(nb).as_py() or 0),
        val_bytes=int(pc.sum(pc.if_else(is_val, nb, 0)).as_py() or 0),
        target=target,
        tolerance=tolerance,
    )


def per_source_counts(split: pa.Table) -> dict[str, dict[str, int]]:
    """{source: {train_docs, val_docs}} for metadata."""
    out: dict[str, dict[str, int]] = {}
    for s, sp in zip(split.column("source").to_pylist(), split.column("split").to_pylist()):
        d = out.setdefault(s, {"train_docs": 0, "val_docs": 0})
        d[f"{sp}_docs"] += 1
    return dict(sorted(out.items()))


def build_validation_split(storage, sources: list[str], seed: int, val_fraction: float) -> pa.Table:
    """Read raw/<source>, dedup_keys and exclusion_masks through `storage`; write the split file."""
    from mix_assets.lib import layout

    raw = {s: storage.source(layout.RAW_DOCS.format(source=s)) for s in sources}
    kept = kept_documents(raw, storage.source(layout.DEDUP_KEYS), storage.source(layout.EXCLUSION_MASKS))
    split = assign_split(kept, seed, val_fraction)
    with storage.writing(layout.VALIDATION_SPLIT) as tmp:
        pq.write_table(split, tmp)
    return split


# -- independent near-duplicate scan across the split ---------------------------------------------
@dataclass(frozen=True)
class NearDupScan:
    """Exact word-shingle Jaccard between every val document and every train document that shares a shingle."""

    val_docs: int
    train_docs: int
    val_docs_with_train_near_dup: int  # Jaccard >= threshold with at least one train document
    max_jaccard: float
    threshold: float
    pairs_compared: int

    @property
    def rate(self) -> float:
        return self.val_docs_with_train_near_dup / self.val_docs if self.val_docs else 0.0


def _shingles(texts: list[str], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(doc index, shingle hash) unique pairs sorted by doc then hash, and per-doc set sizes."""
    from mix_assets.lib.minhash import shingle_sets

    g, off = shingle_sets(texts, n)
    sizes = np.diff(off)
    return np.repeat(np.arange(len(texts), dtype=np.int64), sizes), g, sizes


def _iter_texts(path: str, wanted: set[str], batch_rows: int = 2048):
    value_set = pa.array(sorted(wanted), pa.string())
    for batch in pq.ParquetFile(path).iter_batches(columns=["doc_id", "text"], batch_size=batch_rows):
        sel = batch.filter(pc.is_in(batch.column(0), value_set=value_set))
        if sel.num_rows:
            yield sel.column(0).to_pylist(), sel.column(1).fill_null("").to_pylist()


def cross_split_near_dups(split: pa.Table, raw_paths: dict[str, str], threshold: float,
                          shingle_words: int = 5) -> NearDupScan:
    """Re-measure train/val near-duplicates from the text itself, independently of dedup's clusters.

    Val shingle sets are held in memory (val is ~2 % of the mix); train documents stream by in
    Parquet batches and are compared exactly (set Jaccard) with every val document they share a
    shingle with.
    """
    is_val = pc.equal(split.column("split"), "val")
    by_source: dict[str, tuple[set, set]] = {}
    for d, s, v in zip(split.column("doc_id").to_pylist(), split.column("source").to_pylist(),
                       is_val.to_pylist()):
        by_source.setdefault(s, (set(), set()))[0 if v else 1].add(d)
    val_texts: list[str] = []
    for s in sorted(by_source):
        for _, texts in _iter_texts(raw_paths[s], by_source[s][0]):
            val_texts.extend(texts)
    vdoc, vh, vsize = _shingles(val_texts, shingle_words)
    order = np.argsort(vh, kind="stable")
    vdoc, vh = vdoc[order], vh[order]
    hit = np.zeros(len(val_texts), bool)
    max_j, pairs, n_train = 0.0, 0, 0
    for s in sorted(by_source):
        for _, texts in _iter_texts(raw_paths[s], by_source[s][1]):
            n_train += len(texts)
            tdoc, th, tsize = _shingles(texts, shingle_words)
            lo = np.searchsorted(vh, th, "left")
            hi = np.searchsorted(vh, th, "right")
            cnt = hi - lo
            m = cnt > 0
            if not m.any():
                continue
            tdoc, lo, cnt = tdoc[m], lo[m], cnt[m]
            # expand each matching shingle to the val documents holding it
            rep_t = np.repeat(tdoc, cnt)
            starts = np.repeat(lo - np.concatenate(([0], np.cumsum(cnt)[:-1])), cnt)
            rep_v = vdoc[starts + np.arange(len(rep_t))]
            key, inter = np.unique(rep_t * len(val_texts) + rep_v, return_counts=True)
            t_i, v_i = key // len(val_texts), key % len(val_texts)
            jac = inter / (tsize[t_i] + vsize[v_i] - inter)
            pairs += len(key)
            max_j = max(max_j, float(jac.max()))
            hit[v_i[jac >= threshold]] = True
    return NearDupScan(len(val_texts), n_train, int(hit.sum()), max_j, threshold, pairs)
