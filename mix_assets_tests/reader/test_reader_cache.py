"""The reader's shard cache shared by several processes: one budget for the directory, no file removed from
under a reader that holds it, one download per file, and every sample equal to the single-process reader's."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import multiprocessing
import threading
from pathlib import Path

import pytest

from mix_assets.reader import open_mix
from mix_assets_tests.support.fakeremotes import FakeHub, FakeS3Client
from mix_assets_tests.support.mixfactory import all_tokens, write_test_mix
from mix_assets_tests.support.reader_workers import read_batches
from mix_assets_tests.support.s3server import READER

SEED = 1234
SHARD_BYTES = 7 * 16 * 2  # 7 samples of 16 uint16 tokens


@pytest.fixture()
def mix(tmp_path: Path):
    root = tmp_path / "mix"
    m = write_test_mix(root, train_shards=(7,) * 8, val_shards=(5,), seq_len=16, seed=3)
    return root, m


def _fake(root: Path) -> tuple:
    return ("fake", "bucket", str(root.parent), "mix")


def _objects(cache: Path) -> dict[str, int]:
    """The cached files (name = sha256) and their sizes."""
    return {p.name: p.stat().st_size for p in (cache / "objects").rglob("*") if p.is_file() and len(p.name) == 64}


def _directory_bytes(cache: Path) -> tuple[int, int]:
    """(files + reservations, files + partial downloads) in the cache directory, read under its lock (so no
    reader adds or removes anything meanwhile)."""
    objects = cache / "objects"
    if not objects.is_dir():
        return 0, 0
    with open(objects / ".lock", "ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        files = reserved = parts = 0
        for p in objects.glob("*/*"):
            with contextlib.suppress(FileNotFoundError):
                n = p.stat().st_size
                files += n if len(p.name) == 64 else 0
                reserved += n if p.name.endswith(".fetching") else 0
                parts += n if p.name.endswith(".part") else 0
    return files + reserved, files + parts


@contextlib.contextmanager
def _watch(cache: Path):
    """The largest _directory_bytes seen while the block runs (polled every few ms)."""
    peak, done = [0, 0], threading.Event()

    def poll():
        while not done.wait(0.002):
            accounted, actual = _directory_bytes(cache)
            peak[0], peak[1] = max(peak[0], accounted), max(peak[1], actual)

    t = threading.Thread(target=poll)
    t.start()
    try:
        yield peak
    finally:
        done.set()
        t.join()


def _run_workers(location: str, cache: Path, client_spec: tuple, procs: int, batches, bs: int) -> dict:
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=read_batches, args=(location, str(cache), SEED, 2 * SHARD_BYTES, w, batches, bs,
                                                      client_spec, barrier, out))
               for w in range(procs)]
    for p in workers:
        p.start()
    results = {}
    try:
        with _watch(cache) as peak:
            for _ in workers:
                w, got, gets, err = out.get(timeout=240)
                assert err is None, f"worker {w} failed after {len(got)} batches:\n{err}"
                results[w] = (got, gets)
    finally:
        for p in workers:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert sorted(results) == list(range(procs))
    # One budget for the directory, whatever the processes hold: never over it, downloads in flight included.
    assert peak[0] <= 2 * SHARD_BYTES and peak[1] <= 2 * SHARD_BYTES, peak
    assert peak[0] > 0
    return results


def _assert_same_as_one_process(root: Path, m: dict, results: dict, bs: int, tmp_path: Path) -> None:
    single = open_mix(root, cache_dir=tmp_path / "single", shuffle_seed=SEED)
    truth = all_tokens(root, m)
    assert (single.samples(0, len(single)) == truth[[single.storage_index(k) for k in range(len(single))]]).all()
    for got, _ in results.values():
        assert got
        for start, h in got:
            assert h == hashlib.sha256(single.samples(start, bs).tobytes()).hexdigest(), start


@pytest.mark.slow
@pytest.mark.parametrize("procs", [2, 4])
def test_processes_sharing_a_cache_smaller_than_the_mix_read_the_same_samples(mix, tmp_path, procs):
    root, m = mix
    cache = tmp_path / "c"
    results = _run_workers("s3://bucket/mix", cache, _fake(root), procs, batches=300, bs=3)
    _assert_same_as_one_process(root, m, results, 3, tmp_path)
    r = open_mix("s3://bucket/mix", cache_dir=cache, shuffle_seed=SEED, cache_bytes=2 * SHARD_BYTES,
                 s3_client=FakeS3Client("bucket", root.parent, prefix="mix"))
    r.sample(0)
    assert sum(_objects(cache).values()) == r.cache_resident_bytes <= 2 * SHARD_BYTES
    assert not [p for p in (cache / "objects").rglob("*.fetching")] + [p for p in (cache / "objects").rglob("*.part")]


@pytest.mark.slow
def test_processes_wanting_the_same_shard_download_it_once(mix, tmp_path):
    root, m = mix
    results = _run_workers("s3://bucket/mix", tmp_path / "c", _fake(root), 4, batches=[0], bs=1)
    _assert_same_as_one_process(root, m, results, 1, tmp_path)
    shard = m["splits"]["train"]["shards"][open_mix(root, shuffle_seed=SEED).storage_index(0) // 7]["path"]
    assert sum(gets.get(shard, 0) for _, gets in results.values()) == 1


@pytest.mark.slow
def test_processes_sharing_a_cache_read_the_same_samples_from_the_hub(mix, tmp_path):
    root, m = mix
    commit = "0123456789abcdef0123456789abcdef01234567"
    with FakeHub(root, "org/tiny-mix", commit) as hub:
        results = _run_workers(f"hf://datasets/org/tiny-mix@{commit}", tmp_path / "c", ("hub", hub.endpoint), 2,
                               batches=40, bs=3)
    _assert_same_as_one_process(root, m, results, 3, tmp_path)


@pytest.mark.s3
@pytest.mark.slow
def test_four_processes_sharing_a_two_shard_cache_read_the_same_samples_from_seaweedfs(mix, tmp_path, seaweedfs):
    root, m = mix
    url = seaweedfs.upload_dir(root, "reader-cache")
    results = _run_workers(url, tmp_path / "c", ("s3", seaweedfs.endpoint, *READER), 4, batches=40, bs=3)
    _assert_same_as_one_process(root, m, results, 3, tmp_path)


# -- the same rules between readers of one process (deterministic) ------------------------------------------------
def _in_shard(r, shard: int) -> int:
    return next(k for k in range(len(r)) if shard * 7 <= r.storage_index(k) < (shard + 1) * 7)


def test_a_reader_never_removes_a_file_another_reader_holds_and_never_exceeds_the_one_budget(mix, tmp_path):
    root, m = mix
    truth = all_tokens(root, m)
    shas = [s["sha256"] for s in m["splits"]["train"]["shards"]]
    cache = tmp_path / "c"

    def reader():
        return open_mix("s3://bucket/mix", cache_dir=cache, shuffle_seed=SEED, cache_bytes=2 * SHARD_BYTES,
                        s3_client=FakeS3Client("bucket", root.parent, prefix="mix"))

    a, b = reader(), reader()
    for s in (0, 1):
        a.sample(_in_shard(a, s))
    # b needs room, but a holds (maps) both files in the cache: they stay, and b reads its shard into its own
    # memory instead (verified) rather than take the directory over the budget.
    k2 = _in_shard(b, 2)
    assert (b.sample(k2) == truth[b.storage_index(k2)]).all()
    assert set(_objects(cache)) == {shas[0], shas[1]} and b._shards.private_reads == 1
    for s in (0, 1):
        k = _in_shard(a, s)
        assert (a.samples(k, 1)[0] == truth[a.storage_index(k)]).all()
    # Once a lets go (dropped without close() here; close() does the same), the one budget applies to all.
    del a
    gc.collect()
    k3 = _in_shard(b, 3)
    assert (b.sample(k3) == truth[b.storage_index(k3)]).all()
    assert shas[3] in _objects(cache) and b.cache_resident_bytes == 2 * SHARD_BYTES
    assert b._shards.private_reads == 1
    b.close()


def test_a_crashed_fetch_is_taken_over_and_its_reservation_dropped(mix, tmp_path):
    root, m = mix
    truth = all_tokens(root, m)
    shards = m["splits"]["train"]["shards"]
    cache = tmp_path / "c"
    # What a killed process leaves mid-download: a reservation (its size = the shard's bytes) and a part.
    for s in (0, 5):
        d = cache / "objects" / shards[s]["sha256"][:2]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{shards[s]['sha256']}.fetching").write_bytes(b"\0" * SHARD_BYTES)
        (d / f"{shards[s]['sha256']}.part").write_bytes(b"junk")
    r = open_mix("s3://bucket/mix", cache_dir=cache, shuffle_seed=SEED, cache_bytes=2 * SHARD_BYTES,
                 s3_client=FakeS3Client("bucket", root.parent, prefix="mix"))
    for s in (0, 1):
        k = _in_shard(r, s)
        assert (r.sample(k) == truth[r.storage_index(k)]).all()
    assert set(_objects(cache)) == {shards[0]["sha256"], shards[1]["sha256"]}
    left = [p.name for p in (cache / "objects").rglob("*") if p.suffix in (".fetching", ".part")]
    assert left == [] and r.cache_resident_bytes == 2 * SHARD_BYTES


def test_a_full_cache_disk_reads_into_memory_and_names_the_cache_dir(mix, tmp_path, monkeypatch, caplog):
    """Issue 25 §3: ENOSPC while writing a shard into the cache is the local disk's, not the remote
    object's: the reader warns naming its cache directory and reads the shard into memory, as when the
    budget is full."""
    import errno
    import logging

    from mix_assets.core import transport

    root, m = mix
    truth = all_tokens(root, m)
    cache = tmp_path / "c"

    def disk_full(self, key, dest):
        with open(dest, "wb") as f:  # some bytes written, then the disk fills up
            f.write(b"\0" * 10)
        raise OSError(errno.ENOSPC, "No space left on device", str(dest))

    monkeypatch.setattr(transport.S3Location, "download", disk_full)
    r = open_mix("s3://bucket/mix", cache_dir=cache, shuffle_seed=SEED,
                 s3_client=FakeS3Client("bucket", root.parent, prefix="mix"))
    with caplog.at_level(logging.WARNING, logger="mix_assets.reader"):
        for k in range(len(r)):
            assert (r.sample(k) == truth[r.storage_index(k)]).all()
        assert (r.samples(0, len(r)) == truth[[r.storage_index(k) for k in range(len(r))]]).all()
    warned = [x.getMessage() for x in caplog.records if x.levelno >= logging.WARNING]
    assert len(warned) == 1 and str(cache / "objects") in warned[0] and "No space left" in warned[0], warned
    assert "budget" not in warned[0] and "s3://bucket/mix/train/" in warned[0]
    assert r._shards.private_reads >= 8 and _objects(cache) == {}
    assert [p.name for p in (cache / "objects").rglob("*") if p.suffix in (".fetching", ".part")] == []
    r.close()
