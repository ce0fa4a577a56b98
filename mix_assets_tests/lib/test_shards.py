"""lib/shards.py: the checks over shard_stats.json (the shard building is in test_tokens_pipeline.py)."""

from mix_assets.lib.shards import shard_files, shard_problems, tail_and_seam_problems


def _stats(**train) -> dict:
    sp = {"shards": [{"path": "train/train-00000.bin", "samples": 2, "bytes": 2 * 4 * 2, "sha256": "ab"}],
          "tokens": 8, "dropped_tail_tokens": 1, "emitted_tokens": 9, "seam_samples": 1, "samples": 2,
          "seam_rate": 0.5}
    val = {**sp, "shards": [{**sp["shards"][0], "path": "val/val-00000.bin"}]}
    return {"dtype": "uint16", "packing": {"sample_len": 4}, "splits": {"train": {**sp, **train}, "val": val}}


def test_consistent_stats_have_no_problems():
    st = _stats()
    assert shard_problems(st, lambda key: True) == [] and tail_and_seam_problems(st) == []
    assert set(shard_files(st)) == {"mix/train/train-00000.bin", "mix/val/val-00000.bin"}


def test_each_problem_is_named():
    missing = shard_problems(_stats(), lambda key: "val" in key)
    assert missing == ["train/train-00000.bin: missing"]
    empty = shard_problems(_stats(shards=[]), lambda key: True)
    assert empty == ["train: no shard (0 samples)"]
    bad = tail_and_seam_problems(_stats(dropped_tail_tokens=4, emitted_tokens=12, seam_rate=0.9))
    assert [p.split(":")[0] for p in bad] == ["train"] * 2 and "dropped tail 4" in bad[0] and "seam_rate" in bad[1]


def test_a_missing_document_index_is_named_and_indexes_are_recorded_files():
    ix = {"path": "doc_index/train/train-00000.docs.npy", "bytes": 136, "sha256": "cd", "documents": 3}
    st = _stats(shards=[{**_stats()["splits"]["train"]["shards"][0], "doc_index": ix}])
    assert shard_problems(st, lambda key: True) == []
    assert shard_files(st)["mix/doc_index/train/train-00000.docs.npy"] == "cd"
    assert shard_problems(st, lambda key: "doc_index" not in key) == [
        "doc_index/train/train-00000.docs.npy: document index missing"]
