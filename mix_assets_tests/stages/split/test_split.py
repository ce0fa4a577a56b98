import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.core import layout
from mix_assets.stages.split import ranges as split_ranges
from mix_assets.stages.split.split import (
    SplitError,
    assign_split,
    kept_documents,
    measure_disjointness,
    measure_val_share,
)
from mix_assets_tests.support.tokens_fixtures import raw_paths, write_upstream


def _kept(tmp_path, **kw):
    st = write_upstream(tmp_path, {"a": 300, "b": 200}, **kw)
    return st, kept_documents(raw_paths(st, ["a", "b"]), st.local_path(layout.DEDUP_KEYS),
                              st.local_path(layout.EXCLUSION_MASKS))


def test_kept_documents_drop_masked_rows(tmp_path):
    _, kept = _kept(tmp_path, near_dups=5, masked=3)
    assert kept.num_rows == 500 - 2 * 3  # 5 near-dups per source masked + 3 contaminated per source
    ids = set(kept.column("doc_id").to_pylist())
    assert "a-000300" not in ids and "a-000000" in ids


def test_assignment_is_by_cluster_and_seeded(tmp_path):
    _, kept = _kept(tmp_path)
    s1 = assign_split(kept, seed=3, val_fraction=0.1)
    s2 = assign_split(kept.slice(0, 250), seed=3, val_fraction=0.1)
    # a document's side does not depend on which other documents exist
    side = dict(zip(s1.column("doc_id").to_pylist(), s1.column("split").to_pylist()))
    assert all(side[d] == sp for d, sp in zip(s2.column("doc_id").to_pylist(), s2.column("split").to_pylist()))
    s3 = assign_split(kept, seed=4, val_fraction=0.1)
    assert s3.column("split").to_pylist() != s1.column("split").to_pylist()


def test_cluster_never_straddles(tmp_path):
    # two kept documents in one cluster (dedup kept both, e.g. a cluster below the threshold)
    _, kept = _kept(tmp_path)
    cl = kept.column("cluster_id").to_pylist()
    cl[1] = cl[0]
    kept = kept.set_column(kept.column_names.index("cluster_id"), "cluster_id", pa.array(cl))
    for seed in range(40):
        sp = assign_split(kept, seed=seed, val_fraction=0.3).column("split").to_pylist()
        assert sp[0] == sp[1]
    d = measure_disjointness(assign_split(kept, seed=0, val_fraction=0.3))
    assert d.ok and d.cross_split_near_dup_rate == 0.0


def test_disjointness_detects_shared_cluster_and_exact_key(tmp_path):
    _, kept = _kept(tmp_path)
    sp = assign_split(kept, seed=0, val_fraction=0.2)
    splits = sp.column("split").to_pylist()
    v = splits.index("val")
    t = splits.index("train")
    cl = sp.column("cluster_id").to_pylist()
    cl[v] = cl[t]
    bad = sp.set_column(sp.column_names.index("cluster_id"), "cluster_id", pa.array(cl))
    d = measure_disjointness(bad)
    assert not d.ok and d.shared_clusters == 1 and d.val_docs_with_train_dup == 1
    assert d.cross_split_near_dup_rate == pytest.approx(1 / d.val_docs)
    ek = sp.column("exact_key").to_pylist()
    ek[v] = ek[t]
    bad = sp.set_column(sp.column_names.index("exact_key"), "exact_key", pa.array(ek))
    assert measure_disjointness(bad).shared_exact_keys == 1


def test_val_share_tolerance(tmp_path):
    _, kept = _kept(tmp_path)
    sp = assign_split(kept, seed=0, val_fraction=0.1)
    share = measure_val_share(sp, 0.1, 0.5)
    assert share.ok and 0.05 <= share.share <= 0.15
    assert not measure_val_share(sp, 0.4, 0.1).ok


def test_missing_dedup_row_names_file_and_doc(tmp_path):
    st = write_upstream(tmp_path, {"a": 20})
    keys = pq.read_table(st.local_path(layout.DEDUP_KEYS)).slice(1)
    pq.write_table(keys, st.local_path(layout.DEDUP_KEYS))
    with pytest.raises(SplitError, match=r"dedup_keys.parquet: no row for kept document 'a-000000'"):
        kept_documents(raw_paths(st, ["a"]), st.local_path(layout.DEDUP_KEYS),
                       st.local_path(layout.EXCLUSION_MASKS))


def test_wrong_source_names_row(tmp_path):
    st = write_upstream(tmp_path, {"a": 20})
    t = pq.read_table(st.local_path(layout.RAW_DOCS.format(source="a")))
    src = t.column("source").to_pylist()
    src[7] = "zzz"
    pq.write_table(t.set_column(t.column_names.index("source"), "source", pa.array(src)),
                   st.local_path(layout.RAW_DOCS.format(source="a")))
    with pytest.raises(SplitError, match=r"documents.parquet: row 7: field source is 'zzz'"):
        kept_documents(raw_paths(st, ["a"]), st.local_path(layout.DEDUP_KEYS),
                       st.local_path(layout.EXCLUSION_MASKS))


def test_near_dup_scan_finds_an_edited_copy_across_the_split(tmp_path):
    from mix_assets.stages.split.split import cross_split_near_dups

    st, kept = _kept(tmp_path)
    sp = assign_split(kept, seed=0, val_fraction=0.1)
    raws = raw_paths(st, ["a", "b"])
    clean = cross_split_near_dups(sp, raws, threshold=0.8)
    assert clean.val_docs == sp.column("split").to_pylist().count("val") and clean.train_docs > 0
    assert clean.val_docs_with_train_near_dup == 0 and clean.max_jaccard < 0.8

    # put a lightly edited copy of a val document into train (its own cluster, as if dedup missed it)
    splits, ids = sp.column("split").to_pylist(), sp.column("doc_id").to_pylist()
    v_id, t_id = ids[splits.index("val")], ids[splits.index("train")]
    for path in raws.values():
        t = pq.read_table(path)
        texts, tids = t.column("text").to_pylist(), t.column("doc_id").to_pylist()
        if v_id in tids:
            v_text = texts[tids.index(v_id)]
    for path in raws.values():
        t = pq.read_table(path)
        tids = t.column("doc_id").to_pylist()
        if t_id in tids:
            texts = t.column("text").to_pylist()
            words = v_text.split()
            words[3] = "zebra"
            texts[tids.index(t_id)] = " ".join(words)
            pq.write_table(t.set_column(t.column_names.index("text"), "text", pa.array(texts)), path)
    dirty = cross_split_near_dups(sp, raws, threshold=0.8)
    assert dirty.val_docs_with_train_near_dup == 1 and dirty.max_jaccard >= 0.8
    assert dirty.rate == pytest.approx(1 / dirty.val_docs)


def _brute_force_scan(split: pa.Table, raws: dict, threshold: float) -> tuple:
    """All val x train pairs, Python sets of the same shingle hashes: (hits, max J, pairs sharing one)."""
    from mix_assets.stages.dedup.minhash import shingle_sets

    side = dict(zip(split.column("doc_id").to_pylist(), split.column("split").to_pylist()))
    val, train = [], []
    for path in raws.values():
        t = pq.read_table(path, columns=["doc_id", "text"])
        texts = [x or "" for x in t.column("text").to_pylist()]
        g, off = shingle_sets(texts, 5)
        for d, a, b in zip(t.column("doc_id").to_pylist(), off[:-1], off[1:]):
            {"val": val, "train": train, None: []}[side.get(d)].append(set(g[a:b].tolist()))
    hits, max_j, pairs = 0, 0.0, 0
    for v in val:
        best = 0.0
        for t in train:
            inter = len(v & t)
            if inter:
                pairs += 1
                best = max(best, inter / (len(v) + len(t) - inter))
        hits += best >= threshold
        max_j = max(max_j, best)
    return len(val), len(train), hits, max_j, pairs


def test_near_dup_scan_equals_brute_force_on_planted_copies(tmp_path):
    """The LSH-candidate scan finds exactly the val docs that comparing every val doc with every train doc finds."""
    import numpy as np

    from mix_assets_tests.support import gen_corpus as gc
    from mix_assets.stages.split.split import cross_split_near_dups
    from mix_assets_tests.support.shared_data import FIXTURE

    model = gc.MarkovModel.from_files(sorted((FIXTURE / "sources").glob("*/*.txt")), order=1)
    above = gc.generate(model, 240, seed=3, near_dup_fraction=0.25, jaccard_range=(0.80, 0.86))
    below = gc.generate(model, 60, seed=4, near_dup_fraction=1.0, jaccard_range=(0.72, 0.7999))
    texts = above.texts + below.texts + ["one two", "", None, "one two", above.texts[0]]
    pairs = np.concatenate([above.pairs, below.pairs + len(above.texts)])
    rng = np.random.default_rng(0)
    is_val = rng.random(len(texts)) < 0.1
    is_val[pairs[::2, 0]], is_val[pairs[::2, 1]] = True, False  # half the planted pairs straddle the split
    is_val[-5], is_val[-2], is_val[-1] = True, False, False  # short doc in val; copies in train
    ids = [f"d{i:04d}" for i in range(len(texts))]
    which = rng.integers(0, 2, len(texts))
    raws = {}
    for k, s in enumerate(["a", "b"]):
        idx = np.flatnonzero(which == k)
        raws[s] = str(tmp_path / f"{s}.parquet")
        pq.write_table(pa.table({"doc_id": [ids[i] for i in idx], "source": [s] * len(idx),
                                 "text": pa.array([texts[i] for i in idx], pa.string())}), raws[s])
    in_split = np.arange(len(texts)) != 7  # one raw row excluded (masked): on neither side
    split = pa.table({"doc_id": [ids[i] for i in np.flatnonzero(in_split)],
                      "source": [["a", "b"][which[i]] for i in np.flatnonzero(in_split)],
                      "split": ["val" if is_val[i] else "train" for i in np.flatnonzero(in_split)]})
    n_val, n_train, hits, max_j, n_pairs = _brute_force_scan(split, raws, 0.8)
    straddle_below = is_val[below.pairs[::2, 0] + len(above.texts)].sum()
    # copies above and below the threshold across the split, and exact copies
    assert hits > 20 and straddle_below > 5 and max_j == 1.0 and n_pairs > 10 * hits
    for batch_rows in (2048, 37):
        got = cross_split_near_dups(split, raws, threshold=0.8, batch_rows=batch_rows)
        assert (got.val_docs, got.train_docs, got.val_docs_with_train_near_dup, got.max_jaccard) == (
            n_val, n_train, hits, max_j)
        # LSH candidates (32 x 4), each verified exactly: far fewer than the pairs sharing a shingle
        assert (got.bands, got.rows) == (32, 4) and hits <= got.pairs_compared < n_pairs / 5


def _kept_documents_reference(raw: dict, keys_path: str, masks_path: str) -> pa.Table:
    """kept_documents as it was written with whole-corpus tables and an Arrow join (the reference)."""
    import pyarrow.compute as pc

    parts = [pq.read_table(p, columns=["doc_id", "source", "n_bytes"]).cast(pa.schema(
        [("doc_id", pa.string()), ("source", pa.string()), ("n_bytes", pa.int64())])) for _, p in sorted(raw.items())]
    docs = pa.concat_tables(parts)
    masks = pq.read_table(masks_path, columns=["doc_id"])
    docs = docs.filter(pc.invert(pc.is_in(docs.column("doc_id"), value_set=masks.column("doc_id"))))
    keys = pq.read_table(keys_path, columns=["doc_id", "cluster_id", "exact_key"])
    return docs.join(keys, "doc_id", join_type="left outer").sort_by([("source", "ascending"), ("doc_id", "ascending")])


@pytest.mark.parametrize("batch", [7, 65536])
def test_streamed_split_file_is_the_bytes_of_the_whole_table_reference(tmp_path, monkeypatch, batch):
    from mix_assets.stages.split import split as split_lib

    st = write_upstream(tmp_path, {"a": 300, "b": 200, "c": 40}, near_dups=6, masked=4)
    monkeypatch.setattr(split_lib, "KEY_BATCH_ROWS", batch)
    monkeypatch.setattr(split_lib, "RAW_BATCH_ROWS", batch)
    summary = split_ranges.build_validation_split(st, ["c", "a", "b"], 5, 0.2)
    ref = assign_split(_kept_documents_reference(raw_paths(st, ["a", "b", "c"]), st.local_path(layout.DEDUP_KEYS),
                                                 st.local_path(layout.EXCLUSION_MASKS)), 5, 0.2)
    pq.write_table(ref, tmp_path / "ref.parquet")
    assert (tmp_path / "ref.parquet").read_bytes() == open(st.local_path(layout.VALIDATION_SPLIT), "rb").read()
    assert summary.share(0.2, 0.5) == measure_val_share(ref, 0.2, 0.5)
    assert measure_val_share(st.local_path(layout.VALIDATION_SPLIT), 0.2, 0.5) == measure_val_share(ref, 0.2, 0.5)
    assert summary.per_source == split_lib.per_source_counts(ref)


def test_repeated_raw_doc_id_and_unsorted_keys_name_the_id_and_row(tmp_path):
    st = write_upstream(tmp_path, {"a": 20})
    path = st.local_path(layout.RAW_DOCS.format(source="a"))
    t = pq.read_table(path)
    pq.write_table(pa.concat_tables([t, t.slice(3, 1)]), path)
    with pytest.raises(SplitError, match=r"raw documents: doc_id 'a-000003' appears more than once"):
        kept_documents(raw_paths(st, ["a"]), st.local_path(layout.DEDUP_KEYS), st.local_path(layout.EXCLUSION_MASKS))
    pq.write_table(t, path)
    keys = pq.read_table(st.local_path(layout.DEDUP_KEYS))
    pq.write_table(pa.concat_tables([keys.slice(0, 5), keys.slice(4)]), st.local_path(layout.DEDUP_KEYS))
    with pytest.raises(SplitError, match=r"dedup_keys.parquet: row 5: field doc_id is null or not above the row"):
        kept_documents(raw_paths(st, ["a"]), st.local_path(layout.DEDUP_KEYS), st.local_path(layout.EXCLUSION_MASKS))


def _disjointness_reference(split: pa.Table):
    import pyarrow.compute as pc

    from mix_assets.stages.split.split import Disjointness

    is_val = pc.equal(split.column("split"), "val")
    train, val = split.filter(pc.invert(is_val)), split.filter(is_val)

    def shared(col):
        return set(val.column(col).to_pylist()) & set(train.column(col).to_pylist()) - {None}

    ids, clusters, keys = shared("doc_id"), shared("cluster_id"), shared("exact_key")
    touching = sum(1 for c, k in zip(val.column("cluster_id").to_pylist(), val.column("exact_key").to_pylist())
                   if c in clusters or k in keys)
    return Disjointness(len(ids), len(clusters), len(keys), touching, val.num_rows)


@pytest.mark.parametrize("seed", [0, 1])
def test_streamed_disjointness_and_sides_equal_the_per_document_reference(tmp_path, monkeypatch, seed):
    import random

    from mix_assets.stages.split import split as split_lib

    rng = random.Random(seed)
    n = 2000
    split = pa.table({
        "doc_id": [f"{'ab'[i % 2]}-{rng.randrange(1900):05d}" for i in range(n)],  # some ids twice
        "source": ["ab"[i % 2] for i in range(n)],
        "cluster_id": [rng.choice([None, f"c{rng.randrange(400)}"]) for _ in range(n)],
        "exact_key": [rng.choice([None, f"k{rng.randrange(600)}"]) for _ in range(n)],
        "n_bytes": [1] * n,
        "split": [rng.choice(["train", "train", "val", None]) for _ in range(n)],
    })
    pq.write_table(split, tmp_path / "split.parquet")
    monkeypatch.setattr(split_lib, "KEY_BATCH_ROWS", 97)
    monkeypatch.setattr(split_lib, "RAW_BATCH_ROWS", 89)
    want = _disjointness_reference(split)
    assert want.shared_clusters and want.val_docs_with_train_dup  # the case is not trivial
    assert measure_disjointness(split) == want == measure_disjointness(str(tmp_path / "split.parquet"))
    raws = {}
    for s in "ab":
        raws[s] = str(tmp_path / f"{s}.parquet")
        pq.write_table(pa.table({"doc_id": [f"{s}-{i:05d}" for i in rng.sample(range(2100), 2100)]}), raws[s])
    got = split_lib._sides(str(tmp_path / "split.parquet"), raws)
    for s in "ab":
        part = split.filter(pa.compute.equal(split.column("source"), s)).to_pydict()
        first = {}
        for d, sp in zip(part["doc_id"], part["split"]):
            first.setdefault(d, {"val": 1, "train": 0}.get(sp, -1))
        ids = pq.read_table(raws[s]).column(0).to_pylist()
        assert got[s].tolist() == [first.get(d, -1) for d in ids]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_band_pairs_equal_every_pair_with_equal_keys(seed):
    import numpy as np

    from mix_assets.stages.split.split import _band_pairs

    rng = np.random.default_rng(seed)
    n = 5000
    # few distinct keys (many collisions), keys equal in their low bits but not equal, and full-range keys
    with np.errstate(over="ignore"):
        few = rng.integers(1, 40, n // 2, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    keys = np.concatenate([few, rng.integers(0, 2**63, n - n // 2, dtype=np.uint64)])
    keys[-10:] = keys[:10] + (np.uint64(1) << np.uint64(30))
    side = rng.random(n) < 0.05
    val, train = np.flatnonzero(side), np.flatnonzero(~side)
    want = sorted(t * n + v for t in train.tolist() for v in val.tolist() if keys[t] == keys[v])
    got = _band_pairs(keys, val, train, n)
    assert sorted(got.tolist()) == want and len(want) > 100


def test_split_file_is_written_in_groups_of_split_group_rows(tmp_path, monkeypatch):
    """The step holds one row group of the split file at a time (SPLIT_GROUP_ROWS, full at any real size, so
    its peak does not grow as a 64 Ki-row group fills); the rows are those of the whole-table reference."""
    from mix_assets.stages.split import split as split_lib

    st = write_upstream(tmp_path, {"a": 300, "b": 200, "c": 40}, near_dups=6, masked=4)
    monkeypatch.setattr(split_lib, "SPLIT_GROUP_ROWS", 64)
    split_ranges.build_validation_split(st, ["c", "a", "b"], 5, 0.2)
    f = pq.ParquetFile(st.local_path(layout.VALIDATION_SPLIT))
    sizes = [f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)]
    ref = assign_split(_kept_documents_reference(raw_paths(st, ["a", "b", "c"]), st.local_path(layout.DEDUP_KEYS),
                                                 st.local_path(layout.EXCLUSION_MASKS)), 5, 0.2)
    assert len(sizes) > 2 and set(sizes[:-1]) == {64} and 0 < sizes[-1] <= 64
    assert f.read().equals(ref)


@pytest.mark.parametrize("partitions", [1, 2, 8, 600])
def test_split_in_ranges_is_the_same_bytes_for_any_partition_and_worker_count(tmp_path, partitions, monkeypatch):
    """Issue 29: the split's join as tasks over doc_id ranges of dedup_keys; a cluster never straddles."""
    import pyarrow.compute as pc

    from mix_assets.core import engine
    from mix_assets.stages.split import ranges
    from mix_assets.stages.split import split as split_lib

    monkeypatch.setattr(ranges, "SCATTER_ROWS", 1)  # scatter tasks of engine.chunk_rows raw rows

    st = write_upstream(tmp_path, {"a": 300, "b": 200, "c": 40}, near_dups=6, masked=4)
    keys = pq.read_table(st.local_path(layout.DEDUP_KEYS))
    cl = keys.column("cluster_id").to_pylist()
    for i in range(0, len(cl), 37):  # kept members of one cluster spread over every range (a cluster below the threshold)
        cl[i] = "a-000000"
    pq.write_table(keys.set_column(keys.column_names.index("cluster_id"), "cluster_id", pa.array(cl)),
                   st.local_path(layout.DEDUP_KEYS))
    ref = assign_split(_kept_documents_reference(raw_paths(st, ["a", "b", "c"]), st.local_path(layout.DEDUP_KEYS),
                                                 st.local_path(layout.EXCLUSION_MASKS)), 5, 0.2)
    pq.write_table(ref, tmp_path / "ref.parquet")
    want = (tmp_path / "ref.parquet").read_bytes()
    got_ranges, splitters = ranges.key_ranges(engine.FileAt(st.local_path(layout.DEDUP_KEYS)), partitions)
    assert len(got_ranges) == min(partitions, keys.num_rows) and splitters == sorted(splitters)
    for eng in (engine.Engine(num_cpus=1, chunk_rows=1), engine.Engine(num_cpus=2, chunk_rows=64)):
        summary = split_ranges.build_validation_split(st, ["c", "a", "b"], 5, 0.2, eng, partitions)
        assert open(st.local_path(layout.VALIDATION_SPLIT), "rb").read() == want, (partitions, eng.num_cpus)
        assert summary.share(0.2, 0.5) == measure_val_share(ref, 0.2, 0.5)
        assert summary.per_source == split_lib.per_source_counts(ref)
    assert not [p for p in tmp_path.rglob("scratch/*") if p.is_file() or any(p.iterdir())]  # scratch removed
    got = pq.read_table(st.local_path(layout.VALIDATION_SPLIT))
    spread = got.filter(pc.equal(got.column("cluster_id"), "a-000000"))
    assert spread.num_rows > 10 and len(set(spread.column("split").to_pylist())) == 1  # one side, over every range


def test_split_in_ranges_names_the_same_rows_as_the_stream(tmp_path, monkeypatch):
    from mix_assets.core import engine
    from mix_assets.stages.split import ranges

    monkeypatch.setattr(ranges, "SCATTER_ROWS", 1)  # scatter tasks of 3 raw rows

    st = write_upstream(tmp_path, {"a": 20, "b": 10})
    eng = engine.Engine(num_cpus=2, chunk_rows=3)
    path = st.local_path(layout.RAW_DOCS.format(source="a"))
    t = pq.read_table(path)
    pq.write_table(pa.concat_tables([t, t.slice(3, 1)]), path)
    with pytest.raises(SplitError, match=r"raw documents: doc_id 'a-000003' appears more than once"):
        split_ranges.build_validation_split(st, ["a", "b"], 5, 0.2, eng, 4)
    bad = t.set_column(t.column_names.index("source"), "source", pa.array(["a"] * 7 + ["zzz"] + ["a"] * 12))
    pq.write_table(bad, path)
    with pytest.raises(SplitError, match=r"documents.parquet: row 7: field source is 'zzz'"):
        split_ranges.build_validation_split(st, ["a", "b"], 5, 0.2, eng, 4)
    pq.write_table(t, path)
    keys = pq.read_table(st.local_path(layout.DEDUP_KEYS))
    for cut in (5, 15):  # inside a range, and where one starts (31 rows in 4 ranges: they start at 0, 7, 15, 23)
        pq.write_table(pa.concat_tables([keys.slice(0, cut), keys.slice(cut - 1)]), st.local_path(layout.DEDUP_KEYS))
        with pytest.raises(SplitError, match=rf"dedup_keys.parquet: row {cut}: field doc_id is null or not above"):
            split_ranges.build_validation_split(st, ["a", "b"], 5, 0.2, eng, 4)
    pq.write_table(keys.filter(pa.compute.not_equal(keys.column("doc_id"), "b-000004")), st.local_path(layout.DEDUP_KEYS))
    with pytest.raises(SplitError, match=r"dedup_keys.parquet: no row for kept document 'b-000004' \(source 'b'\)"):
        split_ranges.build_validation_split(st, ["a", "b"], 5, 0.2, eng, 4)


@pytest.mark.parametrize("masks_order", ["sorted", "shuffled"])
def test_split_ranges_are_bounded_by_range_rows_whatever_the_partitions(tmp_path, monkeypatch, masks_order):
    """Issue 29: with dedup.partitions 1 one join task held every document in the step's process (the local
    engine): the ranges now hold at most RANGE_ROWS rows, each task reads only the exclusion_masks row groups
    that may hold its ids, and the bytes are those of the reference for 1 and 8 partitions, 1 and 2 workers."""
    import contextlib
    import random

    from mix_assets.core import engine
    from mix_assets.stages.split import ranges

    st = write_upstream(tmp_path, {"a": 300, "b": 200, "c": 40}, near_dups=6, masked=9)
    masks = pq.read_table(st.local_path(layout.EXCLUSION_MASKS))
    order = sorted(range(masks.num_rows), key=lambda i: masks.column("doc_id")[i].as_py())
    if masks_order == "shuffled":
        random.Random(3).shuffle(order)
    pq.write_table(masks.take(pa.array(order)), st.local_path(layout.EXCLUSION_MASKS), row_group_size=4)
    ref = assign_split(_kept_documents_reference(raw_paths(st, ["a", "b", "c"]), st.local_path(layout.DEDUP_KEYS),
                                                 st.local_path(layout.EXCLUSION_MASKS)), 5, 0.2)
    pq.write_table(ref, tmp_path / "ref.parquet")
    want = (tmp_path / "ref.parquet").read_bytes()
    n_keys = pq.ParquetFile(st.local_path(layout.DEDUP_KEYS)).metadata.num_rows
    monkeypatch.setattr(ranges, "RANGE_ROWS", 50)
    seen, plain, ids = [], ranges.join_task, sorted(masks.column("doc_id").to_pylist())

    def join_task(sc, scattered, masks_at, seed, val_fraction, task):
        ex = ranges.excluded_in(masks_at, task.lo, task.hi)
        inside = [i for i in ids if (task.lo is None or i >= task.lo) and (task.hi is None or i < task.hi)]
        assert ex.contains(pa.array(inside, pa.string())).all() and len(ex) == len(inside)
        seen.append((task.keys.stop - task.keys.start, len(ex)))
        return plain(sc, scattered, masks_at, seed, val_fraction, task)

    monkeypatch.setattr(ranges, "join_task", join_task)
    for partitions in (1, 8):
        for eng in (engine.Engine(num_cpus=1), engine.Engine(num_cpus=2, chunk_rows=64)):
            seen.clear()
            split_ranges.build_validation_split(st, ["c", "a", "b"], 5, 0.2, eng, partitions)
            assert open(st.local_path(layout.VALIDATION_SPLIT), "rb").read() == want, (partitions, eng.num_cpus)
            assert len(seen) == max(partitions, -(-n_keys // 50)) and max(r for r, _ in seen) <= 50
            assert sum(r for r, _ in seen) == n_keys
            assert sum(e for _, e in seen) == masks.num_rows  # each excluded id in its range's set only
    if masks_order == "sorted":  # a range reads only the row groups (of 4 ids) whose statistics overlap it
        read, open_parquet = [], engine.open_parquet

        @contextlib.contextmanager
        def counting(src):
            with open_parquet(src) as f:
                plain_read = f.read_row_group
                f.read_row_group = lambda g, **kw: read.append(g) or plain_read(g, **kw)
                yield f

        monkeypatch.setattr(engine, "open_parquet", counting)
        lo, hi = ids[len(ids) // 3], ids[len(ids) // 3 + 5]
        assert len(ranges.excluded_in(engine.FileAt(st.local_path(layout.EXCLUSION_MASKS)), lo, hi)) == 5
        assert 2 <= len(read) <= 3 < -(-masks.num_rows // 4)
