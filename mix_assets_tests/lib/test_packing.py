import numpy as np
import pytest

from mix_assets.lib.packing import Packer, ShardRecord, ShortfallError, fill_budget, stream_order


def test_fill_budget_exact_with_epochs():
    lengths = np.array([10, 20, 30, 40])
    n_unique, apps = fill_budget("s", lengths, unique_budget=25, stream_budget=62)
    assert n_unique == 2  # 10 + 20 >= 25
    assert sum(a.take for a in apps) == 62
    assert [(a.index, a.epoch) for a in apps] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)]
    assert apps[-1].take == 2  # the last appearance is truncated to hit the budget exactly


def test_fill_budget_fractional_epoch():
    n_unique, apps = fill_budget("s", np.array([5] * 10), unique_budget=50, stream_budget=75)
    assert n_unique == 10 and sum(a.take for a in apps) == 75
    assert {a.epoch for a in apps} == {0, 1} and sum(a.epoch == 1 for a in apps) == 5


def test_shortfall_names_source():
    with pytest.raises(ShortfallError, match=r"source 'gsm' cannot fill its token budget: it needs 100 "):
        fill_budget("gsm", np.array([30, 30, 30]), unique_budget=100, stream_budget=100)


def test_stream_order_deterministic_and_interleaved():
    ids = [f"a-{i}" for i in range(50)] + [f"b-{i}" for i in range(50)]
    ep = np.zeros(100, np.int64)
    o1, o2 = stream_order(7, ids, ep), stream_order(7, list(ids), ep.copy())
    assert (o1 == o2).all() and sorted(o1.tolist()) == list(range(100))
    first_half = {ids[i][0] for i in o1[:20]}
    assert first_half == {"a", "b"}
    assert not (stream_order(8, ids, ep) == o1).all()


def _collect(sample_len, shard_samples, docs, dtype="uint16"):
    shards = []

    def write(i, toks):
        shards.append(toks.copy())
        return ShardRecord(f"train/train-{i:05d}.bin", len(toks) // sample_len, toks.nbytes, "x")

    p = Packer(sample_len, shard_samples, dtype, write)
    for src, d in docs:
        p.feed(np.asarray(d, dtype), src)
    return p.finish(), shards


def test_packer_contiguous_tail_and_seams():
    docs = [("a", range(0, 7)), ("b", range(100, 110)), ("a", range(200, 203))]  # 20 tokens
    stats, shards = _collect(4, 2, docs)
    flat = np.concatenate(shards)
    assert flat.tolist() == (list(range(7)) + list(range(100, 110)) + list(range(200, 203)))[:20]
    assert stats.samples == 5 and stats.tokens == 20 and stats.dropped_tail_tokens == 0
    assert [len(s) for s in shards] == [8, 8, 4]  # last shard has 1 sample, never an empty one
    # boundaries at 7 (sample 1) and 17 (sample 4): two seam samples out of 5
    assert stats.seam_samples == 2 and stats.seam_rate == pytest.approx(0.4)
    assert stats.sources == {"a": 10, "b": 10}


def test_packer_drops_tail_and_its_seam():
    docs = [("a", range(9)), ("b", range(3))]  # 12 tokens, sample_len 5 -> 2 samples, 2 dropped
    stats, shards = _collect(5, 10, docs)
    assert stats.samples == 2 and stats.dropped_tail_tokens == 2
    assert stats.seam_samples == 1  # boundary at 9 lies in sample 1; nothing counted for the tail
    docs = [("a", range(10)), ("b", range(3))]  # boundary at 10 = sample edge, tail holds b
    stats, _ = _collect(5, 10, docs)
    assert stats.seam_samples == 0 and stats.dropped_tail_tokens == 3


def test_packer_uint32_little_endian():
    stats, shards = _collect(2, 4, [("a", [70000, 1, 2, 3])], dtype="uint32")
    assert shards[0].dtype.str == "<u4" and shards[0].tobytes()[:4] == (70000).to_bytes(4, "little")
