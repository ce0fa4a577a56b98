"""Compiled (numba) lookups of the fuzzy advisory's scan (stages/audit/fuzzy.py): a batch's shingles against the
index's representative keys, without sorting them.

`fuzzy.candidates` needs, for every shingle position whose hash is a representative key, that key's index and
the position's document, grouped by key (the postings are then read in order). numpy did that with an argsort of
the bitmap's candidates, a searchsorted of them into the keys and another of the positions into the document
offsets (about half of the advisory's time). Here one pass tests the bitmap, looks the value up in its radix
bucket of the sorted keys (`fuzzy.Index.radix`: ~1 key per bucket) and walks the document offsets; a counting sort
by key then groups the hits, positions ascending within a key. The hits are the same set as numpy's (the
grouping order within a key differs, which nothing downstream reads: `fuzzy.candidates` sorts its keys).
"""

from __future__ import annotations

import numba
import numpy as np

_JIT = dict(nogil=True, cache=True)


@numba.njit(**_JIT)
def key_hits(v: np.ndarray, offsets: np.ndarray, shift: np.uint64, bits: np.ndarray, keys: np.ndarray,
             start: np.ndarray, rshift: np.uint64):
    """(position, key index, document) of every value of `v` that is in the sorted unique `keys`, grouped by key
    index, positions ascending within a key: the bitmap (`contamination._Bitmap`: `shift`, `bits`) first, then
    the value's radix bucket (`start`, top 64 - `rshift` bits); `offsets`: the documents' slots in `v`."""
    m = v.shape[0]
    pos = np.empty(m, np.int64)
    idx = np.empty(m, np.int64)
    doc = np.empty(m, np.int64)
    n = 0
    d = 0
    for i in range(m):
        x = v[i]
        at = x >> shift
        if not (bits[at >> np.uint64(3)] >> (at & np.uint64(7))) & np.uint8(1):
            continue
        b = np.int64(x >> rshift)
        for j in range(start[b], start[b + 1]):
            if keys[j] == x:
                while offsets[d + 1] <= i:
                    d += 1
                pos[n] = i
                idx[n] = j
                doc[n] = d
                n += 1
                break
    # counting sort by key index (stable: positions stay ascending within a key)
    count = np.zeros(keys.shape[0] + 1, np.int64)
    for k in range(n):
        count[idx[k] + 1] += 1
    for j in range(keys.shape[0]):
        count[j + 1] += count[j]
    out_pos = np.empty(n, np.int64)
    out_idx = np.empty(n, np.int64)
    out_doc = np.empty(n, np.int64)
    for k in range(n):
        j = idx[k]
        t = count[j]
        count[j] = t + 1
        out_pos[t] = pos[k]
        out_idx[t] = j
        out_doc[t] = doc[k]
    return out_pos, out_idx, out_doc
