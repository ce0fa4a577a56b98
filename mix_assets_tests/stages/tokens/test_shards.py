"""stages/tokens/shards.py: the checks over shard_stats.json (the shard building is in test_tokens_pipeline.py)."""

from mix_assets.stages.tokens.shards import shard_files, shard_problems, tail_and_seam_problems


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


def test_encode_chunk_is_the_tokenizers_ids_back_to_back_with_or_without_separator(tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from mix_assets.core import engine
    from mix_assets.stages.tokens.shards import EncodeChunk, EncodeParams, TokenizerFile, encode_chunk

    texts = ["hello world", "", "héllo 🙂 wörld " * 50, "a b c", "zzz"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, initial_alphabet=alphabet))
    tok.save(str(tmp_path / "tok.json"))
    pq.write_table(pa.table({"doc_id": [f"d{i}" for i in range(5)], "text": texts}), tmp_path / "raw.parquet")
    wanted = np.array([0, 1, 3], np.int64)  # rows 1, 2 and 4 (offsets in the range [1, 5))
    want = [e.ids for e in tok.encode_batch([texts[i] for i in (1, 2, 4)], add_special_tokens=False)]
    for sep, batch_docs in ((None, 1000), (7, 1000), (7, 2), (None, 1)):
        params = EncodeParams(TokenizerFile.of(str(tmp_path / "tok.json")), "uint16", sep, batch_docs)
        got = encode_chunk(EncodeChunk(engine.RowRange(str(tmp_path / "raw.parquet"), 1, 5), wanted), params)
        tail = [] if sep is None else [sep]
        assert got.tokens.dtype == np.dtype("<u2")
        assert got.tokens.tolist() == [t for ids in want for t in ids + tail]
        assert got.lengths.tolist() == [len(ids) + len(tail) for ids in want]
        assert got.encoded_tokens == sum(map(len, want))
        assert got.text_bytes == sum(len(texts[i].encode()) for i in (1, 2, 4))
