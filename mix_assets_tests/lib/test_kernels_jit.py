"""The compiled kernels (lib/kernels_jit.py, through the functions that call them) return exactly what
the numpy kernels they replaced returned (mix_assets_tests/support/kernels_reference.py), on adversarial
inputs: empty documents, documents shorter than the shingle, one huge document, the old code's block
boundaries, all-equal hashes, extreme uint32 / uint64 values."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from mix_assets.lib import kernels_jit
from mix_assets.lib import minhash as mh
from mix_assets.lib import textkeys as tk
from mix_assets_tests.support import kernels_reference as ref

U32 = np.uint32(0xFFFFFFFF)


def _offsets(lengths) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _signing_cases():
    rng = np.random.default_rng(7)
    yield "no documents", np.zeros(0, np.uint32), np.zeros(1, np.int64)
    yield "all empty", np.zeros(0, np.uint32), np.zeros(5, np.int64)
    lens = [0, 1, 0, 3, 0, 0, 2, 1]
    yield "empty between short", rng.integers(0, 1 << 32, sum(lens), dtype=np.uint32), _offsets(lens)
    yield "all equal", np.full(50, 12345, np.uint32), _offsets([10, 0, 40])
    yield "max values", np.full(9, U32, np.uint32), _offsets([4, 5])
    yield "zeros", np.zeros(9, np.uint32), _offsets([1, 8])
    edge = np.array([0, 1, U32, U32 - 1, 1 << 31, (1 << 31) - 1], np.uint32)
    yield "edge values", np.tile(edge, 7), _offsets([6, 36])
    n = ref.BLOCK + 13
    yield "one huge document", rng.integers(0, 1 << 32, n, dtype=np.uint32), _offsets([n])
    lens = [ref.BLOCK - 1, 2, ref.CHUNK, 1, ref.BLOCK + 5, 0, 3]  # documents across the old blocks
    yield "block boundaries", rng.integers(0, 1 << 32, sum(lens), dtype=np.uint32), _offsets(lens)


@pytest.mark.parametrize("num_perm,seed", [(128, 1), (1, 3), (7, 2), (256, 1)])
def test_signatures_equal_the_numpy_kernels(num_perm, seed):
    a, b = mh.permutations(num_perm, seed)
    for name, h32, off in _signing_cases():
        got = mh.signatures_from_hashes(h32, off, a, b)
        want = ref.signatures_from_hashes_blocked(h32, off, a, b)
        assert got.dtype == np.uint32 and got.shape == want.shape, name
        assert np.array_equal(got, want), name
        if num_perm == 128 and len(h32) < 100:
            assert np.array_equal(got, ref.signatures_from_hashes(h32, off, a, b)), name


def test_signatures_with_extreme_permutations():
    a = np.array([1, U32, 0x80000001, 3], np.uint32)
    b = np.array([0, U32, 1, 0x7FFFFFFF], np.uint32)
    for name, h32, off in _signing_cases():
        assert np.array_equal(mh.signatures_from_hashes(h32, off, a, b),
                              ref.signatures_from_hashes_blocked(h32, off, a, b)), name


def test_xxh64_of_every_length_and_byte():
    rng = np.random.default_rng(3)
    strings = [rng.integers(0, 256, k, dtype=np.uint8).tobytes() for k in range(0, 100) for _ in range(3)]
    strings += [b"\xff" * k for k in (0, 1, 4, 8, 31, 32, 33, 64)] + [b"\x00" * 40, bytes(range(256)) * 9]
    off = np.concatenate([[0], np.cumsum([len(s) for s in strings])]).astype(np.int64)
    got = kernels_jit.xxh64_strings(off, np.frombuffer(b"".join(strings), np.uint8))
    assert got.dtype == np.uint64 and got.tolist() == [xxhash.xxh64_intdigest(s) for s in strings]
    assert kernels_jit.xxh64_strings(np.zeros(1, np.int64), np.zeros(0, np.uint8)).size == 0


def test_word_hashes_equal_the_dictionary_version():
    words = ["a", "the", "x" * 31, "y" * 32, "z" * 200, "数学", "😀", "the", "a"]
    wl = pa.array([words, None, [], words[::-1] * 50, ["only"]], pa.list_(pa.large_string()))
    for part in (wl, wl.slice(1), wl.slice(3, 1), wl.slice(1, 2), pa.chunked_array([wl.slice(0, 2), wl.slice(2)])):
        got, off = tk.word_hashes(part)
        want, woff = ref.word_hashes_dictionary(part)
        assert got.dtype == want.dtype and np.array_equal(got, want) and np.array_equal(off, woff)
