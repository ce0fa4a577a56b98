"""The prefetch thread: fetches the coming steps' shards ahead of the reads, within its byte bound and the
cache's budget, verified on arrival; its failures surface in the reading thread; it stops on close and when
the reader is dropped."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

import pytest

from mix_assets.reader import ShardCorruptError, open_mix
from mix_assets_tests.support.fakeremotes import FakeS3Client
from mix_assets_tests.support.mixfactory import all_tokens, write_test_mix

SEED = 1234
SHARD = 7 * 16 * 2  # bytes of a 7-sample shard of 16 uint16 tokens


class SlowS3(FakeS3Client):
    """A FakeS3Client whose shard GETs take `delay` seconds and record the thread that made them."""

    def __init__(self, *a, delay: float = 0.05, **kw):
        super().__init__(*a, **kw)
        self.delay = delay
        self.threads: list[tuple[str, str]] = []

    def get_object(self, Bucket: str, Key: str):
        if Key.endswith(".bin"):
            self.threads.append((Key.rsplit("/", 1)[-1], threading.current_thread().name))
            time.sleep(self.delay)
        return super().get_object(Bucket, Key)


@pytest.fixture()
def mix(tmp_path: Path):
    root = tmp_path / "mix"
    return root, write_test_mix(root, train_shards=(7,) * 8, val_shards=(5,), seq_len=16, seed=3)


def _open(root: Path, cache: Path, s3, **kw):
    kw = {"shuffle_seed": SEED, "shuffle_window": 1, "cache_bytes": 8 * SHARD, **kw}
    return open_mix("s3://bucket/mix", cache_dir=cache, s3_client=s3, **kw)


def _wait(cond, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mix-reader-prefetch"]


def test_prefetch_fetches_the_next_steps_shards_ahead_within_its_bound(mix, tmp_path):
    root, m = mix
    truth = all_tokens(root, m)
    s3 = SlowS3("bucket", root.parent, prefix="mix")
    r = _open(root, tmp_path / "c", s3, prefetch_bytes=2 * SHARD)
    # window 1: batch s of 7 samples is exactly shard order[s]
    order = [r.shards_of(range(7 * s, 7 * s + 7)) for s in range(8)]
    assert all(len(o) == 1 for o in order)
    order = [o[0] for o in order]
    x = r.batch(0, 7)
    assert (x == truth[[r.storage_index(k) for k in range(7)]]).all()
    _wait(lambda: r.prefetched_bytes == 2 * SHARD)  # the next two steps' shards, no more
    time.sleep(0.2)
    ahead = [f"train-{s:05d}.bin" for s in order[1:3]]
    assert [k for k, t in s3.threads if t == "mix-reader-prefetch"] == ahead
    assert sorted(r.fetched) == sorted(f"train/train-{s:05d}.bin" for s in order[:3])
    for step in range(1, 8):  # each read finds its shard fetched ahead; the thread keeps 2 ahead at most
        time.sleep(0.15)  # the training step: longer than a fetch, so the thread keeps ahead
        assert (r.batch(step, 7) == truth[[r.storage_index(k) for k in range(7 * step, 7 * step + 7)]]).all()
        assert r.prefetched_bytes <= 2 * SHARD
    assert r._prefetcher.peak_ahead_bytes == 2 * SHARD
    assert [t for _, t in s3.threads].count("MainThread") == 1  # only the first step fetched for itself
    assert sorted(k for k, _ in s3.threads) == [f"train-{s:05d}.bin" for s in range(8)]  # each shard once
    r.close()
    assert not _prefetch_threads()


def test_prefetch_stays_within_the_cache_budget_and_evicts_nothing_a_read_holds(mix, tmp_path):
    root, m = mix
    truth = all_tokens(root, m)
    s3 = SlowS3("bucket", root.parent, prefix="mix", delay=0.01)
    r = _open(root, tmp_path / "c", s3, prefetch_bytes=6 * SHARD, cache_bytes=3 * SHARD)
    for step in range(8):
        assert (r.batch(step, 7) == truth[[r.storage_index(k) for k in range(7 * step, 7 * step + 7)]]).all()
        assert r.cache_resident_bytes <= 3 * SHARD
        time.sleep(0.05)
    assert r._prefetcher.peak_ahead_bytes <= 2 * SHARD  # budget 3 shards, one of them the read's
    r.close()


def test_a_prefetch_failure_is_raised_by_the_read_that_needs_the_shard(mix, tmp_path):
    root, _ = mix
    s3 = SlowS3("bucket", root.parent, prefix="mix", delay=0.0)
    r = _open(root, tmp_path / "c", s3, prefetch_bytes=SHARD)
    bad = r.shards_of(range(7, 14))[0]
    s3.overrides[f"train/train-{bad:05d}.bin"] = b"\0" * SHARD  # right size, wrong bytes
    r.batch(0, 7)
    _wait(lambda: bad in r._shards.prefetch_errors)
    with pytest.raises(ShardCorruptError, match=f"train/train-{bad:05d}.bin: sha256 .* manifest says"):
        r.batch(1, 7)
    assert r.samples_consumed == 7
    del s3.overrides[f"train/train-{bad:05d}.bin"]
    r.batch(1, 7)  # raised once; the read then fetches for itself
    r.close()


def test_the_prefetch_thread_stops_when_the_reader_is_dropped(mix, tmp_path):
    root, _ = mix
    s3 = SlowS3("bucket", root.parent, prefix="mix", delay=0.02)
    r = _open(root, tmp_path / "c", s3, prefetch_bytes=3 * SHARD)
    r.batch(0, 7)
    (t,) = _prefetch_threads()
    del r
    gc.collect()
    t.join(10)
    assert not t.is_alive() and not _prefetch_threads()


def test_a_local_mix_or_zero_bytes_starts_no_thread(mix, tmp_path):
    root, _ = mix
    open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED, prefetch_bytes=1 << 20).batch(0, 7)
    r = _open(root, tmp_path / "c2", FakeS3Client("bucket", root.parent, prefix="mix"))
    r.batch(0, 7)
    assert not _prefetch_threads()
    with pytest.raises(ValueError, match="prefetch_bytes"):
        _open(root, tmp_path / "c3", FakeS3Client("bucket", root.parent, prefix="mix"), prefetch_bytes=-1)
