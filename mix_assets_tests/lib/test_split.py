import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.lib import layout
from mix_assets.lib.split import (
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
    from mix_assets.lib.split import cross_split_near_dups

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
