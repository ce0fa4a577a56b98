"""dedup_keys' per-document reduce as engine tasks over doc_id ranges: the step's process holds no per-document array.

`lsh.dedup` keeps every document's id, exact-key group, keep rank and survivor in one process; here the same
rules run as tasks that pass their rows to each other through scratch parts (`partitioned.Scratch`, under the
storage root, so any worker reads them). A document's node is its canonical index (its rank by doc_id), as in
`lsh.dedup`, so every output is that function's.

1. Ranges: a task per signature-file chunk returns a sample of its doc_ids; the driver picks partitions - 1
   splitters (any splitters give the same bytes: they only balance the ranges). A task per chunk scatters its
   rows (doc_id, exact_key, counts, source, input index, demoted) to the ranges (`scatter_task`); a task per
   range sorts its rows by doc_id and reports its count and repeated ids (`sort_task`). Range q's canonical
   indices start at the sum of the counts before it (P integers in the driver).
2. Exact groups: the ranges' (exact_key, node, input index) rows go to key-hash partitions; a task per key
   partition gives each member its group's representative (its smallest node) and writes the exact edges
   (`exact_task`). A range task then marks the representatives with shingles (the LSH documents) and writes
   the keep rule's sort keys by node partition (`prep_task`).
3. Candidate pairs: `partitioned.band_task` per band over the LSH documents (their input indices read from the
   range tasks' parts by each band task), merged per node partition (`merge_task`); the pairs come back to the
   driver for verification (`lsh.Verifier`: O(candidate pairs), as before).
4. Components over exact + verified edges (`partitioned.components`), each label task carrying its nodes' keep
   keys (not demoted, longest, higher priority, smaller doc_id: `lsh._keep_rank`'s order); a task per label
   partition picks each cluster's survivor and every member's reason (`cluster_task`), written by range.
5. Each range task writes its rows of the table (`final_task`, the survivor's doc_id read from the range that
   holds it); the driver copies the parts in range order into the file a row group at a time.

Held in the driver: P splitters and offsets, the candidate pairs and their Jaccards, and the near-duplicate
members (for their Jaccard to the survivor): O(pairs), never O(documents).
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.core import engine
from mix_assets.core.idset import IdSet
from mix_assets.stages.dedup import lsh
from mix_assets.stages.dedup import partitioned as part
from mix_assets.stages.dedup.partitioned import Scratch

SCALARS = ["doc_id", "exact_key", "n_shingles", "n_chars", "n_words"]
SAMPLES = 4  # doc_ids sampled per chunk and partition (the splitters' balance only)
OUT_BATCH = 16384  # rows per record batch of a range's output part (the driver holds one at a time)
# Signature rows per sample / scatter task (4 row groups of the signature files; any size gives the same bytes).
# The step's process pays ~5 ms of CPU per Ray task (submission, result, Ray's own threads; bench/results/
# reduce_memory.md, bench/dedup_driver_profile.py); at 16 Ki rows these two rounds were 2 x 44 of the 498 tasks
# at 1.6 GB (434 now), each task ~10 MB of columns.
CHUNK_ROWS = 64 * 1024


@dataclass(frozen=True)
class Setup:
    """What every task of one reduce shares (picklable for Ray)."""

    sc: Scratch
    names: tuple  # sources, sorted
    files: tuple  # their signature files (`engine.FileAt`)
    first_row: tuple  # input index of each source's first row
    priority: tuple  # per source
    rejected: Optional[IdSet]
    partitions: int


@dataclass(frozen=True)
class Chunk:
    """Rows of one source's signature file; `k` numbers the chunk's scatter part."""

    k: int
    source: int
    rows: engine.RowRange


# -- Arrow parts in the scratch ---------------------------------------------------------------------------
def put_batches(sc: Scratch, name: str, schema: pa.Schema, batches) -> None:
    """An Arrow IPC file of record batches (batch i read back alone by `get_batch`)."""
    with sc.storage().writing(sc.key(name)) as tmp:
        with pa.OSFile(tmp, "wb") as f, pa.ipc.new_file(f, schema) as w:
            for b in batches:
                w.write_batch(b)


def get_batch(sc: Scratch, name: str, i: int) -> pa.RecordBatch:
    with sc.storage().open(sc.key(name)) as f:
        return pa.ipc.open_file(f).get_batch(i)


def iter_batches(sc: Scratch, name: str) -> Iterator[pa.RecordBatch]:
    with sc.storage().open(sc.key(name)) as f:
        r = pa.ipc.open_file(f)
        for i in range(r.num_record_batches):
            yield r.get_batch(i)


def row_groups(batches, rows: int, schema: pa.Schema) -> Iterator[pa.Table]:
    """The batches' rows re-cut into tables of exactly `rows` rows (the last shorter; one empty table when there
    is no row), each one contiguous chunk: the Parquet writer's dictionary fallback depends on the chunks it is
    given, so a chunked group could write other bytes than `write_parquet` of the whole table."""
    buf, n, out = [], 0, False
    for b in batches:
        while b.num_rows:
            k = min(rows - n, b.num_rows)
            buf.append(b.slice(0, k))
            n, b = n + k, b.slice(k)
            if n == rows:
                group = pa.Table.from_batches(buf, schema).combine_chunks()
                buf, n, out = [], 0, True
                yield group
                group = None
    if n or not out:
        yield pa.Table.from_batches(buf, schema).combine_chunks()


def _split(t: pa.Table, part_of: np.ndarray, partitions: int) -> list[pa.RecordBatch]:
    """The rows of `t` as one record batch per partition (rows in their order within each)."""
    order = np.argsort(part_of, kind="stable")
    t = t.take(pa.array(order, pa.int64())).combine_chunks()
    bounds = np.searchsorted(part_of[order], np.arange(partitions + 1))
    out = []
    for q in range(partitions):
        s = t.slice(int(bounds[q]), int(bounds[q + 1] - bounds[q]))
        out.append(pa.RecordBatch.from_arrays([c.combine_chunks() if c.num_chunks else pa.array([], c.type)
                                               for c in s.columns], schema=t.schema))
    return out


def _concat(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches(batches, schema=schema).combine_chunks()


def _ranged(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The range of each canonical index (bounds: each range's first index, then the total)."""
    return np.searchsorted(bounds, values, side="right") - 1


# -- 1. ranges ----------------------------------------------------------------------------------------
def chunks_of(st: Setup, rows: int) -> list[Chunk]:
    out = []
    for s, f in enumerate(st.files):
        for rng in engine.row_ranges(f, rows):
            out.append(Chunk(len(out), s, rng))
    return out


def sample_task(partitions: int, chunk: Chunk) -> list[str]:
    """A few doc_ids of the chunk, evenly spaced in doc_id order (pure)."""
    ids = engine.read_rows(chunk.rows, ["doc_id"]).column(0).combine_chunks().cast(pa.string())
    ids = ids.take(pc.sort_indices(ids))
    k = SAMPLES * partitions
    return ids.take(pa.array(np.unique(np.arange(1, k) * len(ids) // k), pa.int64())).to_pylist() if len(ids) else []


def splitters(samples: list[list[str]], partitions: int) -> tuple:
    """partitions - 1 doc_ids cutting the sampled ids into equal counts (range q: ids in [s[q-1], s[q]))."""
    flat = sorted(x for s in samples for x in s)
    if partitions < 2 or not flat:
        return ()
    return tuple(flat[len(flat) * q // partitions] for q in range(1, partitions))


def range_of(doc: pa.Array, cuts: tuple) -> np.ndarray:
    """The doc_id range (0 .. len(cuts)) of each id: how many splitters are at or below it (UTF-8 byte order is
    code point order, Arrow's sort order)."""
    if not cuts:
        return np.zeros(len(doc), np.int64)
    return np.searchsorted(np.asarray(cuts, dtype=object), doc.to_numpy(zero_copy_only=False), side="right")


SCATTER = pa.schema([("doc_id", pa.string()), ("exact_key", pa.string()), ("n_shingles", pa.int64()),
                     ("n_chars", pa.int64()), ("n_words", pa.int64()), ("src", pa.int16()), ("input", pa.int64()),
                     ("demoted", pa.bool_())])


def scatter_task(st: Setup, cuts: tuple, chunk: Chunk) -> int:
    """The chunk's rows, with source, input index and demoted flag, as one batch per doc_id range (pure)."""
    t = engine.read_rows(chunk.rows, SCALARS)
    doc = t.column("doc_id").combine_chunks().cast(pa.string())
    n = len(doc)
    demoted = st.rejected.contains(doc) if st.rejected is not None else np.zeros(n, bool)
    t = pa.table([doc, t.column("exact_key").cast(pa.string()), *(t.column(c).cast(pa.int64()) for c in SCALARS[2:]),
                  pa.array(np.full(n, chunk.source, np.int16)),
                  pa.array(st.first_row[chunk.source] + chunk.rows.start + np.arange(n, dtype=np.int64)),
                  pa.array(demoted, pa.bool_())], schema=SCATTER)
    put_batches(st.sc, f"scatter-{chunk.k}", SCATTER, _split(t, range_of(doc, cuts), st.partitions))
    return n


KEYS = pa.schema([("exact_key", pa.string()), ("local", pa.int64()), ("input", pa.int64())])


def sort_task(st: Setup, n_chunks: int, q: int) -> tuple[int, list[str], tuple]:
    """Range q's rows from every chunk sorted by doc_id (written as `range-q`, its ids as `ids-q`) and its rows
    (exact_key, local index, input index) by exact-key hash (`keys-q`); returns (rows, repeated ids (at most 5),
    (first id, last id) or ())."""
    t = _concat([get_batch(st.sc, f"scatter-{k}", q) for k in range(n_chunks)], SCATTER)
    t = t.take(pc.sort_indices(t.column("doc_id"))).combine_chunks()
    doc = t.column("doc_id").combine_chunks()
    n = len(doc)
    dups: list[str] = []
    if n > 1:
        same = pc.equal(doc.slice(1), doc.slice(0, n - 1))
        if pc.any(same).as_py():
            dups = sorted(set(doc.slice(1).filter(same).to_pylist()))[:5]
    put_batches(st.sc, f"range-{q}", SCATTER, t.to_batches())
    put_batches(st.sc, f"ids-{q}", pa.schema([("doc_id", pa.string())]), [pa.record_batch([doc], ["doc_id"])])
    keys = t.column("exact_key").combine_chunks()
    h = np.fromiter((zlib.crc32(k.encode()) for k in keys.to_pylist()), np.int64, n)
    kt = pa.table([keys, pa.array(np.arange(n, dtype=np.int64)), t.column("input")], schema=KEYS)
    put_batches(st.sc, f"keys-{q}", KEYS, _split(kt, h % st.partitions, st.partitions))
    return n, dups, (doc[0].as_py(), doc[n - 1].as_py()) if n else ()


def check_order(ranges: list) -> None:
    """The table is the ranges one after another: refuse ranges (`sort_task` results) out of doc_id order."""
    ends = [x for _, _, e in ranges for x in e]
    if any(b <= a for a, b in zip(ends[1::2], ends[2::2])):
        raise RuntimeError("dedup: doc_id ranges out of order (splitters not ascending)")


# -- 2. exact groups -----------------------------------------------------------------------------------
def exact_task(st: Setup, bounds: tuple, k: int) -> tuple[tuple, tuple, int]:
    """Key partition k: every member's (node, representative node, representative's input index), written by
    range (`reps-k`), and the exact edges (representative, member) both ways by node partition (`exact-k`);
    returns both parts and the number of exact groups (pure)."""
    got = []
    for q in range(st.partitions):
        b = get_batch(st.sc, f"keys-{q}", k)
        got.append(pa.table({"exact_key": b.column(0), "node": pc.add(b.column(1), bounds[q]),
                             "input": b.column(2)}))
    t = pa.concat_tables(got).combine_chunks() if got else pa.table({"exact_key": pa.array([], pa.string())})
    n = t.num_rows
    if n:
        t = t.take(pc.sort_indices(t, [("exact_key", "ascending"), ("node", "ascending")]))
        key = t.column("exact_key").combine_chunks()
        node, inp = (np.asarray(t.column(c).combine_chunks(), np.int64) for c in ("node", "input"))
        new = np.r_[True, ~pc.equal(key.slice(1), key.slice(0, n - 1)).fill_null(False).to_numpy(zero_copy_only=False)]
    else:
        node = inp = np.zeros(0, np.int64)
        new = np.zeros(0, bool)
    first = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    rep, rep_in = node[first][group], inp[first][group]
    b = np.asarray(bounds, np.int64)
    reps = (f"reps-{k}", tuple(part._put_rows(st.sc, f"reps-{k}", [node, rep, rep_in], st.partitions,
                                              _ranged(node, b))))
    lo, hi = rep[~new], node[~new]
    edges = (f"exact-{k}", tuple(part._put_pairs(st.sc, f"exact-{k}", np.r_[lo, hi], np.r_[hi, lo], st.partitions)))
    return reps, edges, len(first)


def _segments(sc: Scratch, parts, q: int, width: int) -> tuple[np.ndarray, ...]:
    return part._read_rows(sc, [(name, list(off)) for name, off in parts], q, width)


def prep_task(st: Setup, bounds: tuple, reps: tuple, q: int) -> tuple[str, tuple[str, tuple], int, int]:
    """Range q: its LSH documents (exact representatives with shingles) as (input index, node) (`active-q`) and
    every document's keep keys (node, demoted, -n_chars, -priority, representative's input index) by node
    partition (`ranks-q`); returns both names, the LSH documents and the wordless documents (pure)."""
    t = pa.Table.from_batches(list(iter_batches(st.sc, f"range-{q}")), schema=SCATTER)
    n = t.num_rows
    node = bounds[q] + np.arange(n, dtype=np.int64)
    rn, rep, rep_in = _segments(st.sc, reps, q, 3)
    if len(rn) != n or (rn != node).any():
        raise ValueError(f"dedup: range {q}: {len(rn)} exact-group rows for {n} documents")
    nsh = np.asarray(t.column("n_shingles"), np.int64)
    active = (rep == node) & (nsh > 0)
    inp = np.asarray(t.column("input"), np.int64)
    st.sc.put(f"active-{q}", np.column_stack([inp[active], node[active]]).ravel())
    prio = np.asarray(st.priority, np.int64)[np.asarray(t.column("src"), np.int64)]
    dem = np.asarray(t.column("demoted").to_numpy(zero_copy_only=False), np.int64)
    ranks = (f"ranks-{q}", tuple(part._put_rows(st.sc, f"ranks-{q}", [node, dem, -np.asarray(t.column("n_chars"), np.int64),
                                                                      -prio, rep_in], st.partitions)))
    return f"active-{q}", ranks, int(active.sum()), int((nsh == 0).sum())


# -- 3. candidate pairs --------------------------------------------------------------------------------
def _active(sc: Scratch, names: tuple) -> tuple[np.ndarray, np.ndarray]:
    """(input index, node) of every LSH document, in node order (ranges in order, each sorted)."""
    with_all = [sc.segment(nm, 0, _size(sc, nm)).reshape(-1, 2) for nm in names]
    flat = np.concatenate([np.zeros((0, 2), np.int64), *with_all])
    return flat[:, 0].copy(), flat[:, 1].copy()


def _size(sc: Scratch, name: str) -> int:
    with sc.storage().open(sc.key(name)) as f:
        f.seek(0, 2)
        return f.tell() // 8


def band_nodes(sig, active: tuple, r: int, group_cap: int, sc: Scratch, band: int, slice: int = 0,
               slices: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """`lsh.band_pairs` over the LSH documents (read from the `active` parts), as node pairs (pure)."""
    rows, node = _active(sc, active)
    lo, hi = lsh.band_pairs(sig, rows, r, group_cap, band, slice, slices)
    return node[lo], node[hi]


def merge_task(sc: Scratch, parts: list, active: tuple, q: int) -> tuple[np.ndarray, ...]:
    """Node partition q's candidate pairs, each once: (node lo, node hi, input lo, input hi) (pure)."""
    lo, hi = part.merge_task(sc, parts, q)
    rows, node = _active(sc, active)
    return lo, hi, rows[np.searchsorted(node, lo)], rows[np.searchsorted(node, hi)]


def candidates(st: Setup, sig, active: tuple, b: int, r: int, group_cap: int, eng: engine.Engine
               ) -> tuple[np.ndarray, ...]:
    """Every candidate pair (node lo, node hi, input lo, input hi), sorted by node pair (`lsh.candidate_pairs`)."""
    slices = -(-st.partitions // b)
    tasks = [part.BandTask(k, s, slices) for k in range(b) for s in range(slices)]
    bands = functools.partial(band_nodes, sig, active, r, group_cap, st.sc)
    parts = list(engine.map_chunks(functools.partial(part.band_task, bands, st.partitions, st.sc), tasks, eng))
    got = list(engine.map_chunks(functools.partial(merge_task, st.sc, parts, active), range(st.partitions), eng))
    cols = [np.concatenate([np.zeros(0, np.int64), *(g[i] for g in got)]) for i in range(4)]
    o = np.lexsort((cols[1], cols[0]))
    return tuple(c[o] for c in cols)


# -- 4. clusters and the keep rule ---------------------------------------------------------------------
def cluster_task(st: Setup, labels: list, bounds: tuple, q: int) -> tuple[tuple, tuple, dict]:
    """Label partition q: each cluster's survivor (the member first by (demoted, -n_chars, -priority, node)) and
    every member's (node, survivor, size, reason code), written by range (`clusters-q`); returns that part, the
    near duplicates' (node, representative input, survivor's representative input) and counts (pure)."""
    label, node, dem, nch, pri, rep = part._read_rows(st.sc, labels, q, 6)
    b = np.asarray(bounds, np.int64)
    e = np.zeros(0, np.int64)
    if not len(node):
        name = f"clusters-{q}"
        return (name, tuple(part._put_rows(st.sc, name, [e, e, e, e], st.partitions, e))), (e, e, e), \
            {"members": 0, "multi": 0, "largest": 0}
    o = np.lexsort((node, pri, nch, dem, label))  # label first: groups keep their rows' positions
    label, node, rep = label[o], node[o], rep[o]
    start = np.flatnonzero(np.r_[True, label[1:] != label[:-1]])
    size = np.diff(np.r_[start, len(label)])
    group = np.repeat(np.arange(len(start)), size)
    win, wrep = node[start][group], rep[start][group]
    code = np.where(node == win, lsh.KEEP, np.where(rep == wrep, lsh.EXACT_DUP, lsh.NEAR_DUP))
    name = f"clusters-{q}"
    put = part._put_rows(st.sc, name, [node, win, size[group], code], st.partitions, _ranged(node, b))
    near = code == lsh.NEAR_DUP
    return (name, tuple(put)), (node[near], rep[near], wrep[near]), \
        {"members": len(node), "multi": len(start), "largest": int(size.max())}


# -- 5. the table ----------------------------------------------------------------------------------------
def final_task(st: Setup, bounds: tuple, clusters: list, jac: tuple, schema: pa.Schema, q: int) -> dict:
    """Range q's rows of dedup_keys (`out-q`, OUT_BATCH rows a batch); returns its counts (pure)."""
    t = pa.Table.from_batches(list(iter_batches(st.sc, f"range-{q}")), schema=SCATTER).combine_chunks()
    n, lo = t.num_rows, int(bounds[q])
    kept = lo + np.arange(n, dtype=np.int64)
    size = np.ones(n, np.int64)
    code = np.zeros(n, np.int8)
    node, win, sz, cd = _segments(st.sc, clusters, q, 4)
    kept[node - lo], size[node - lo], code[node - lo] = win, sz, cd
    jaccard = np.ones(n, np.float32)
    jn, bits = _segments(st.sc, [jac], q, 2)
    jaccard[jn - lo] = bits.view(np.float64)
    doc = t.column("doc_id").combine_chunks()
    b = np.asarray(bounds, np.int64)
    where = _ranged(kept, b)
    cluster = pa.array([None] * n, pa.string())
    chunks_, at = [], []
    for r in np.unique(where).tolist():
        sel = np.flatnonzero(where == r)
        ids = doc if r == q else get_batch(st.sc, f"ids-{r}", 0).column(0)
        chunks_.append(ids.take(pa.array(kept[sel] - b[r], pa.int64())))
        at.append(sel)
    if chunks_:
        order = np.argsort(np.concatenate(at), kind="stable")
        cluster = pa.concat_arrays(chunks_).take(pa.array(order, pa.int64()))
    src = np.asarray(t.column("src"), np.int64)
    out = pa.table({"doc_id": doc, "source": pa.array(list(st.names), pa.string()).take(pa.array(src, pa.int64())),
                    "exact_key": t.column("exact_key"), "cluster_id": cluster, "cluster_size": size,
                    "keep": code == lsh.KEEP,
                    "reason": pa.array(list(lsh.REASONS), pa.string()).take(pa.array(code)),
                    "jaccard_to_kept": jaccard, "n_words": t.column("n_words")}, schema=schema)
    put_batches(st.sc, f"out-{q}", schema, out.to_batches(OUT_BATCH))
    counts = np.zeros((len(st.names), 3), np.int64)
    np.add.at(counts, (src, code.astype(np.int64)), 1)
    nsh = np.asarray(t.column("n_shingles"), np.int64)
    sizes, k = np.unique(size[code == lsh.KEEP], return_counts=True)
    return {"rows": n, "counts": counts, "wordless_exact_dup": int(np.count_nonzero(code[nsh == 0] == lsh.EXACT_DUP)),
            "kept_sizes": dict(zip(sizes.tolist(), k.tolist()))}


# -- the clusters_consistent check over the written file ----------------------------------------------------
CHECK_COLUMNS = ["doc_id", "exact_key", "cluster_id", "cluster_size", "keep", "reason"]
_BY_CLUSTER = pa.schema([("doc_id", pa.string()), ("exact_key", pa.string()), ("cluster_id", pa.string()),
                         ("cluster_size", pa.int64()), ("keep", pa.bool_()), ("reason", pa.string())])
_BY_KEY = pa.schema([("exact_key", pa.string()), ("cluster_id", pa.string())])


def _hash_part(values: pa.Array, partitions: int) -> np.ndarray:
    return np.fromiter((zlib.crc32(v.encode()) % partitions for v in values.to_pylist()), np.int64, len(values))


def check_scatter_task(sc: Scratch, partitions: int, k_rng: tuple) -> tuple:
    """Row range k of dedup_keys: its rows by cluster-id hash (`bycluster-k`) and (exact_key, cluster_id) by key
    hash (`bykey-k`); returns (first id, last id, every exact key 64 hex digits), or (None, None, False) when a
    checked column holds a null or the ids do not strictly ascend within the range (pure)."""
    k, rng = k_rng
    t = engine.read_rows(rng, CHECK_COLUMNS).cast(_BY_CLUSTER).combine_chunks()
    n = t.num_rows
    ok = all(t.column(c).null_count == 0 for c in CHECK_COLUMNS if c != "reason")
    doc = t.column("doc_id").combine_chunks()
    if ok and n > 1:
        ok = bool(pc.all(pc.greater(doc.slice(1), doc.slice(0, n - 1))).as_py())
    if not ok:
        return None, None, False
    put_batches(sc, f"bycluster-{k}", _BY_CLUSTER, _split(t, _hash_part(t.column("cluster_id"), partitions),
                                                           partitions))
    kt = t.select(["exact_key", "cluster_id"])
    put_batches(sc, f"bykey-{k}", _BY_KEY, _split(kt, _hash_part(kt.column("exact_key"), partitions), partitions))
    hexed = lsh.hex_mixes(t.column("exact_key").combine_chunks()) is not None
    return (doc[0].as_py(), doc[n - 1].as_py(), hexed) if n else (None, None, True)


def _key_codes(key: pa.Array, hexed: bool) -> pa.Table:
    """What `check_clusters` compares exact keys by: `lsh.key_groups`' mixes when every key of the file is hex
    (`hexed`), else the strings."""
    if hexed:
        h1, h2 = lsh.hex_mixes(key)
        return pa.table({"h1": h1, "h2": h2})
    return pa.table({"k": key})


def check_cluster_task(sc: Scratch, n_ranges: int, hexed: bool, q: int) -> bool:
    """Hash partition q holds whole clusters and whole exact keys: True when each cluster has one kept member,
    the one whose doc_id is the cluster id, every member's cluster_size is the member count, its reason is none
    (kept), exact_dup (the kept member's exact key) or near_dup (another key), and no exact key is in two
    clusters (pure; a False is judged again by `check_clusters`)."""
    t = _concat([get_batch(sc, f"bycluster-{k}", q) for k in range(n_ranges)], _BY_CLUSTER)
    if t.num_rows:
        t = t.take(pc.sort_indices(t, [("cluster_id", "ascending"), ("keep", "descending")])).combine_chunks()
        cl = t.column("cluster_id").combine_chunks()
        n = len(cl)
        new = np.r_[True, ~pc.equal(cl.slice(1), cl.slice(0, n - 1)).to_numpy(zero_copy_only=False)]
        start = np.flatnonzero(new)
        size = np.diff(np.r_[start, n])
        group = np.repeat(np.arange(len(start)), size)
        keep = t.column("keep").to_numpy(zero_copy_only=False)
        first = pa.array(start, pa.int64())
        # kept first in each cluster (keep descending): it must be the cluster's id, and the only kept member
        if not keep[start].all() or np.bincount(group, weights=keep).max() != 1:
            return False
        if not pc.all(pc.equal(t.column("doc_id").take(first), cl.take(first))).as_py():
            return False
        if (np.asarray(t.column("cluster_size"), np.int64) != size[group]).any():
            return False
        codes = _key_codes(t.column("exact_key").combine_chunks(), hexed)
        at = pa.array(start[group], pa.int64())
        same = np.all([pc.equal(c, c.take(at)).to_numpy(zero_copy_only=False) for c in codes.columns], axis=0)
        want = pa.array(np.where(keep, 0, np.where(same, 1, 2)).astype(np.int8))
        want = pa.array(list(lsh.REASONS), pa.string()).take(want)
        if not t.column("reason").combine_chunks().equals(want):
            return False
    kt = _concat([get_batch(sc, f"bykey-{k}", q) for k in range(n_ranges)], _BY_KEY)
    if kt.num_rows:
        codes = _key_codes(kt.column("exact_key").combine_chunks(), hexed)
        d = codes.append_column("cluster_id", kt.column("cluster_id")).group_by(codes.column_names).aggregate(
            [("cluster_id", "count_distinct")])
        if pc.max(d.column("cluster_id_count_distinct")).as_py() != 1:
            return False
    return True


def check_partitions(n_rows: int, partitions: int, rows: int) -> int:
    """Hash partitions of the clusters_consistent check over `n_rows` rows: `partitions` (dedup.partitions), more when
    that would put more than `rows` rows (on average) in one, so a check task's memory is set by `rows`, not by the
    corpus (issue 29: at 1 partition the one task held the whole table sorted). Whole clusters and whole exact keys
    fall in each partition whatever the count, so the answer does not depend on it."""
    return max(partitions, -(-n_rows // rows))


def clusters_consistent(file: engine.FileAt, sc: Scratch, partitions: int, eng: engine.Engine, rows: int) -> bool:
    """True when `check_clusters` would find no problem in the dedup_keys file, judged by tasks: row ranges of
    `rows` rows scattered by cluster-id and exact-key hash, one check per hash partition (`check_partitions`: about
    `rows` rows or fewer in each); the driver holds the ranges' first and last ids. False: some rule may fail (nulls,
    ids out of order or repeated, or a cluster rule); the caller then lists the problems with `check_clusters`."""
    ranges = list(enumerate(engine.row_ranges(file, rows)))
    parts = check_partitions(ranges[-1][1].stop if ranges else 0, partitions, rows)
    got = list(engine.map_chunks(functools.partial(check_scatter_task, sc, parts), ranges, eng))
    if any(r == (None, None, False) for r in got):
        return False
    ends = [x for a, b, _ in got if a is not None for x in (a, b)]
    if any(b <= a for a, b in zip(ends[1::2], ends[2::2])):
        return False
    hexed = all(h for _, _, h in got)
    return all(engine.map_chunks(functools.partial(check_cluster_task, sc, len(ranges), hexed), range(parts), eng))
