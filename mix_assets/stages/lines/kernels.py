"""Compiled (numba) passes of line_dedup over a chunk's Arrow text buffers: one pass per chunk, no Python loop
per document and no exploded line frame.

A line is a `\\n`-separated piece of a document; its key is XXH64 (seed 0, core/kernels_jit._xxh64: fixed by
the algorithm, not by a library version) of its UTF-8 bytes with leading and trailing whitespace stripped;
whitespace is Unicode White_Space (the set Rust's `str::trim` and polars' `strip_chars()` strip: ASCII
\\t \\n \\v \\f \\r and space, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
A line is counted when its stripped length in characters is >= min_chars.
"""

from __future__ import annotations

import numba
import numpy as np

from mix_assets.core.kernels_jit import _xxh64

_JIT = dict(nogil=True, cache=True)


@numba.njit(inline="always")
def _ws_at(b, p, end):
    """Byte length of the whitespace character starting at b[p] (0 when it is none)."""
    c = b[p]
    if c == 0x20 or (c >= 0x09 and c <= 0x0D):
        return 1
    if c == 0xC2 and p + 1 < end and (b[p + 1] == 0x85 or b[p + 1] == 0xA0):
        return 2
    if p + 2 < end:
        c1, c2 = b[p + 1], b[p + 2]
        if c == 0xE1 and c1 == 0x9A and c2 == 0x80:
            return 3
        if c == 0xE2 and c1 == 0x80 and (c2 <= 0x8A or c2 == 0xA8 or c2 == 0xA9 or c2 == 0xAF):
            return 3  # c2 >= 0x80 always (a continuation byte)
        if c == 0xE2 and c1 == 0x81 and c2 == 0x9F:
            return 3
        if c == 0xE3 and c1 == 0x80 and c2 == 0x80:
            return 3
    return 0


@numba.njit(inline="always")
def _strip(b, s, e):
    """(start, end) of b[s:e] with surrounding whitespace stripped."""
    while s < e:
        w = _ws_at(b, s, e)
        if w == 0:
            break
        s += w
    while e > s:
        q = e - 1
        while q > s and (b[q] & 0xC0) == 0x80:  # back to the start of the last character
            q -= 1
        if _ws_at(b, q, e) != e - q:
            break
        e = q
    return s, e


@numba.njit(inline="always")
def _chars(b, s, e):
    n = 0
    for i in range(s, e):
        if (b[i] & 0xC0) != 0x80:
            n += 1
    return n


@numba.njit(inline="always")
def _counted(b, s, e, min_chars):
    """Whether b[s:e] holds at least min_chars characters (stops counting there)."""
    if e - s < min_chars:  # fewer bytes than that: fewer characters
        return False
    n = 0
    for i in range(s, e):
        if n >= min_chars:
            return True
        if (b[i] & 0xC0) != 0x80:
            n += 1
    return n >= min_chars


@numba.njit(inline="always")
def _line_end(b, p, e):
    while p < e and b[p] != 0x0A:
        p += 1
    return p


@numba.njit(inline="always")
def _line_chars(b, p, e):
    """(end of the line starting at b[p] (its newline or e), its characters)."""
    n = 0
    while p < e:
        c = b[p]
        if c == 0x0A:
            break
        if (c & 0xC0) != 0x80:
            n += 1
        p += 1
    return p, n


_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_NEWLINES = np.uint64(0x0A0A0A0A0A0A0A0A)


def words(b: np.ndarray) -> tuple[np.ndarray, int]:
    """(b's bytes from its first 8-byte-aligned address as uint64 words, that address's index in b): what
    `_line_chars_w` reads 8 bytes at a time."""
    head = min((-b.ctypes.data) % 8, b.shape[0])
    n = (b.shape[0] - head) // 8
    return b[head:head + 8 * n].view(np.uint64), head


@numba.njit(inline="always")
def _line_chars_w(b, w, head, p, e):
    """_line_chars, 8 bytes at a time where they are whole aligned words (w, head: `words(b)`): a word
    without a newline adds its bytes that are not UTF-8 continuation bytes (10xxxxxx) in one step."""
    n = 0
    while p < e and ((p - head) & 7) != 0:
        c = b[p]
        if c == 0x0A:
            return p, n
        if (c & 0xC0) != 0x80:
            n += 1
        p += 1
    while p + 8 <= e:
        x = w[(p - head) >> 3]
        y = x ^ _NEWLINES
        if ((y - _ONES) & ~y & _HIGH) != 0:  # a zero byte of y: a newline in this word
            break
        cont = x & ~(x << np.uint64(1)) & _HIGH  # bit 7 set, bit 6 clear
        n += 8 - np.int64(((cont >> np.uint64(7)) * _ONES) >> np.uint64(56))
        p += 8
    while p < e:
        c = b[p]
        if c == 0x0A:
            break
        if (c & 0xC0) != 0x80:
            n += 1
        p += 1
    return p, n


_LINEAR = 64  # up to this many distinct lines a document's repeats are found by a scan, past it by a sort


@numba.njit(**_JIT)
def doc_line_hashes(o: np.ndarray, b: np.ndarray, w: np.ndarray, head: int, min_chars: int, out: np.ndarray,
                    line_hash: np.ndarray, line_sc: np.ndarray, line_end: np.ndarray, line_nc: np.ndarray, keep: bool):
    """(k, li): out[:k] the distinct hashes of each document's counted lines (documents in order; within one,
    first seen first unless it has more than _LINEAR, then sorted): every counted line once per document; and
    with `keep`, line_*[:li] every line's hash, stripped characters, end (its newline or its document's end,
    from o[0]) and characters in text order (what remove_frequent would compute again). The caller's arrays
    (`work_arrays`: reused from chunk to chunk, only the pages written are taken): `out` holds at least the
    counted lines, line_* (with `keep`) every line. w, head: `words(b)`."""
    base = o[0]
    li = 0
    k = 0
    for d in range(o.shape[0] - 1):
        s, e = o[d], o[d + 1]
        k0 = k
        p = s
        while True:
            q, nc = _line_chars_w(b, w, head, p, e)
            sc = -1
            h = np.uint64(0)
            if nc >= min_chars or keep:  # else no stripped line is long enough
                ls, le = _strip(b, p, q)
                sc = nc - _chars(b, p, ls) - _chars(b, le, q)
                if sc >= min_chars:
                    h = _xxh64(b, ls, le)
                    seen = False
                    if k - k0 <= _LINEAR:
                        for i in range(k0, k):
                            if out[i] == h:
                                seen = True
                                break
                    if not seen:
                        out[k] = h
                        k += 1
            if keep:
                line_hash[li] = h
                line_sc[li] = sc
                line_end[li] = q - base
                line_nc[li] = nc
                li += 1
            if q >= e:
                break
            p = q + 1
        if k - k0 > _LINEAR:  # past the scan's reach: repeats are dropped by a sort
            out[k0:k].sort()
            m = k0 + 1
            for i in range(k0 + 1, k):
                if out[i] != out[m - 1]:
                    out[m] = out[i]
                    m += 1
            k = m
    return k, li


def work_arrays(counted: int, lines: int, index=np.int64) -> tuple[np.ndarray, ...]:
    """Fresh arrays for doc_line_hashes: `out` for `counted` hashes, line_* for `lines` lines, their stripped
    characters, ends and characters as `index` (np.empty: only the pages written are taken)."""
    return (np.empty(counted, np.uint64), np.empty(lines, np.uint64), *(np.empty(lines, index) for _ in range(3)))


@numba.njit(**_JIT)
def runs(h: np.ndarray):
    """(distinct values, how many times each) of sorted `h`: np.unique(h, return_counts=True) without its
    temporaries (two passes, two exact-size arrays)."""
    n = h.shape[0]
    m = 0
    for i in range(n):
        if i == 0 or h[i] != h[i - 1]:
            m += 1
    uniq = np.empty(m, np.uint64)
    counts = np.empty(m, np.int64)
    j = -1
    for i in range(n):
        if i == 0 or h[i] != h[i - 1]:
            j += 1
            uniq[j] = h[i]
            counts[j] = 0
        counts[j] += 1
    return uniq, counts


@numba.njit(inline="always")
def _sift(heap, n, at, key):
    """Restore the min-heap heap[:n] of part indices, ordered by key[part] (the part's current hash), from
    `at` down."""
    x = heap[at]
    kx = key[x]
    while True:
        c = 2 * at + 1
        if c >= n:
            break
        y = heap[c]
        ky = key[y]
        if c + 1 < n:
            z = heap[c + 1]
            if key[z] < ky:
                c, y, ky = c + 1, z, key[z]
        if kx <= ky:
            break
        heap[at] = y
        at = c
    heap[at] = x


@numba.njit(**_JIT)
def merge_counts(h, d, starts):
    """(hashes, summed documents) of sorted parts laid end to end (part i: h[starts[i]:starts[i + 1]], sorted
    and distinct; d its counts): one k-way merge (a heap of the parts' heads), equal hashes summed; no sort."""
    k = starts.shape[0] - 1
    oh = np.empty(h.shape[0], np.uint64)
    od = np.empty(h.shape[0], np.int64)
    pos = starts[:-1].copy()
    key = np.empty(k, np.uint64)
    heap = np.empty(k, np.int64)
    n = 0
    for i in range(k):
        if starts[i + 1] > starts[i]:
            key[i] = h[starts[i]]
            heap[n] = i
            n += 1
    for at in range(n // 2 - 1, -1, -1):
        _sift(heap, n, at, key)
    m = 0
    while n:
        i = heap[0]
        j = pos[i]
        v = key[i]
        if m and oh[m - 1] == v:
            od[m - 1] += d[j]
        else:
            oh[m] = v
            od[m] = d[j]
            m += 1
        j += 1
        pos[i] = j
        if j == starts[i + 1]:
            n -= 1
            heap[0] = heap[n]
        else:
            key[i] = h[j]
        if n:
            _sift(heap, n, 0, key)
    return oh[:m], od[:m]


@numba.njit(inline="always")
def _has(table, has_zero, h):
    """Whether h is in the set `_table` built (open addressing on the hash's low bits; 0 marks an empty slot)."""
    if h == 0:
        return has_zero
    mask = table.shape[0] - 1
    i = np.int64(h & np.uint64(mask))
    while True:
        x = table[i]
        if x == h:
            return True
        if x == 0:
            return False
        i = (i + 1) & mask


@numba.njit(inline="always")
def _table(hashes):
    """(an open-addressed table of `hashes`, whether 0 is one of them): a frequent line costs one probe, not a
    binary search, however many lines are frequent."""
    size = 2
    while size < 2 * hashes.shape[0]:
        size <<= 1
    table = np.zeros(size, np.uint64)
    mask = size - 1
    has_zero = False
    for h in hashes:
        if h == 0:
            has_zero = True
            continue
        i = np.int64(h & np.uint64(mask))
        while table[i] != 0 and table[i] != h:
            i = (i + 1) & mask
        table[i] = h
    return table, has_zero


@numba.njit(**_JIT)
def remove_frequent(o: np.ndarray, b: np.ndarray, min_chars: int, frequent: np.ndarray, line_hash: np.ndarray,
                    line_sc: np.ndarray, line_end: np.ndarray, line_nc: np.ndarray, nb: np.ndarray):
    """Every document without its counted lines whose hash is in `frequent`, kept lines joined by
    `\\n` (a document losing nothing keeps its bytes: its lines joined again are its text), written to nb[:w].
    Returns (offsets, w, removed lines, stripped chars of all lines, stripped chars of the kept lines,
    characters of the new text); the two stripped sums are 0 for a document that lost nothing. One pass: each line is copied while
    its end is sought and its characters counted, and dropped again (the write position rewound) if it goes.
    `line_hash` / `line_sc` / `line_end` / `line_nc`: every line's hash, stripped characters, end and characters
    from doc_line_hashes(keep=True) on the same buffers, or empty arrays (computed here). With them no byte is
    scanned: a document losing nothing is copied whole, a kept line as one slice. `nb`: where the new bytes go
    (at least o[-1] - o[0] of them; the caller's allocation, e.g. from Arrow's pool), or, with the line keys
    only, b[o[0]:] itself: the texts are then rewritten in place (every kept byte moves down or stays)."""
    if line_hash.shape[0] > 0:
        return _remove_known(o, b, min_chars, frequent, line_hash, line_sc, line_end, line_nc, nb)
    n = o.shape[0] - 1
    base = o[0]
    no = np.empty(n + 1, np.int64)
    removed = np.zeros(n, np.int32)
    chars = np.zeros(n, np.int64)
    kept = np.zeros(n, np.int64)
    nchars = np.zeros(n, np.int64)
    w = 0
    no[0] = 0
    search = frequent.shape[0] > 0
    table, has_zero = _table(frequent)
    for d in range(n):
        s, e = o[d], o[d + 1]
        p = s
        first = True
        tot = 0
        kc = 0
        cc = 0
        rm = 0
        while True:
            at = w if first else w + 1  # where the line goes (after its joining newline)
            q = p
            nc = 0
            while q < e:  # the line's end and characters, its bytes copied on the way
                c = b[q]
                if c == 0x0A:
                    break
                nb[at + q - p] = c
                if (c & 0xC0) != 0x80:
                    nc += 1
                q += 1
            ls, le = _strip(b, p, q)
            sc = nc - _chars(b, p, ls) - _chars(b, le, q)
            h = _xxh64(b, ls, le) if search and sc >= min_chars else np.uint64(0)
            tot += sc
            if search and sc >= min_chars and _has(table, has_zero, h):
                rm += 1
            else:
                kc += sc
                if not first:
                    nb[w] = 0x0A
                    cc += 1
                first = False
                w = at + q - p
                cc += nc
            if q >= e:
                break
            p = q + 1
        no[d + 1] = w
        nchars[d] = cc
        if rm:
            removed[d] = rm
            chars[d] = tot
            kept[d] = kc
    return no, w, removed, chars, kept, nchars


_PIECES_FROM = 64  # a move down by fewer bytes than this goes byte by byte, else in pieces of the distance


@numba.njit(inline="always")
def _move(dst, di, src, si, n):
    """dst[di:di + n] = src[si:si + n] where dst may be src's buffer with di's byte at or below si's (the removal
    in place writes each kept byte at or below where it was read): a copy forward in pieces no longer than the
    distance, so no piece reads a byte an earlier one wrote (numba's slice copy would take a temporary copy
    of a source that overlaps its destination)."""
    gap = (src.ctypes.data + si) - (dst.ctypes.data + di)
    if gap == 0 or n <= 0:
        return
    if gap < 0 or gap >= n:
        dst[di:di + n] = src[si:si + n]
    elif gap < _PIECES_FROM:
        for k in range(n):
            dst[di + k] = src[si + k]
    else:
        k = 0
        while k < n:
            m = min(gap, n - k)
            dst[di + k:di + k + m] = src[si + k:si + k + m]
            k += m


@numba.njit(**_JIT)
def _remove_known(o, b, min_chars, frequent, line_hash, line_sc, line_end, line_nc, nb):
    """remove_frequent with every line's key, end and characters known (doc_line_hashes(keep=True))."""
    n = o.shape[0] - 1
    base = o[0]
    no = np.empty(n + 1, np.int64)
    removed = np.zeros(n, np.int32)
    chars = np.zeros(n, np.int64)
    kept = np.zeros(n, np.int64)
    nchars = np.zeros(n, np.int64)
    search = frequent.shape[0] > 0
    table, has_zero = _table(frequent)
    w = 0
    no[0] = 0
    li = 0
    for d in range(n):
        s, e = o[d] - base, o[d + 1] - base
        j = li
        rm = 0
        cc = 0
        while True:  # the document's lines: which go, and its characters
            sc = line_sc[j]
            if search and sc >= min_chars and _has(table, has_zero, line_hash[j]):
                rm += 1
            cc += line_nc[j]
            j += 1
            if line_end[j - 1] >= e:
                break
        if rm == 0:
            _move(nb, w, b, base + s, e - s)
            w += e - s
            nchars[d] = cc + (j - li - 1)  # its characters and newlines
        else:
            p = s
            first = True
            tot = 0
            kc = 0
            cc = 0
            for i in range(li, j):
                q = line_end[i]
                sc = line_sc[i]
                tot += sc
                if not (search and sc >= min_chars and _has(table, has_zero, line_hash[i])):
                    kc += sc
                    if not first:
                        nb[w] = 0x0A
                        w += 1
                        cc += 1
                    first = False
                    _move(nb, w, b, base + p, q - p)
                    w += q - p
                    cc += line_nc[i]
                p = q + 1
            removed[d] = rm
            chars[d] = tot
            kept[d] = kc
            nchars[d] = cc
        no[d + 1] = w
        li = j
    return no, w, removed, chars, kept, nchars
