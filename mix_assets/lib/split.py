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


def _sides(split: pa.Table, raw_paths: dict[str, str]) -> dict[str, np.ndarray]:
    """{source: int8 per raw row: 1 val, 0 train, -1 not in the split}, one hash join per source."""
    out = {}
    for s in sorted(set(split.column("source").to_pylist())):
        part = split.filter(pc.equal(split.column("source"), s))
        is_val = pc.equal(part.column("split"), "val").to_numpy(zero_copy_only=False).astype(np.int8)
        ids = pq.read_table(raw_paths[s], columns=["doc_id"]).column(0)
        pos = pc.index_in(ids, value_set=part.column("doc_id")).to_numpy(zero_copy_only=False)
        known = ~np.isnan(pos) if pos.dtype.kind == "f" else np.ones(len(pos), bool)
        side = np.full(len(pos), -1, np.int8)
        side[known] = is_val[pos[known].astype(np.int64)]
        out[s] = side
    return out


def _side_texts(path: str, side: np.ndarray, want: int, batch_rows: int = 2048):
    """Texts of the rows whose side is `want`, a Parquet batch at a time (row positions, no id lookups)."""
    at = 0
    for batch in pq.ParquetFile(path).iter_batches(columns=["text"], batch_size=batch_rows):
        sel = np.flatnonzero(side[at: at + batch.num_rows] == want)
        at += batch.num_rows
        if len(sel):
            yield batch.column(0).take(pa.array(sel)).fill_null("").to_pylist()


class _ValIndex:
    """Val shingle hashes as an inverted index: distinct sorted hashes, per hash the val docs holding it.

    Lookups go through a bucket table on the hashes' top bits (one bucket per distinct hash on
    average; splitmix64 output is uniform), so a train shingle costs O(1), not O(log #val shingles).
    """

    def __init__(self, doc: np.ndarray, h: np.ndarray, sizes: np.ndarray):
        order = np.argsort(h, kind="stable")
        h, self.doc, self.sizes = h[order], doc[order], sizes
        new = np.ones(len(h), bool)
        new[1:] = h[1:] != h[:-1]
        self.hashes = h[new]
        self.start = np.append(np.flatnonzero(new), len(h)).astype(np.int64)
        bits = max(1, int(np.ceil(np.log2(len(self.hashes) + 1))))
        self.shift = np.uint64(64 - bits)
        self.bucket = np.zeros((1 << bits) + 1, np.int64)
        np.cumsum(np.bincount((self.hashes >> self.shift).astype(np.int64), minlength=1 << bits),
                  out=self.bucket[1:])
        # 8 filter bits per distinct hash (1 byte each, cache-resident far longer than the table):
        # most train shingles are in no val doc and are dropped here before touching the table.
        self.fshift = np.uint64(64 - bits - 3)
        slot = (self.hashes >> self.fshift).astype(np.int64)
        self.filter = np.zeros(1 << bits, np.uint8)
        np.bitwise_or.at(self.filter, slot >> 3, np.left_shift(1, slot & 7).astype(np.uint8))

    def find(self, q: np.ndarray) -> np.ndarray:
        """Index into `hashes` of each query hash, -1 when no val doc holds it."""
        slot = (q >> self.fshift).astype(np.int64)
        act = np.flatnonzero((self.filter[slot >> 3] >> (slot & 7).astype(np.uint8)) & 1)
        b = (q[act] >> self.shift).astype(np.int64)
        lo, hi = self.bucket[b], self.bucket[b + 1]
        out = np.full(len(q), -1, np.int64)
        act, lo, hi = act[hi > lo], lo[hi > lo], hi[hi > lo]
        pos = lo
        while len(act):
            v, want = self.hashes[pos], q[act]
            eq = v == want
            out[act[eq]] = pos[eq]
            go = (v < want) & (pos + 1 < hi)
            act, pos, hi = act[go], pos[go] + 1, hi[go]
        return out

    def pairs(self, tdoc: np.ndarray, th: np.ndarray, n_val: int, cap: int = 1 << 22):
        """Yield (train doc, val doc, shared shingles) of every pair sharing at least one shingle.

        `tdoc` is sorted. Train documents are taken in groups whose (train shingle, val doc)
        incidences add up to about `cap`, so memory is bounded by `cap`, not by the batch x val size;
        a pair lies in one group (one train document), so its count is exact.
        """
        u = self.find(th)
        m = u >= 0
        tdoc, u = tdoc[m], u[m]
        lo, cnt = self.start[u], self.start[u + 1] - self.start[u]
        before = np.cumsum(cnt) - cnt
        new_doc = np.ones(len(tdoc), bool)
        new_doc[1:] = tdoc[1:] != tdoc[:-1]
        group = before[np.maximum.accumulate(np.where(new_doc, np.arange(len(tdoc)), 0))] // cap
        cuts = np.append(np.flatnonzero(np.diff(group, prepend=-1)), len(tdoc))
        for a, b in zip(cuts[:-1], cuts[1:]):
            c = cnt[a:b]
            rep_t = np.repeat(tdoc[a:b], c)
            first = np.repeat(lo[a:b] - (np.cumsum(c) - c), c)
            rep_v = self.doc[first + np.arange(len(rep_t))]
            key, inter = np.unique(rep_t * n_val + rep_v, return_counts=True)
            yield key // n_val, key % n_val, inter


def _shingles(texts: list[str], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(doc index, shingle hash) unique pairs sorted by doc then hash, and per-doc set sizes."""
    from mix_assets.lib.minhash import shingle_sets

    g, off = shingle_sets(texts, n)
    sizes = np.diff(off)
    return np.repeat(np.arange(len(texts), dtype=np.int64), sizes), g, sizes


def cross_split_near_dups(split: pa.Table, raw_paths: dict[str, str], threshold: float,
                          shingle_words: int = 5, batch_rows: int = 2048) -> NearDupScan:
    """Re-measure train/val near-duplicates from the text itself, independently of dedup's clusters.

    Exact: every (train, val) pair sharing a shingle is compared by set Jaccard. Val shingles are
    held as an inverted index (val is ~2 % of the mix); train documents stream by in Parquet
    batches, each shingle looked up in O(1), shared shingles counted per pair. Cost: linear in
    the text plus the pairs sharing a shingle (`pairs_compared`, reported).
    """
    sides = _sides(split, raw_paths)
    docs, hashes, sizes, n_val = [], [], [], 0
    for s in sorted(sides):
        for texts in _side_texts(raw_paths[s], sides[s], 1, batch_rows):
            d, h, z = _shingles(texts, shingle_words)
            docs.append(d + n_val)
            hashes.append(h)
            sizes.append(z)
            n_val += len(texts)
    n_train = sum(int((side == 0).sum()) for side in sides.values())
    hit = np.zeros(n_val, bool)
    max_j, pairs = 0.0, 0
    if not n_val:
        return NearDupScan(0, n_train, 0, max_j, threshold, pairs)
    index = _ValIndex(np.concatenate(docs), np.concatenate(hashes), np.concatenate(sizes))
    del docs, hashes
    for s in sorted(sides):
        for texts in _side_texts(raw_paths[s], sides[s], 0, batch_rows):
            tdoc, th, tsize = _shingles(texts, shingle_words)
            for t_i, v_i, inter in index.pairs(tdoc, th, n_val):
                jac = inter / (tsize[t_i] + index.sizes[v_i] - inter)
                pairs += len(inter)
                max_j = max(max_j, float(jac.max()))
                hit[v_i[jac >= threshold]] = True
    return NearDupScan(n_val, n_train, int(hit.sum()), max_j, threshold, pairs)
