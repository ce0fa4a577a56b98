"""Compiled (numba) loops for the full-text passes: the same bits as the numpy kernels they replace
(mix_assets_tests/support/kernels_reference.py keeps those; test_kernels_jit pins old == new).

Compiled with `cache=True`: the machine code is kept beside this file, or under NUMBA_CACHE_DIR
when the package directory is read-only, so a fresh process (a Dagster step, a Ray worker) loads it
instead of compiling. `nogil=True`: the batch threads of a map task run them on both cores.
"""

from __future__ import annotations

import numba
import numpy as np

_JIT = dict(nogil=True, cache=True)


@numba.njit(**_JIT)
def minhash_rows(h32: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray,
                 out: np.ndarray) -> None:
    """out[d, k] = min over document d's shingles x of a[k] * fmix32(x) + b[k] mod 2**32 (into `out`,
    pre-filled with EMPTY)."""
    num_perm = a.shape[0]
    row = np.empty(num_perm, np.uint32)
    for d in range(offsets.shape[0] - 1):
        s, e = offsets[d], offsets[d + 1]
        if s == e:
            continue
        row[:] = out[d]
        for j in range(s, e):
            x = np.uint32(h32[j])
            x ^= x >> np.uint32(16)
            x = np.uint32(x * np.uint32(0x85EBCA6B))
            x ^= x >> np.uint32(13)
            x = np.uint32(x * np.uint32(0xC2B2AE35))
            x ^= x >> np.uint32(16)
            for k in range(num_perm):
                v = np.uint32(a[k] * x + b[k])
                if v < row[k]:
                    row[k] = v
        out[d] = row


_X1, _X2, _X3 = np.uint64(0x9E3779B185EBCA87), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)
_X4, _X5 = np.uint64(0x85EBCA77C2B2AE63), np.uint64(0x27D4EB2F165667C5)


@numba.njit(inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@numba.njit(inline="always")
def _lane(b, p, size):
    """The little-endian integer of b[p : p + size]."""
    v = np.uint64(0)
    for i in range(size):
        v |= np.uint64(b[p + i]) << np.uint64(8 * i)
    return v


@numba.njit(inline="always")
def _round(acc, lane):
    return _rotl(acc + lane * _X2, 31) * _X1


@numba.njit(**_JIT)
def xxh64_strings(offsets: np.ndarray, b: np.ndarray) -> np.ndarray:
    """XXH64 (seed 0) of each string b[offsets[i] : offsets[i + 1]] (uint8 bytes, int64 offsets)."""
    n = offsets.shape[0] - 1
    out = np.empty(n, np.uint64)
    for i in range(n):
        p, end = offsets[i], offsets[i + 1]
        size = end - p
        if size >= 32:
            v1, v2, v3, v4 = _X1 + _X2, _X2, np.uint64(0), np.uint64(0) - _X1
            while end - p >= 32:
                v1 = _round(v1, _lane(b, p, 8))
                v2 = _round(v2, _lane(b, p + 8, 8))
                v3 = _round(v3, _lane(b, p + 16, 8))
                v4 = _round(v4, _lane(b, p + 24, 8))
                p += 32
            h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
            for v in (v1, v2, v3, v4):
                h = (h ^ _round(np.uint64(0), v)) * _X1 + _X4
        else:
            h = _X5
        h += np.uint64(size)
        while end - p >= 8:
            h = _rotl(h ^ _round(np.uint64(0), _lane(b, p, 8)), 27) * _X1 + _X4
            p += 8
        if end - p >= 4:
            h = _rotl(h ^ (_lane(b, p, 4) * _X1), 23) * _X2 + _X3
            p += 4
        while p < end:
            h = _rotl(h ^ (np.uint64(b[p]) * _X5), 11) * _X1
            p += 1
        h ^= h >> np.uint64(33)
        h *= _X2
        h ^= h >> np.uint64(29)
        h *= _X3
        h ^= h >> np.uint64(32)
        out[i] = h
    return out
