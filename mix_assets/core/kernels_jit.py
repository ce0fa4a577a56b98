"""Compiled (numba) loops for the full-text passes: the same bits as the numpy kernels they replace
(mix_assets_tests/oracles/kernels_reference.py keeps those; test_kernels_jit pins old == new).

Compiled with `cache=True`: the machine code is kept beside this file, or under NUMBA_CACHE_DIR
when the package directory is read-only, so a fresh process (a Dagster step, a Ray worker) loads it
instead of compiling. `nogil=True`: the batch threads of a map task run them on both cores.
Callers import this module inside the functions that run a kernel, so numba (~150 MB resident with
a cached kernel, ~0.5 s) loads only in processes that normalise or sign text (not in token_shards',
raw's or the code server's).
"""

from __future__ import annotations

import importlib.abc
import sys
import threading

import numba
import numpy as np


class _RefuseScipy(importlib.abc.MetaPathFinder):
    """Refuses `scipy` imports from the thread that installed it (ModuleNotFoundError), for `_load_arraymath`."""

    def __init__(self):
        self.thread = threading.get_ident()

    def find_spec(self, name, path=None, target=None):
        if (name == "scipy" or name.startswith("scipy.")) and threading.get_ident() == self.thread:
            raise ModuleNotFoundError(f"{name}: not imported while numba.np.arraymath loads", name=name)
        return None


def _load_arraymath() -> None:
    """Import numba.np.arraymath (numba's first compile or cache load does) with scipy refused: at import it
    probes BLAS by importing scipy.linalg (~0.2 CPU s and more wall, in every process that runs a kernel), and
    only its np.convolve / np.correlate read the answer (they fall back to a loop; no kernel here calls
    them). numba's linalg functions probe BLAS again when compiled, unaffected. Nothing is refused when
    scipy.linalg or arraymath is loaded already."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    finder = _RefuseScipy()
    sys.meta_path.insert(0, finder)
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        sys.meta_path.remove(finder)


_load_arraymath()

_JIT = dict(nogil=True, cache=True)
_WINDOW_BLOCK = 2048  # window hashes computed before their bitmap tests


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


@numba.njit(inline="always")
def _xxh64(b, p, end):
    """XXH64 (seed 0) of b[p : end]."""
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
    return h


@numba.njit(**_JIT)
def xxh64_strings(offsets: np.ndarray, b: np.ndarray) -> np.ndarray:
    """XXH64 (seed 0) of each string b[offsets[i] : offsets[i + 1]] (uint8 bytes, int64 offsets)."""
    n = offsets.shape[0] - 1
    out = np.empty(n, np.uint64)
    for i in range(n):
        out[i] = _xxh64(b, offsets[i], offsets[i + 1])
    return out


@numba.njit(inline="always")
def _splitmix64(x):
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.njit(inline="always")
def _in_bitmap(v, shift, bits):
    at = v >> shift
    return (bits[at >> np.uint64(3)] >> (at & np.uint64(7))) & np.uint8(1)


@numba.njit(**_JIT)
def bitmap_hits(v: np.ndarray, shift: np.uint64, bits: np.ndarray) -> np.ndarray:
    """Positions of the values whose bit (top bits of the value) is set in `bits` (contamination._Bitmap)."""
    out = np.empty(v.shape[0], np.int64)
    n = 0
    for i in range(v.shape[0]):
        if _in_bitmap(v[i], shift, bits):
            out[n] = i
            n += 1
    return out[:n].copy()


@numba.njit(**_JIT)
def window_bitmap_hits(c: np.ndarray, pw: np.ndarray, length: int, shift: np.uint64,
                       bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, hash) of the windows of `length` words whose hash has its bit set in `bits`: the hash of
    `contamination._Prefix.all_windows` (prefix sums `c`, powers `pw`), never kept for all windows.
    Hashed a block at a time, then tested: the test loop's loads, which miss the cache, overlap."""
    m = max(c.shape[0] - length, 0)  # windows starting at 0 .. total - length
    pos = np.empty(m, np.int64)
    val = np.empty(m, np.uint64)
    block = np.empty(_WINDOW_BLOCK, np.uint64)
    n = 0
    tag = np.uint64(length)
    for s in range(0, m, _WINDOW_BLOCK):
        e = min(s + _WINDOW_BLOCK, m)
        for i in range(s, e):
            block[i - s] = _splitmix64(((c[i + length] - c[i]) * pw[i + length - 1]) ^ tag)
        for i in range(s, e):
            v = block[i - s]
            if _in_bitmap(v, shift, bits):
                pos[n] = i
                val[n] = v
                n += 1
    return pos[:n].copy(), val[:n].copy()


@numba.njit(**_JIT)
def heavy_postings(pos: np.ndarray, rep: np.ndarray, doc_hash: np.ndarray, post_off: np.ndarray,
                   post_hash: np.ndarray, post_weight: np.ndarray, need: float, bits: int):
    """(posting, position) of the postings of each hit i (positions `pos`, rep keys `rep`, hashed
    documents `doc_hash`) whose bucket (top `bits` bits of post_hash + doc_hash) sums >= `need` weight,
    in hit then posting order (fuzzy.candidates). Buckets are recomputed in the second pass, so no
    per-posting array is held."""
    shift = np.uint64(64 - bits)
    total = np.zeros(1 << bits, np.int64)
    n = 0
    for i in range(pos.shape[0]):
        dh = doc_hash[i]
        for j in range(post_off[rep[i]], post_off[rep[i] + 1]):
            total[np.int64((post_hash[j] + dh) >> shift)] += post_weight[j]
            n += 1
    out_at = np.empty(n, np.int64)
    out_pos = np.empty(n, np.int64)
    k = 0
    for i in range(pos.shape[0]):
        dh = doc_hash[i]
        for j in range(post_off[rep[i]], post_off[rep[i] + 1]):
            if total[np.int64((post_hash[j] + dh) >> shift)] >= need:
                out_at[k] = j
                out_pos[k] = pos[i]
                k += 1
    return out_at[:k].copy(), out_pos[:k].copy()


@numba.njit(**_JIT)
def segment_distinct(values: np.ndarray, offsets: np.ndarray, out: np.ndarray, out_offsets: np.ndarray) -> int:
    """Each segment's distinct values, ascending, into `out` (as long as `values`), its offsets into
    `out_offsets`; the number written. A sort per segment (short: an eval item's shingles), no global one."""
    k = 0
    out_offsets[0] = 0
    for d in range(offsets.shape[0] - 1):
        s, e = offsets[d], offsets[d + 1]
        if e > s:
            v = np.sort(values[s:e])
            out[k] = v[0]
            k += 1
            for j in range(1, v.shape[0]):
                if v[j] != v[j - 1]:
                    out[k] = v[j]
                    k += 1
        out_offsets[d + 1] = k
    return k


@numba.njit(**_JIT)
def ngram_hashes(hashes: np.ndarray, offsets: np.ndarray, out_offsets: np.ndarray, n: int, whole: bool,
                 base: np.uint64) -> np.ndarray:
    """textkeys.ngram_hashes' values: per document, splitmix64(polynomial of each n-word window in `base`
    ^ n) in position order; with `whole`, a document of 1 .. n-1 words one value over all its words
    (^ its length). `out_offsets`: each document's slots."""
    out = np.empty(out_offsets[-1], np.uint64)
    for d in range(offsets.shape[0] - 1):
        s, e = offsets[d], offsets[d + 1]
        k = out_offsets[d]
        size = e - s
        if size >= n:
            for i in range(s, e - n + 1):
                acc = np.uint64(0)
                for j in range(i, i + n):
                    acc = acc * base + hashes[j]
                out[k] = _splitmix64(acc ^ np.uint64(n))
                k += 1
        elif whole and size > 0:
            acc = np.uint64(0)
            for j in range(s, e):
                acc = acc * base + hashes[j]
            out[k] = _splitmix64(acc ^ np.uint64(size))
    return out


KEEP, DROP, SPACE = 1, 2, 3  # textkeys' byte classes


@numba.njit(inline="always")
def _byte_class(c, hi):
    """(class, byte to keep) of byte `c` of a text (`hi`: its character's class when c >= 0x80)."""
    if c >= 0x80:
        return np.uint8(hi), np.uint8(c)
    if (97 <= c <= 122) or (48 <= c <= 57):
        return np.uint8(KEEP), np.uint8(c)
    if 65 <= c <= 90:
        return np.uint8(KEEP), np.uint8(c + 32)
    if c == 32 or (9 <= c <= 13 and c != 11):
        return np.uint8(SPACE), np.uint8(c)
    return np.uint8(DROP), np.uint8(c)


@numba.njit(**_JIT)
def split_words(o: np.ndarray, b: np.ndarray, high: np.ndarray):
    """textkeys._split's words: per document (bytes b[o[d] : o[d + 1]]), its whitespace-separated
    tokens with their deleted bytes removed, empty ones dropped, A-Z lower-cased. ASCII bytes are kept
    (a-z, A-Z, 0-9), whitespace (\\t \\n \\f \\r space) or deleted; a byte >= 0x80 takes the class
    `high[i]` of its character (`high` empty: no such byte). Returns (kept bytes, int64 word offsets
    into them, int32 per-document word offsets)."""
    nb = b.shape[0]
    kept = np.empty(nb, np.uint8)
    soff = np.empty((nb + o.shape[0]) // 2 + 1, np.int64)  # a document of k bytes: <= (k + 1) // 2 words
    loff = np.empty(o.shape[0], np.int32)
    nk = 0
    nw = 0
    loff[0] = 0
    for d in range(o.shape[0] - 1):
        in_word = False
        for i in range(o[d], o[d + 1]):
            cls, c = _byte_class(b[i], high[i] if b[i] >= 0x80 else 0)
            if cls == KEEP:
                if not in_word:
                    soff[nw] = nk
                    nw += 1
                    in_word = True
                kept[nk] = c
                nk += 1
            elif cls == SPACE:
                in_word = False
        loff[d + 1] = nw
    soff[nw] = nk
    return kept[:nk].copy(), soff[: nw + 1].copy(), loff


@numba.njit(**_JIT)
def split_hash_words(o: np.ndarray, b: np.ndarray, high: np.ndarray):
    """`split_words`' words, hashed as they end and joined by single spaces in the same pass: returns
    (per document its words joined (uint8 bytes), int64 per-document offsets into them, the XXH64 of
    every word in order, int64 per-document word offsets)."""
    nb = b.shape[0]
    nd = o.shape[0] - 1
    out = np.empty(nb, np.uint8)  # a word's bytes and the one space before it come from as many input bytes
    toff = np.empty(nd + 1, np.int64)
    hashes = np.empty((nb + nd) // 2 + 1, np.uint64)
    woff = np.empty(nd + 1, np.int64)
    nk = 0
    nw = 0
    toff[0] = 0
    woff[0] = 0
    for d in range(nd):
        in_word = False
        start = 0
        for i in range(o[d], o[d + 1]):
            cls, c = _byte_class(b[i], high[i] if b[i] >= 0x80 else 0)
            if cls == KEEP:
                if not in_word:
                    if nk > toff[d]:
                        out[nk] = 32
                        nk += 1
                    start = nk
                    in_word = True
                out[nk] = c
                nk += 1
            elif cls == SPACE and in_word:
                hashes[nw] = _xxh64(out, start, nk)
                nw += 1
                in_word = False
        if in_word:
            hashes[nw] = _xxh64(out, start, nk)
            nw += 1
        toff[d + 1] = nk
        woff[d + 1] = nw
    return out[:nk].copy(), toff, hashes[:nw].copy(), woff
