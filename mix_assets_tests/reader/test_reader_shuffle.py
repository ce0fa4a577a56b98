"""Shuffle schemes: the global permutation and the shard_window scheme (a batch touches a bounded number of
shards), each a pure function of (fingerprint, seed, window) recorded in the state; resume under another
scheme or window raises."""

from __future__ import annotations

from pathlib import Path

import pytest

from mix_assets.reader import ResumeMismatchError, open_mix
from mix_assets.reader.mix import STATE_FORMAT_1
from mix_assets.reader.shuffle import perm_sha, shard_window_permutation
from mix_assets_tests.support.fakeremotes import FakeS3Client
from mix_assets_tests.support.mixfactory import all_tokens, write_test_mix
from mix_assets_tests.reader.test_reader import _splitmix64_py

SEED = 1234
SIZES = (7,) * 11 + (5,)  # 12 shards, the last one short


@pytest.fixture()
def mix(tmp_path: Path):
    root = tmp_path / "mix"
    return root, write_test_mix(root, train_shards=SIZES, val_shards=(5,), seq_len=16, seed=3)


def _reference(sizes, seed: int, epoch: int, window: int) -> list[int]:
    """The scheme as documented, in plain Python integers."""
    base = _splitmix64_py(_splitmix64_py(_splitmix64_py(seed) ^ epoch) ^ 0x5348415244)
    starts = [sum(sizes[:s]) for s in range(len(sizes))]
    order = sorted(range(len(sizes)), key=lambda s: _splitmix64_py(s ^ base))
    out = []
    for j in range(0, len(order), window):
        ids = [starts[s] + t for s in order[j:j + window] for t in range(sizes[s])]
        wbase = _splitmix64_py(base ^ (j // window + 1))
        out += [ids[t] for t in sorted(range(len(ids)), key=lambda t: _splitmix64_py(t ^ wbase))]
    return out


def test_shard_window_permutation_matches_a_pure_python_reference():
    for sizes, seed, epoch, window in ((SIZES, SEED, 0, 3), (SIZES, SEED, 2, 5), ((4, 1, 9), 2**63 + 5, 1, 1),
                                       (SIZES, 0, 0, 100)):
        p = shard_window_permutation(list(sizes), seed, epoch, window)
        assert p.tolist() == _reference(sizes, seed, epoch, window)
        assert sorted(p.tolist()) == list(range(sum(sizes)))


def _shards_per_batch(r, batch: int) -> list[int]:
    return [len(r.shards_of(range(s, s + batch))) for s in range(0, len(r) - batch + 1, batch)]


@pytest.mark.parametrize("window", [1, 2, 3])
def test_a_batch_touches_at_most_two_windows_of_shards(mix, tmp_path, window):
    root, m = mix
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED, shuffle_window=window, epochs=2)
    g = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    truth = all_tokens(root, m)
    assert (r.samples(0, len(r)) == truth[[r.storage_index(k) for k in range(len(r))]]).all()
    for e in (0, 1):  # each pass is a permutation of the split, another one per epoch
        assert sorted(r.storage_index(e * len(r) + k) for k in range(len(r))) == list(range(len(r)))
    assert [r.storage_index(k) for k in range(len(r))] != [r.storage_index(len(r) + k) for k in range(len(r))]
    batch = 6  # <= the samples of one window
    assert max(_shards_per_batch(r, batch)) <= 2 * window
    assert sum(_shards_per_batch(r, batch)) < sum(_shards_per_batch(g, batch))  # the global order spreads wider
    # the first window holds at least 7 * window - 2 samples (one shard may be the short one), from `window` shards
    assert len(r.shards_of(range(0, 7 * window - 2))) == window


def test_the_state_records_the_scheme_and_a_resume_under_another_raises(mix, tmp_path):
    root, _ = mix
    c = tmp_path / "c"
    r = open_mix(root, cache_dir=c, shuffle_seed=SEED, shuffle_window=3)
    r.batch(0, 5)
    st = r.state_dict()
    assert (st["shuffle_scheme"], st["shuffle_window"]) == ("shard_window", 3)
    assert st["shuffle_perm_sha"] == perm_sha(shard_window_permutation(list(SIZES), SEED, 0, 3))
    again = open_mix(root, cache_dir=c, shuffle_seed=SEED, shuffle_window=3)
    again.load_state_dict(st)
    assert (again.batch(1, 5) == r.batch(1, 5)).all()
    with pytest.raises(ResumeMismatchError, match="shuffle_window: checkpoint 3, this reader 4"):
        open_mix(root, cache_dir=c, shuffle_seed=SEED, shuffle_window=4).load_state_dict(st)
    with pytest.raises(ResumeMismatchError, match="shuffle_scheme: checkpoint 'shard_window', this reader 'global'"):
        open_mix(root, cache_dir=c, shuffle_seed=SEED).load_state_dict(st)
    # Forged: same scheme fields, other permutation hash.
    with pytest.raises(ResumeMismatchError, match="shuffle_perm_sha"):
        open_mix(root, cache_dir=c, shuffle_seed=SEED, shuffle_window=3).load_state_dict(
            {**st, "shuffle_perm_sha": "0" * 64})
    with pytest.raises(ResumeMismatchError, match="'shuffle_window': expected an int >= 1"):
        again.load_state_dict({**st, "shuffle_window": 0})
    with pytest.raises(ValueError, match="storage order"):
        open_mix(root, cache_dir=c, split="val", shuffle_window=2)


def test_a_state_of_format_1_reads_as_the_global_scheme(mix, tmp_path):
    root, _ = mix
    g = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    g.batch(0, 4)
    old = {k: v for k, v in g.state_dict().items() if k not in ("shuffle_scheme", "shuffle_window")}
    old["format"] = STATE_FORMAT_1  # what a reader before shuffle schemes saved
    fresh = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    fresh.load_state_dict(old)
    assert fresh.samples_consumed == 4 and (fresh.batch(1, 4) == g.batch(1, 4)).all()
    with pytest.raises(ResumeMismatchError, match="shuffle_scheme"):
        open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED, shuffle_window=2).load_state_dict(old)


def test_shard_window_fetches_fewer_shards_per_batch_from_a_remote(mix, tmp_path):
    root, m = mix
    shard_bytes = 7 * 16 * 2
    fetched = {}
    for name, window in (("global", None), ("shard_window", 2)):
        s3 = FakeS3Client("bucket", root.parent, prefix="mix")
        r = open_mix("s3://bucket/mix", cache_dir=tmp_path / name, shuffle_seed=SEED, shuffle_window=window,
                     cache_bytes=4 * shard_bytes, s3_client=s3)
        for step in range(len(r) // 6):
            r.batch(step, 6)
        fetched[name] = sum(n for k, n in s3.gets.items() if k.endswith(".bin"))
    # one pass with a 4-shard cache: the windows fetch each shard about once, the global order many times
    assert fetched["shard_window"] <= len(SIZES) + 2 < fetched["global"]
