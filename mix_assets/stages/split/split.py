"""The validation split: kept documents -> train/val, decided per near-duplicate cluster.

Kept documents = the rows of every `raw/<source>` file minus the doc_ids in `exclusion_masks`.
Each kept document takes its `cluster_id` from `dedup_keys`; the side of a document is a pure
function of (seed, cluster_id), so a cluster never straddles the split and the assignment does
not depend on processing order, worker count or which other documents exist.
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mix_assets.core import engine, tables
from mix_assets.stages.dedup import lsh
from mix_assets.stages.dedup import minhash as mh
from mix_assets.stages.dedup import signatures as sig
from mix_assets.core.idset import UNSORTED, IdSet, unsorted_row
from mix_assets.core.seeded import unit_hash

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


def _first_null(table: pa.Table, column: str) -> int | None:
    col = table.column(column)
    if col.null_count == 0:
        return None
    return int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])


KEY_BATCH_ROWS = 8192  # dedup_keys rows per batch of the split's passes
RAW_BATCH_ROWS = 8192
KEPT_COLUMNS = ["doc_id", "source", "n_bytes", "cluster_id", "exact_key"]


@dataclass
class RawIndex:
    """One source's raw documents, for the join with dedup_keys: ids (`IdSet`, sorted), and per sorted
    position its n_bytes, raw row and whether it is excluded. ~(id bytes + 18) B per document."""

    ids: IdSet
    n_bytes: np.ndarray
    row: np.ndarray
    excluded: np.ndarray


def raw_index(path: str, source: str, excluded: IdSet, everything: list[str]) -> RawIndex:
    """Read doc_id, source, n_bytes of one raw file a batch at a time (text is not read); nulls, a wrong
    source and a repeated doc_id are errors naming file, row and field."""
    ids, nbs, row = [], [], 0
    with engine.open_parquet(path) as f:
        missing = [c for c in ("doc_id", "source", "n_bytes") if c not in f.schema_arrow.names]
        if missing:
            raise SplitError(f"{path}: missing column(s) {missing}; has {f.schema_arrow.names}")
        for b in tables.iter_batches(f, ["doc_id", "source", "n_bytes"], RAW_BATCH_ROWS):
            t = pa.Table.from_batches([b])
            bad = _first_null(t, "doc_id")
            if bad is not None:
                raise SplitError(f"{path}: row {row + bad}: field doc_id is null")
            wrong = pc.not_equal(t.column("source"), source).fill_null(True)
            if pc.any(wrong).as_py():
                bad = int(np.flatnonzero(wrong.to_numpy(zero_copy_only=False))[0])
                raise SplitError(f"{path}: row {row + bad}: field source is {t.column('source')[bad].as_py()!r}, "
                                 f"expected {source!r}")
            ids.append(t.column("doc_id").cast(pa.string()).combine_chunks())
            nbs.append(np.asarray(t.column("n_bytes").cast(pa.int64()).fill_null(0), np.int64))
            row += t.num_rows
    doc = pa.chunked_array(ids, pa.string()).combine_chunks()
    del ids
    index = IdSet(doc)
    pos = index.index(doc)
    if len(index) < len(doc):
        dup = doc[int(np.flatnonzero(np.bincount(pos)[pos] > 1)[0])].as_py()  # first in row order
        raise SplitError(f"raw documents: doc_id {dup!r} appears more than once across {sorted(everything)}")
    out = RawIndex(index, np.zeros(len(pos), np.int64), np.zeros(len(pos), np.int64), np.zeros(len(pos), bool))
    out.n_bytes[pos], out.row[pos] = np.concatenate(nbs) if nbs else np.zeros(0, np.int64), np.arange(len(pos))
    out.excluded[pos] = excluded.contains(doc)
    return out


def kept_batches(raw_paths: dict[str, str], dedup_keys_path: str, exclusion_masks_path: str):
    """The one-process reference of the split's join (the step runs `ranges.build_validation_split`). The kept documents (KEPT_COLUMNS), sorted by source then doc_id, as a stream of tables: per source
    (sorted) its raw index (`raw_index`), then one pass over dedup_keys (sorted by doc_id) a batch at a
    time, keeping its rows of that source that are raw documents and not excluded. Held: the excluded
    ids and one source's raw index; never the dedup_keys table."""
    # pq.ParquetFile, not pq.read_table: that imports pyarrow.dataset, ~0.35 s of the step in a fresh process
    excluded = IdSet(pq.ParquetFile(exclusion_masks_path).read(columns=["doc_id"]).column(0).cast(pa.string()))
    for k, (source, path) in enumerate(sorted(raw_paths.items())):
        raw = raw_index(path, source, excluded, list(raw_paths))
        matched = np.zeros(len(raw.ids), bool)
        last, row = None, 0
        # the first source's pass reads every row and checks their order; later passes read the same file,
        # only its row groups whose source statistics may hold their source
        cols = ["doc_id", "source", "cluster_id", "exact_key"]
        for b in tables.iter_batches(dedup_keys_path, cols, KEY_BATCH_ROWS) if k == 0 else \
                _source_batches(dedup_keys_path, cols, source):
            doc = b.column(0).cast(pa.string())
            if k == 0:
                _keys_in_order(b, doc, last, row, dedup_keys_path)
                last, row = (doc[-1].as_py() if len(doc) else last), row + len(doc)
            mine = np.flatnonzero(pc.equal(b.column(1), source).fill_null(False).to_numpy(zero_copy_only=False))
            pos = raw.ids.index(doc.take(pa.array(mine, pa.int64()))) if len(mine) else np.zeros(0, np.int64)
            keep = pos >= 0
            keep[keep] = ~raw.excluded[pos[keep]]
            take, pos = mine[keep], pos[keep]
            if not len(take):
                continue
            matched[pos] = True
            idx = pa.array(take, pa.int64())
            yield pa.table({"doc_id": doc.take(idx), "source": pa.array([source] * len(take), pa.string()),
                            "n_bytes": pa.array(raw.n_bytes[pos], pa.int64()),
                            "cluster_id": b.column(2).cast(pa.string()).take(idx),
                            "exact_key": b.column(3).cast(pa.string()).take(idx)})
        lost = np.flatnonzero(~matched & ~raw.excluded)
        if len(lost):
            first = int(raw.row[lost].min())
            doc = pq.ParquetFile(path).read(columns=["doc_id"]).column(0)[first].as_py()  # error path only
            raise SplitError(f"{dedup_keys_path}: no row for kept document {doc!r} (source {source!r}); "
                             "dedup_keys must cover every raw document")


def _keys_in_order(b: pa.RecordBatch, doc: pa.Array, last, row: int, path: str) -> None:
    bad = unsorted_row(doc, last, row)
    if bad is not None:
        raise SplitError(f"{path}: row {bad}: field doc_id is {UNSORTED}")
    null = _first_null(pa.Table.from_batches([b]), "cluster_id")
    if null is not None:
        raise SplitError(f"{path}: row {row + null}: field cluster_id is null")


def kept_documents(raw_paths: dict[str, str], dedup_keys_path: str, exclusion_masks_path: str) -> pa.Table:
    """doc_id, source, n_bytes, cluster_id, exact_key of every kept document (text is not read), as one
    table (`kept_batches` is the stream)."""
    schema = pa.schema([(c, pa.int64() if c == "n_bytes" else pa.string()) for c in KEPT_COLUMNS])
    return pa.concat_tables([schema.empty_table(), *kept_batches(raw_paths, dedup_keys_path, exclusion_masks_path)])


def assign_split(kept: pa.Table, seed: int, val_fraction: float) -> pa.Table:
    """Add `split` ("train" | "val"): val when hash(seed, cluster_id) < val_fraction (any batch of rows)."""
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


def _split_batches(split, columns: list[str]):
    """Columns of a split table, or of a split file read a batch at a time."""
    if isinstance(split, pa.Table):
        return split.select(columns).to_batches(KEY_BATCH_ROWS)
    return tables.iter_batches(split, columns, KEY_BATCH_ROWS)


def _sides_of(b) -> tuple[np.ndarray, np.ndarray]:
    """(val, train) masks of a batch's rows (a null split is on neither side)."""
    is_val = pc.equal(b.column("split"), "val")
    return (is_val.fill_null(False).to_numpy(zero_copy_only=False),
            pc.invert(is_val).fill_null(False).to_numpy(zero_copy_only=False))


def measure_disjointness(split) -> Disjointness:
    """Count doc ids, clusters and exact keys that appear on both sides of the split (a table or a split
    file, read twice a batch at a time). Held: the val side's doc ids, clusters and exact keys (`IdSet`s,
    their bytes + 1 each per val document) and each val document's cluster and exact key positions in
    them (16 B), nothing per train document."""
    cols = ["doc_id", "cluster_id", "exact_key"]
    val: dict[str, list] = {c: [] for c in cols}
    for b in _split_batches(split, cols + ["split"]):
        v = pa.array(_sides_of(b)[0])
        for c in cols:
            val[c].append(b.column(c).cast(pa.string()).filter(v))
    sets, at = {}, {}
    for c in cols:
        ids = pa.chunked_array(val.pop(c), pa.string())
        sets[c] = IdSet(ids)
        if c != "doc_id":  # where each val document's cluster / exact key sits (-1: null)
            at[c] = sets[c].index(ids)
        del ids
    shared = {c: np.zeros(len(sets[c]), bool) for c in cols}
    for b in _split_batches(split, cols + ["split"]):
        train = pa.array(_sides_of(b)[1])
        for c in cols:
            pos = sets[c].index(b.column(c).cast(pa.string()).filter(train))
            shared[c][pos[pos >= 0]] = True
    hit = np.zeros(len(at["cluster_id"]), bool)
    for c in ("cluster_id", "exact_key"):
        hit |= (at[c] >= 0) & shared[c][np.maximum(at[c], 0)] if len(shared[c]) else False
    return Disjointness(*(int(shared[c].sum()) for c in cols), int(hit.sum()), len(hit))


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


def measure_val_share(split, target: float, tolerance: float) -> ValShare:
    """The realised val share of a split table, or of a split file read a row group at a time."""
    if not isinstance(split, pa.Table):
        summary = SplitSummary()
        for b in tables.iter_batches(split, ["source", "split", "n_bytes"], KEY_BATCH_ROWS):
            summary.add(pa.Table.from_batches([b]))
        return summary.share(target, tolerance)
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


@dataclass
class SplitSummary:
    """What build_validation_split wrote, counted while it streamed (no per-document values)."""

    docs: int = 0
    val_docs: int = 0
    bytes: int = 0
    val_bytes: int = 0
    per_source: Optional[dict] = None  # {source: {train_docs, val_docs}}, sorted

    def add(self, part: pa.Table) -> None:
        is_val = pc.equal(part.column("split"), "val").to_numpy(zero_copy_only=False)
        nb = np.asarray(part.column("n_bytes").fill_null(0), np.int64)
        self.docs, self.val_docs = self.docs + part.num_rows, self.val_docs + int(is_val.sum())
        self.bytes, self.val_bytes = self.bytes + int(nb.sum()), self.val_bytes + int(nb[is_val].sum())
        per = self.per_source if self.per_source is not None else {}
        for s, c in per_source_counts(part).items():
            d = per.setdefault(s, {"train_docs": 0, "val_docs": 0})
            d["train_docs"], d["val_docs"] = d["train_docs"] + c["train_docs"], d["val_docs"] + c["val_docs"]
        self.per_source = dict(sorted(per.items()))

    def share(self, target: float, tolerance: float) -> "ValShare":
        return ValShare(self.docs, self.val_docs, self.bytes, self.val_bytes, target, tolerance)


# Rows per row group of the split file. The step holds one group twice (built, then in the writer's
# buffers); at 64 Ki rows (tables.ROW_GROUP_ROWS) a 100 MB mix's ~31 k kept documents filled less than
# one group and a 400 MB mix's groups were full, so the peak grew 1.10x from 100 to 400 MB (stop 22).
# 8 Ki rows (~1.3 MB of columns) is full at any size worth measuring and matches the readers' batches.
SPLIT_GROUP_ROWS = KEY_BATCH_ROWS


# -- independent near-duplicate scan across the split ---------------------------------------------
CHECK_ROWS = 4  # rows per band of the check's LSH: 32 bands x 4 rows over 128 permutations


def check_bands(num_perm: int, rows: int = CHECK_ROWS) -> tuple[int, int]:
    """(bands, rows) of the check's banding: every permutation used, `rows` per band."""
    return num_perm // rows, rows


def miss_probability(threshold: float, bands: int, rows: int) -> float:
    """P(a pair at exactly Jaccard `threshold` shares no band) = (1 - t^rows)^bands."""
    return (1.0 - threshold**rows) ** bands


@dataclass(frozen=True)
class NearDupScan:
    """Exact word-shingle Jaccard of every (val, train) pair that shares an LSH band of the check's banding."""

    val_docs: int
    train_docs: int
    val_docs_with_train_near_dup: int  # Jaccard >= threshold with at least one train document
    max_jaccard: float  # over the compared pairs: the true maximum whenever that reaches the threshold
    threshold: float
    pairs_compared: int  # candidate (train, val) pairs, each verified by exact shingle Jaccard
    bands: int = 0
    rows: int = 0

    @property
    def rate(self) -> float:
        return self.val_docs_with_train_near_dup / self.val_docs if self.val_docs else 0.0

    @property
    def miss_probability(self) -> float:
        return miss_probability(self.threshold, self.bands, self.rows) if self.bands else 1.0


def _source_batches(split, columns: list[str], source: str):
    """`_split_batches`, skipping a file's row groups whose `source` statistics exclude `source` (the split
    is sorted by source, dedup_keys by doc_id, which usually starts with it: a source reads about its own
    rows, not the whole file)."""
    if isinstance(split, pa.Table):
        yield from _split_batches(split, columns)
        return
    f = tables.parquet_file(split)
    at = f.schema_arrow.get_field_index("source")
    for g in range(f.metadata.num_row_groups):
        st = f.metadata.row_group(g).column(at).statistics if at >= 0 else None
        if st is not None and st.has_min_max and not st.min <= source <= st.max:
            continue
        yield from f.iter_batches(batch_size=KEY_BATCH_ROWS, row_groups=[g], columns=columns, use_threads=False)
        pa.default_memory_pool().release_unused()


def _sides(split, raw_paths: dict[str, str]) -> dict[str, np.ndarray]:
    """{source: int8 per raw row: 1 val, 0 train, -1 not in the split (or a null split)}: per source, its
    split rows' ids (an `IdSet`; an id listed twice takes its first row's side) against the raw ids, a
    batch at a time."""
    names = sorted({x for b in _split_batches(split, ["source"]) for x in pc.unique(b.column(0)).to_pylist()} - {None})
    out = {}
    for s in names:
        ids, is_val = [], []
        for b in _source_batches(split, ["doc_id", "source", "split"], s):
            mine = pc.equal(b.column("source"), s).fill_null(False)
            ids.append(b.column("doc_id").cast(pa.string()).filter(mine))
            v, t = _sides_of(b.filter(mine))
            is_val.append(np.where(v, 1, np.where(t, 0, -1)).astype(np.int8))  # a null split: -1
        doc = pa.chunked_array(ids, pa.string())
        index, is_val = IdSet(doc), np.concatenate(is_val)
        first_pos, first_row = np.unique(index.index(doc), return_index=True)
        side_at = np.zeros(len(index), np.int8)
        side_at[first_pos] = is_val[first_row]
        del doc, ids
        parts = []
        with engine.open_parquet(raw_paths[s]) as f:
            for b in tables.iter_batches(f, ["doc_id"], RAW_BATCH_ROWS):
                pos = index.index(b.column(0).cast(pa.string()))
                parts.append(np.where(pos >= 0, side_at[np.maximum(pos, 0)], -1).astype(np.int8))
        out[s] = np.concatenate(parts) if parts else np.zeros(0, np.int8)
    return out


def sign_raw(raw_path: str, out_path: str, num_perm: int, shingle: int, seed: int, batch_rows: int = 2048) -> None:
    """A signature file (stages/dedup/signatures.py format) of a raw parquet, for sources without stored ones.

    Null text signs as empty (no shingle), as the scan has always treated it.
    """
    schema = sig.schema(num_perm, sig.describe(None, num_perm, shingle, seed))
    with pq.ParquetWriter(out_path, schema) as w, engine.open_parquet(raw_path) as f:
        for batch in f.iter_batches(columns=["doc_id", "text"], batch_size=batch_rows):
            b = mh.sign_texts(batch.column(1).fill_null(""), num_perm, shingle, seed, threads=1)
            w.write_table(sig.table(batch.column(0).cast(pa.string()), b.exact_keys, b.n_shingles,
                                    np.zeros(len(b.n_words), np.int64), b.n_words, b.signatures, schema))


def _band_pairs(keys: np.ndarray, val: np.ndarray, train: np.ndarray, n: int) -> np.ndarray:
    """Codes train * n + val of every (train, val) pair of rows with equal band keys."""
    order = np.argsort(keys[val], kind="stable")
    vk = keys[val][order]
    # Val is ~2 % of the rows: a bitmap of the val keys' low bits passes a train key only when it may be
    # a val key (equal keys have equal low bits), so the binary searches run on the few that pass.
    bits = min(24, max(16, int(len(vk)).bit_length() + 6))  # <= 1/64 of train keys pass, <= 16 MB
    seen = np.zeros(1 << bits, np.bool_)
    mask = np.uint64((1 << bits) - 1)
    seen[(vk & mask).astype(np.intp)] = True
    tk = keys[train]
    maybe = np.flatnonzero(seen[(tk & mask).astype(np.intp)])
    lo = np.searchsorted(vk, tk[maybe], "left")
    cnt = np.searchsorted(vk, tk[maybe], "right") - lo
    m = cnt > 0
    if not m.any():
        return np.zeros(0, np.int64)
    t = np.repeat(train[maybe[m]], cnt[m])
    v = val[order[lsh.ranges(lo[m], cnt[m])]]
    return t * n + v


BANDS_PER_TASK = 4  # bands of the check's LSH per map task (a task holds one band's columns at a time)


def band_codes(bands: tuple[int, int], files: tuple, num_perm: int, rows: int, side: np.ndarray) -> np.ndarray:
    """A map task of the check: sorted codes train * n + val of the (train, val) pairs sharing a band in
    range(*bands); `side` per row of the concatenated signature files: 1 val, 0 train, -1 neither."""
    stored, n = sig.Stored(list(files), num_perm), len(side)
    val, train = np.flatnonzero(side == 1), np.flatnonzero(side == 0)
    codes = np.zeros(0, np.int64)
    with stored.held():
        for band in range(*bands):
            keys = lsh.band_keys(stored.columns(band * rows, (band + 1) * rows), 1, rows)[0]
            codes = np.union1d(codes, _band_pairs(keys, val, train, n))
    tables.release_unused()  # the column reads' freed pages, kept per thread, else grow with the corpus
    return codes


def cross_split_near_dups(split, raw_paths: dict[str, str], threshold: float,
                          shingle_words: int = 5, batch_rows: int = 2048, signatures: Optional[dict] = None,
                          num_perm: int = 128, seed: int = 1, rows: int = CHECK_ROWS,
                          eng: Optional[engine.Engine] = None) -> NearDupScan:
    """Re-measure train/val near-duplicates from the text, independently of dedup's clusters.

    Candidates: an LSH over MinHash signatures with its own banding (`check_bands`: 32 bands x 4 rows
    over all 128 permutations, not dedup's), every (train, val) pair sharing a band; a pair at
    Jaccard = threshold 0.8 is missed with probability (1 - 0.8^4)^32 = 4.8e-8 (`miss_probability`,
    reported). `split`: a split table or file (read a batch at a time). Every candidate is verified by exact 5-word shingle Jaccard from the text of the
    candidate documents only (`raw_paths` values: paths or `engine.FileAt`s, an s3:// object read by
    range GETs of its row groups). `signatures` ({source: signature file}, stages/dedup/signatures.py) are
    dedup_keys' stored map outputs; a source without one is signed here. Linear in the corpus
    (one pass over 4 signature columns per band) plus the candidates; memory ~40 B per document.
    The bands run as map tasks (`band_codes`, BANDS_PER_TASK each) on a Ray `eng` when every signature
    file is stored (not signed into this process's temporary directory), else in a loop here;
    their codes are unioned, so the result does not depend on the engine or the task order.
    """
    # The candidates' verification runs the compiled kernels (numba: ~150 MB resident once loaded). Load
    # them first, so this step's peak does not depend on whether any (train, val) pair shares a band:
    # at 100 MB none did and the step peaked 160 MB lower than at 400 MB (stop 22, run M4).
    mh.shingle_sets(["kernels load here"], shingle_words)
    sides = _sides(split, raw_paths)
    names = sorted(sides)
    b, r = check_bands(num_perm, rows)
    with tempfile.TemporaryDirectory(prefix="disjoint-signatures-") as tmp:
        files = dict(signatures or {})
        for s in names:
            if s not in files:
                files[s] = f"{tmp}/{s}.parquet"
                sign_raw(raw_paths[s], files[s], num_perm, shingle_words, seed, batch_rows)
        stored = sig.Stored([files[s] for s in names], num_perm)
        for s, n_rows in zip(names, stored.rows):
            if n_rows != len(sides[s]):
                raise SplitError(f"{files[s]}: {n_rows} rows for the {len(sides[s])} rows of {raw_paths[s]}")
        side = np.concatenate([sides[s] for s in names]) if names else np.zeros(0, np.int8)
        n_sh = stored.read(["n_shingles"]).column(0).to_numpy() if names else np.zeros(0, np.int64)
        n = len(side)
        eligible = np.where(n_sh > 0, side, -1).astype(np.int8)
        chunks = [(k, min(k + BANDS_PER_TASK, b)) for k in range(0, b, BANDS_PER_TASK)] \
            if (eligible == 1).any() and (eligible == 0).any() else []
        task = functools.partial(band_codes, files=tuple(files[s] for s in names), num_perm=num_perm, rows=r,
                                 side=eligible)
        # Local threads run the bands here, one at a time: each band is a memory-bound pass over every
        # document, so two at once saved ~0.15 s of 1.4 at 400 MB and made the step's peak grow 18 % from
        # 100 to 400 MB (two O(documents) working sets); on Ray each task is its own worker's memory.
        here = eng is None or eng.kind != "ray" or any(s not in (signatures or {}) for s in names)
        codes = functools.reduce(np.union1d, engine.map_chunks(task, chunks, engine.Engine(num_cpus=1) if here
                                                               else eng), np.zeros(0, np.int64))
        n_val, n_train = int((side == 1).sum()), int((side == 0).sum())
        t_idx, v_idx = codes // max(n, 1), codes % max(n, 1)
        max_j, hits = 0.0, 0
        if len(codes):
            first_row = dict(zip(names, np.r_[0, np.cumsum(stored.rows)[:-1]].tolist()))
            need = np.unique(np.concatenate([t_idx, v_idx]))
            reader = sig.shingle_reader({s: raw_paths[s] for s in names}, first_row, shingle_words, tmp, batch_rows)
            sets = reader(need)
            jac = sets.jaccard(np.searchsorted(need, t_idx), np.searchsorted(need, v_idx))
            max_j, hits = float(jac.max()), len(np.unique(v_idx[jac >= threshold]))
    return NearDupScan(n_val, n_train, hits, max_j, threshold, len(codes), b, r)
