import numpy as np
import pytest

from mix_assets.format.shards import ShardRecord
from mix_assets.stages.tokens.packing import (
    Packer,
    ShortfallError,
    fill_budget,
    order_from_keys,
    stream_order,
)
from mix_assets_tests.oracles.tokens_reference import ref_fill_budget, ref_stream_order


def _records(apps):
    return list(zip(apps.index.tolist(), apps.epoch.tolist(), apps.take.tolist()))


def test_fill_budget_exact_with_epochs():
    lengths = np.array([10, 20, 30, 40])
    n_unique, apps = fill_budget("s", lengths, unique_budget=25, stream_budget=62)
    assert n_unique == 2  # 10 + 20 >= 25
    assert int(apps.take.sum()) == 62
    assert [(i, e) for i, e, _ in _records(apps)] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)]
    assert apps.take[-1] == 2  # the last appearance is truncated to hit the budget exactly


def test_fill_budget_fractional_epoch():
    n_unique, apps = fill_budget("s", np.array([5] * 10), unique_budget=50, stream_budget=75)
    assert n_unique == 10 and int(apps.take.sum()) == 75
    assert set(apps.epoch.tolist()) == {0, 1} and int((apps.epoch == 1).sum()) == 5
    assert apps.index.dtype == apps.epoch.dtype == apps.take.dtype == np.int64


def test_fill_budget_matches_the_per_document_reference():
    """The columnar fill equals the old per-appearance loop: empty documents, exact and fractional
    epochs, a budget ending exactly on a document or an epoch boundary, less than one epoch."""
    rng = np.random.default_rng(3)
    cases = [([10, 20, 30, 40], 25, 62), ([0, 10, 0, 20, 30], 25, 60), ([0, 10, 0, 20, 30], 25, 30),
             ([7], 7, 7), ([7], 7, 70), ([3, 4], 5, 3), ([5, 5], 0, 0), ([1, 0, 0], 1, 5)]
    for _ in range(300):
        lengths = rng.integers(0, 50, rng.integers(1, 40))
        lengths[rng.random(len(lengths)) < 0.3] = 0
        total = int(lengths.sum())
        if total == 0:
            continue
        unique = int(rng.integers(1, total + 1))
        cases.append((lengths.tolist(), unique, int(unique * rng.choice([0.5, 1.0, 1.37, 2.0, 3.71]))))
    for lengths, unique, stream in cases:
        n_ref, ref = ref_fill_budget(lengths, unique, stream)
        n_new, apps = fill_budget("s", np.array(lengths), unique, stream)
        assert (n_new, _records(apps)) == (n_ref, ref), (lengths, unique, stream)


def test_stream_order_matches_the_reference_including_hash_ties():
    rng = np.random.default_rng(5)
    ids = [f"d-{int(i)}" for i in rng.permutation(300)] * 2  # every doc twice (two epochs)
    ep = np.array([0] * 300 + [1] * 300)
    assert (stream_order(9, ids, ep) == ref_stream_order(9, ids, ep)).all()
    # colliding keys fall back to (doc_id, epoch), then position, exactly as before
    for n_keys in (1, 3, 50):
        keys = rng.integers(0, n_keys, len(ids)).astype(np.uint64)
        rank = lambda: ref_rank(ids)  # noqa: E731
        assert (order_from_keys(keys, ep, rank) == ref_stream_order(9, ids, ep, keys=keys)).all()


def ref_rank(ids):
    r = np.empty(len(ids), np.int64)
    r[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
    return r


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


def _packed(sample_len, shard_samples, lens, src, toks, cuts=None):
    """(stats, shards, document index) of feeding the appearances one by one (cuts None) or with feed_many in the
    slices between `cuts`."""
    names, shards, index = ["a", "b", "c"], [], []

    def write(i, t):
        shards.append(t.tolist())
        return ShardRecord(f"train/train-{i:05d}.bin", len(t) // sample_len, t.nbytes, "x")

    def write_index(i, starts):
        index.append(np.asarray(starts).tolist())
        return {"documents": len(starts)}

    p = Packer(sample_len, shard_samples, "uint16", write, write_index)
    at = np.concatenate([[0], np.cumsum(lens)])
    if cuts is None:
        for i, (n, s) in enumerate(zip(lens, src)):
            p.feed(toks[at[i] : at[i] + n], names[s])
    else:
        for a, b in zip(cuts[:-1], cuts[1:]):
            p.feed_many(toks[at[a] : at[b]], lens[a:b], src[a:b], names)
    st = p.finish()
    return st.to_json(), st.sources, shards, index


def test_feed_many_packs_as_feeding_one_by_one():
    """Shards, seams, tail, per-source tokens and document index: the same whatever the slices given to
    feed_many (empty appearances, documents spanning shards, starts on sample and shard edges)."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        L, ss = int(rng.integers(1, 9)), int(rng.integers(1, 5))
        n = int(rng.integers(0, 50))
        lens = rng.integers(0, 3 * L * ss + 2, n) * (rng.random(n) > 0.15)
        src = rng.integers(0, 3, n)
        toks = rng.integers(0, 60000, int(lens.sum())).astype(np.uint16)
        one = _packed(L, ss, lens, src, toks)
        cuts = np.unique(np.concatenate([[0, n], rng.integers(0, n + 1, int(rng.integers(0, 5)))]))
        assert _packed(L, ss, lens, src, toks, cuts) == one
        assert _packed(L, ss, lens, src, toks, np.arange(n + 1)) == one


def test_feed_many_refuses_tokens_not_matching_lengths():
    p = Packer(4, 2, "uint16", lambda i, t: ShardRecord("x", len(t) // 4, t.nbytes, "x"))
    with pytest.raises(ValueError, match="3 tokens for lengths summing to 4"):
        p.feed_many(np.zeros(3, np.uint16), np.array([4]), np.array([0]), ["a"])
