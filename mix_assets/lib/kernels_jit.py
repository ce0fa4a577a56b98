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
