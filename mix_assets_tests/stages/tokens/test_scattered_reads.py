"""Scattered reads of a large local file (token_shards' pass-2 gathers from its spill, the exactness check's sampled
shard reads) return the right tokens and do not put the file in the process's RSS (issue 29: a memory-mapped read
faults in the pages around each one read, so the peak grew with the corpus)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from mix_assets.stages.tokens import exactness
from mix_assets.stages.tokens.shards import _SpillReader

TOKENS = 1 << 25  # 64 MB of uint16
STRIDE = 1 << 13  # a read every 16 KB: ~4,096 reads of 8 tokens, 64 KB of ids in all
LIMIT_MB = 8  # a mapped file: >= 16 MB (one 4 KB page per read), ~64 MB with the kernel's fault-around

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")


def _big_file(path) -> np.ndarray:
    data = (np.arange(TOKENS, dtype=np.int64) * 7919 % 65521).astype(np.uint16)
    data.tofile(path)
    return data


def _peak_growth_mb(fn) -> tuple[float, object]:
    """(VmHWM after `fn` minus VmRSS before it, in MB; fn's result): the kernel's peak is reset first."""

    def status(key: str) -> int:
        return int(next(x for x in open("/proc/self/status") if x.startswith(key + ":")).split()[1])

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    before = status("VmRSS")
    out = fn()
    return (status("VmHWM") - before) / 1024, out


@linux_only
def test_spill_gather_returns_the_ranges_and_keeps_the_spill_out_of_rss(tmp_path):
    path = tmp_path / "spill.bin"
    data = _big_file(path)
    offsets = np.arange(0, TOKENS - 8, STRIDE, dtype=np.int64)[::-1].copy()  # any order
    takes = (np.arange(len(offsets)) % 9).astype(np.int64)  # 0-8 tokens, empty ranges included
    reader = _SpillReader(str(path), np.dtype(np.uint16))
    try:
        grew, got = _peak_growth_mb(lambda: reader.gather(offsets, takes))
    finally:
        reader.close()
    want = np.concatenate([data[o : o + t] for o, t in zip(offsets.tolist(), takes.tolist())])
    assert got.dtype == np.uint16 and np.array_equal(got, want)
    assert grew < LIMIT_MB, f"gather's peak RSS grew {grew:.1f} MB over a {TOKENS * 2 >> 20} MB spill"


def test_spill_gather_of_a_range_past_the_end_fails_naming_it(tmp_path):
    path = tmp_path / "spill.bin"
    np.arange(100, dtype=np.uint16).tofile(path)
    reader = _SpillReader(str(path), np.dtype(np.uint16))
    try:
        assert reader.gather(np.array([0, 95]), np.array([0, 0])).size == 0
        with pytest.raises(IOError, match="short read at token 95"):
            reader.gather(np.array([0, 95]), np.array([3, 10]))
    finally:
        reader.close()


class _LocalStorage:
    is_s3 = False

    def __init__(self, root):
        self.root = root

    def local_path(self, key: str) -> str:
        return os.path.join(self.root, key)


def _shards(tmp_path, sizes: list[int], sample_len: int) -> tuple[_LocalStorage, list[dict], np.ndarray]:
    """Shard files of `sizes` samples under mix/train/, and the whole stream."""
    st = _LocalStorage(str(tmp_path))
    os.makedirs(tmp_path / exactness.layout.MIX_DIR / "train", exist_ok=True)
    parts, shards = [], []
    for i, samples in enumerate(sizes):
        rel = f"train/{i:05d}.bin"
        data = (np.arange(samples * sample_len, dtype=np.int64) * 31 + i * 1000).astype(np.uint16)
        data.tofile(st.local_path(f"{exactness.layout.MIX_DIR}/{rel}"))
        parts.append(data)
        shards.append({"path": rel, "samples": samples})
    return st, shards, np.concatenate(parts)


def test_exactness_stream_reads_across_shard_seams(tmp_path):
    st, shards, whole = _shards(tmp_path, [3, 1, 4], 16)
    s = exactness._Stream(st, shards, 16, np.dtype(np.uint16))
    try:
        for start, n in [(0, 5), (40, 20), (47, 1), (48, 16), (60, 68), (120, 50), (0, 128), (128, 3)]:
            assert np.array_equal(s.read(start, n), whole[start : start + n]), (start, n)
    finally:
        s.close()
    assert not s.fds


def test_exactness_stream_names_a_shard_whose_size_differs_from_the_stats(tmp_path):
    st, shards, _ = _shards(tmp_path, [2, 2], 8)
    with open(st.local_path(f"{exactness.layout.MIX_DIR}/{shards[1]['path']}"), "ab") as f:
        f.write(b"\0\0")
    s = exactness._Stream(st, shards, 8, np.dtype(np.uint16))
    with pytest.raises(ValueError, match=r"train/00001\.bin: 34 bytes, the shard stats list 16 tokens"):
        s.read(10, 10)
    s.close()


@linux_only
def test_exactness_stream_sampled_reads_keep_the_shards_out_of_rss(tmp_path):
    sample_len = 1 << 12
    samples = TOKENS // sample_len // 4
    st, shards, _ = _shards(tmp_path, [samples] * 4, sample_len)  # four 16 MB shards
    starts = np.arange(3, TOKENS - 8, STRIDE).tolist()
    s = exactness._Stream(st, shards, sample_len, np.dtype(np.uint16))
    try:
        grew, got = _peak_growth_mb(lambda: np.concatenate([s.read(a, 8) for a in starts]))  # as `compare` does
    finally:
        s.close()
    assert len(got) == 8 * len(starts)
    assert grew < LIMIT_MB, f"sampled reads' peak RSS grew {grew:.1f} MB over {TOKENS * 2 >> 20} MB of shards"


def test_pread_tokens_reads_a_range_and_names_the_file_on_a_short_read(tmp_path):
    from mix_assets.format import shards as shards_fmt

    path = tmp_path / "s.bin"
    np.arange(50, dtype=np.uint32).tofile(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert shards_fmt.pread_tokens(fd, 7, 5, "uint32").tolist() == [7, 8, 9, 10, 11]
        assert shards_fmt.pread_tokens(fd, 50, 0, "uint32").size == 0
        with pytest.raises(ValueError, match=r"train/x\.bin: short read at token 45 \(5 of 8 tokens\)"):
            shards_fmt.pread_tokens(fd, 45, 8, "uint32", "train/x.bin")
    finally:
        os.close(fd)
