"""review_count_problems (manifest_self_consistent's recount of val/train documents) streams dedup_keys; it
must find exactly what the whole-table version found."""

import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from mix_assets.format.checks.review import review_count_problems
from mix_assets.format.mixdir import LocalDir
from mix_assets.core.seeded import unit_hash


def _counts_reference(keys: pa.Table, masks: pa.Table, seed: int, val_fraction: float) -> tuple[dict, dict]:
    kept = keys.filter(pc.invert(pc.is_in(keys.column("doc_id"), value_set=masks.column("doc_id"))))
    val, train = {}, {}
    for source, cl in zip(kept.column("source").to_pylist(), kept.column("cluster_id").to_pylist()):
        side = val if unit_hash(seed, cl) < val_fraction else train
        side[source] = side.get(source, 0) + 1
    return val, train


@pytest.mark.parametrize("seed", [0, 1])
def test_streamed_recount_equals_the_whole_table_reference(tmp_path, seed):
    rng = random.Random(seed)
    n = 3000
    ids = [f"{'abc'[i % 3]}-{i:05d}" for i in range(n)]
    keys = pa.table({"doc_id": ids, "source": [d[0] for d in ids],
                     "cluster_id": [rng.choice(ids[: i + 1]) for i in range(n)]})
    masks = pa.table({"doc_id": rng.sample(ids, 400)})
    (tmp_path / "review").mkdir()
    pq.write_table(keys, tmp_path / "review/dedup_keys.parquet", row_group_size=97)  # many batches
    pq.write_table(masks, tmp_path / "review/exclusion_masks.parquet")
    val, train = _counts_reference(keys, masks, 7, 0.3)
    review = {"dedup_keys": "review/dedup_keys.parquet", "exclusion_masks": "review/exclusion_masks.parquet"}
    cfg = {"seed": 7, "split": {"val_fraction": 0.3}}
    good = {"review": review, "splits": {"val": {"documents": sum(val.values())}},
            "sources": {s: {"unique_documents": train[s], "budget_tokens": 10} for s in "abc"}}
    assert review_count_problems(good, LocalDir(tmp_path), cfg) == []
    bad = {**good, "splits": {"val": {"documents": sum(val.values()) + 1}},
           "sources": {**good["sources"], "b": {"unique_documents": train["b"] + 1}}}
    got = review_count_problems(bad, LocalDir(tmp_path), cfg)
    assert len(got) == 2 and f"holds {sum(val.values())} val documents" in got[0]
    assert f"holds only {train['b']} kept train documents of b" in got[1]
    pq.write_table(keys.set_column(2, "cluster_id", pa.array(keys.column(2).to_pylist()[:-1] + [None])),
                   tmp_path / "review/dedup_keys.parquet", row_group_size=97)
    assert review_count_problems(good, LocalDir(tmp_path), cfg) == [
        "review/dedup_keys.parquet: field cluster_id is null in some rows"]


def test_recount_decodes_one_row_group_at_a_time_on_this_thread(tmp_path, monkeypatch):
    """Memory flat in the corpus (issue 13): no whole-file read of either review file, no threaded decode,
    never more than one row group's columns decoded at a time; the counts are the whole-table ones."""
    ids = [f"{'ab'[i % 2]}-{i:05d}" for i in range(1000)]
    keys = pa.table({"doc_id": ids, "source": [d[0] for d in ids], "cluster_id": ids})
    masks = pa.table({"doc_id": ids[::7], "source": [d[0] for d in ids[::7]]})
    (tmp_path / "review").mkdir()
    pq.write_table(keys, tmp_path / "review/dedup_keys.parquet", row_group_size=101)
    pq.write_table(masks, tmp_path / "review/exclusion_masks.parquet", row_group_size=13)
    val, train = _counts_reference(keys, masks, 3, 0.25)
    decoded, iter_batches = [], pq.ParquetFile.iter_batches

    def one_group_each(self, *args, row_groups=None, use_threads=True, **kw):
        assert row_groups is not None and len(row_groups) == 1 and not use_threads
        decoded.append(row_groups[0])
        return iter_batches(self, *args, row_groups=row_groups, use_threads=use_threads, **kw)

    def refuse(*_, **__):
        raise AssertionError("a whole-file read")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", one_group_each)
    monkeypatch.setattr(pq.ParquetFile, "read", refuse)
    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", refuse)
    m = {"review": {"dedup_keys": "review/dedup_keys.parquet", "exclusion_masks": "review/exclusion_masks.parquet"},
         "splits": {"val": {"documents": sum(val.values())}},
         "sources": {s: {"unique_documents": train[s], "budget_tokens": 10} for s in "ab"}}
    assert review_count_problems(m, LocalDir(tmp_path), {"seed": 3, "split": {"val_fraction": 0.25}}) == []
    assert len(decoded) == 10 + 11  # every group of both files, each once


def test_recount_names_a_missing_doc_id_column_as_before(tmp_path):
    (tmp_path / "review").mkdir()
    pq.write_table(pa.table({"doc_id": ["a"], "source": ["a"], "cluster_id": ["a"]}),
                   tmp_path / "review/dedup_keys.parquet")
    pq.write_table(pa.table({"id": pa.array([], pa.string())}), tmp_path / "review/exclusion_masks.parquet")
    m = {"review": {"dedup_keys": "review/dedup_keys.parquet", "exclusion_masks": "review/exclusion_masks.parquet"}}
    assert review_count_problems(m, LocalDir(tmp_path), {"seed": 3, "split": {"val_fraction": 0.25}}) == [
        "review/exclusion_masks.parquet: cannot read columns ['doc_id'] (KeyError: 'Field \"doc_id\" does not exist "
        "in schema')"]
