"""The shared text kernels as first written (core/textkeys.py, stages/dedup/minhash.py, contamination's bitmap
prefilter, the fuzzy advisory's candidate step and exact Jaccard, the registry's n-gram count), kept verbatim: the oracle the faster versions must
match bit for bit (mix_assets_tests/core/test_kernels_identity.py) and the "old" column of bench/kernels.py."""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from numpy.lib.stride_tricks import sliding_window_view

from mix_assets.stages.audit import fuzzy
from mix_assets.stages.audit.contamination import Registry, _Prefix
from mix_assets.stages.audit.fuzzy import CANDIDATE_SHARE, Index
from mix_assets.stages.dedup.minhash import EMPTY, fmix32
from mix_assets.core.textkeys import (_DROP, _KEEP, _P, _PUNCT, _as_array, _code_point_classes, _code_points,
                                      _offsets_bytes, join_words, splitmix64)

CHUNK = 8192


def _stripped(texts: Sequence[str] | pa.Array) -> pa.Array:
    a = pc.utf8_normalize(_as_array(texts), form="NFKC")
    a = pc.utf8_lower(a)
    return pc.replace_substring_regex(a, pattern=_PUNCT, replacement="")


def words(texts: Sequence[str] | pa.Array) -> pa.ListArray:
    """Per text, its list of normalised words (an empty text has no words)."""
    # Splitting and re-joining collapses whitespace far faster than a whitespace regex would.
    a = _stripped(texts)
    a = pc.utf8_trim_whitespace(a)
    return pc.utf8_split_whitespace(pc.if_else(pc.equal(a, ""), pa.scalar(None, a.type), a))


def normalise(texts: Sequence[str] | pa.Array) -> pa.Array:
    """Normalised texts (single spaces between words, no leading/trailing space)."""
    return join_words(words(texts))


def exact_keys(normalised: pa.Array) -> list[str]:
    """sha256 hex of each normalised text (the exact-duplicate key)."""
    return [hashlib.sha256(s.encode("utf-8")).hexdigest() for s in normalised.to_pylist()]


def word_hashes(word_lists: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """(flat uint64 word hashes, int64 offsets of length n_docs + 1)."""
    if isinstance(word_lists, pa.ChunkedArray):
        word_lists = word_lists.combine_chunks()
    offsets = np.asarray(word_lists.offsets, dtype=np.int64)
    offsets = offsets - offsets[0]
    flat = word_lists.flatten()
    if len(flat) == 0:
        return np.zeros(0, dtype=np.uint64), offsets
    enc = pc.dictionary_encode(flat)
    uniq = enc.dictionary.to_pylist()
    table = np.fromiter((xxhash.xxh64_intdigest(w.encode("utf-8")) for w in uniq), np.uint64, len(uniq))
    idx = np.asarray(enc.indices, dtype=np.int64)
    return table[idx], offsets


def ngram_hashes(
    hashes: np.ndarray, offsets: np.ndarray, n: int, short: str = "whole"
) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every word n-gram inside each document.

    A document with fewer than `n` words (but at least one) yields one n-gram over all its words
    when `short == "whole"` (the documented rule for short items and short documents), none when
    `short == "drop"`. Empty documents yield none. Returns (flat uint64, offsets of n_docs + 1).
    """
    if short not in ("whole", "drop"):
        raise ValueError(f"short must be 'whole' or 'drop', got {short!r}")
    lens = np.diff(offsets)
    total = len(hashes)
    full_counts = np.maximum(lens - n + 1, 0)
    out_counts = full_counts.copy()
    short_docs = (lens > 0) & (lens < n)
    if short == "whole":
        out_counts[short_docs] = 1
    out_offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(out_counts, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), dtype=np.uint64)

    with np.errstate(over="ignore"):
        if total >= n and full_counts.sum():
            m = total - n + 1
            acc = hashes[:m].copy()
            for j in range(1, n):
                acc = acc * _P + hashes[j : j + m]
            acc = splitmix64(acc ^ np.uint64(n))
            doc_of = np.repeat(np.arange(len(lens)), lens)[:m]
            valid = np.arange(m) + n <= offsets[1:][doc_of]
            full_vals = acc[valid]
            # Full n-grams go to the front of each document's slot, in position order.
            dest = np.repeat(out_offsets[:-1], full_counts) + (
                np.arange(full_vals.size) - np.repeat(np.cumsum(full_counts) - full_counts, full_counts)
            )
            out[dest] = full_vals
        if short == "whole" and short_docs.any():
            # One n-gram over all words: sum of h[j] * P**(L-1-j), the same polynomial as above.
            sd = np.flatnonzero(short_docs)
            pos_doc = np.repeat(sd, lens[sd])
            pos = np.concatenate([np.arange(offsets[d], offsets[d + 1]) for d in sd])
            powers = np.ones(n, dtype=np.uint64)
            for k in range(1, n):
                powers[k] = powers[k - 1] * _P
            terms = hashes[pos] * powers[offsets[1:][pos_doc] - 1 - pos]
            starts = np.concatenate([[0], np.cumsum(lens[sd])[:-1]])
            acc1 = np.add.reduceat(terms, starts)
            out[out_offsets[sd]] = splitmix64(acc1 ^ lens[sd].astype(np.uint64))
    return out, out_offsets


def signatures_from_hashes(
    h32: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray, chunk: int = CHUNK
) -> np.ndarray:
    """Signatures (n_docs x num_perm, uint32) of documents given as flat 32-bit shingle hashes.

    `offsets` (n_docs + 1) delimits each document's shingles. The flat array is cut into fixed
    chunks regardless of document boundaries; per chunk one (num_perm x chunk) affine map and one
    `minimum.reduceat` over the document segments, folded into the documents' running minima.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n_docs = len(offsets) - 1
    num_perm = len(a)
    out = np.full((n_docs, num_perm), EMPTY, dtype=np.uint32)
    total = int(offsets[-1]) if n_docs else 0
    if total == 0:
        return out
    x = fmix32(h32[:total])
    a_col, b_col = a.astype(np.uint32)[:, None], b.astype(np.uint32)[:, None]
    work = np.empty((num_perm, min(chunk, total)), dtype=np.uint32)
    inner = offsets[1:-1]
    for s in range(0, total, chunk):
        e = min(s + chunk, total)
        m = work[:, : e - s]
        np.multiply(a_col, x[None, s:e], out=m)
        np.add(m, b_col, out=m)
        # Segment starts inside this chunk: the chunk start plus every document start within it.
        starts = np.unique(np.concatenate(([s], inner[(inner > s) & (inner < e)])))
        docs = np.searchsorted(offsets, starts, side="right") - 1
        red = np.minimum.reduceat(m, starts - s, axis=1)  # (num_perm, n_segments)
        out[docs] = np.minimum(out[docs], red.T)
    return out


def shingle_sets(texts: Sequence[str] | pa.Array, n: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Per text its set of n-word shingles as distinct 64-bit hashes (sorted) and offsets (len(texts) + 1).

    The full 64-bit `ngram_hashes` values (signatures use their low 32 bits), short documents
    one shingle, no words none: the sets exact verification and the split gate compare.
    """
    h, off = word_hashes(words(texts))
    g, goff = ngram_hashes(h, off, n, short="whole")
    doc = np.repeat(np.arange(len(texts), dtype=np.int64), np.diff(goff))
    order = np.lexsort((g, doc))
    g, doc = g[order], doc[order]
    keep = np.ones(len(g), bool)
    keep[1:] = (g[1:] != g[:-1]) | (doc[1:] != doc[:-1])
    g, doc = g[keep], doc[keep]
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(np.bincount(doc, minlength=len(texts)), out=offsets[1:])
    return g, offsets


class _Bitmap:
    """A one-hash Bloom prefilter over sorted keys (about 32 bits per key, ~3 % false hits), so
    that `searchsorted` runs only on the few windows that may be in the registry."""

    def __init__(self, keys: np.ndarray):
        k = max(16, int(np.ceil(np.log2(max(keys.size, 1)))) + 5)
        self.shift = np.uint64(64 - k)
        self.bits = np.zeros(1 << (k - 3), np.uint8)
        b = keys >> self.shift
        np.bitwise_or.at(self.bits, b >> np.uint64(3), (1 << (b & np.uint64(7))).astype(np.uint8))

    def candidates(self, v: np.ndarray) -> np.ndarray:
        b = v >> self.shift
        got = self.bits[b >> np.uint64(3)] >> (b & np.uint64(7)).astype(np.uint8)
        return np.flatnonzero(got & 1)

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes)


def candidates(index: Index, sh: np.ndarray, soff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shingle position, item) of each (document, item) whose best window holds >= CANDIDATE_SHARE of
    the item's permutations' argmin shingles."""
    if not sh.size or not index.rep_keys.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cand = index.bitmap.candidates(sh)
    idx = np.minimum(np.searchsorted(index.rep_keys, sh[cand]), index.rep_keys.size - 1)
    hit = index.rep_keys[idx] == sh[cand]
    pos, r = cand[hit], idx[hit]
    n = index.post_off[r + 1] - index.post_off[r]
    doc_end = np.repeat(soff[1:][np.searchsorted(soff, pos, side="right") - 1], n)  # per hit, then per posting
    pos = np.repeat(pos, n)
    at = np.repeat(index.post_off[r] - np.cumsum(n) + n, n) + np.arange(n.sum())
    item, weight = index.post_item[at].astype(np.int64), index.post_weight[at].astype(np.int64)
    span = np.int64(len(sh) + 1)
    key = item * span + pos
    order = np.argsort(key)  # keys are distinct (a shingle's postings name an item once): any sort is stable
    key, pos, item, weight, doc_end = key[order], pos[order], item[order], weight[order], doc_end[order]
    csum = np.concatenate([[0], np.cumsum(weight)])
    m = np.diff(index.item_off)[item]
    end = np.searchsorted(key, item * span + np.minimum(pos + m, doc_end))
    count = csum[end] - csum[np.arange(len(key))]
    ok = count >= np.ceil(CANDIDATE_SHARE * index.params.num_perm)
    pos, item, count = pos[ok], item[ok], count[ok]
    # one candidate per (document, item): its best window start
    doc = np.searchsorted(soff, pos, side="right") - 1
    order = np.lexsort((-count, doc, item))
    pos, item, doc = pos[order], item[order], doc[order]
    first = np.ones(len(pos), bool)
    first[1:] = (item[1:] != item[:-1]) | (doc[1:] != doc[:-1])
    return pos[first], item[first]


def best_jaccard(index: Index, sh: np.ndarray, soff: np.ndarray, pos: int, item: int) -> float:
    """Exact Jaccard of the item's shingles with its best equal-length window of the document near `pos`."""
    s = index.item_sh[index.item_off[item]:index.item_off[item + 1]]
    m = len(s)
    d = int(np.searchsorted(soff, pos, side="right") - 1)
    lo, hi = max(int(soff[d]), pos - m), min(int(soff[d + 1]), pos + 2 * m)
    region = sh[lo:hi]
    w = min(m, len(region))
    win = np.sort(sliding_window_view(region, w), axis=1)
    distinct = np.ones(win.shape, bool)
    distinct[:, 1:] = win[:, 1:] != win[:, :-1]
    found = s[np.minimum(np.searchsorted(s, win), m - 1)] == win
    inter = (distinct & found).sum(axis=1)
    union = m + distinct.sum(axis=1) - inter
    return float((inter / union).max())


def registry_scan(self: Registry, h: np.ndarray, off: np.ndarray) -> np.ndarray:
    """`Registry.scan_word_hashes`: int64 (n_docs, n_tasks) overlapping n-gram windows per document and task."""
    n_docs = len(off) - 1
    counts = np.zeros((n_docs, len(self.tasks)), np.int64)
    if len(h) == 0 or self.keys.size + self.short_first.size == 0:
        return counts
    pre = _Prefix(h, off)
    docs, members = [], []
    if self.keys.size:
        v = pre.all_windows(self.n)
        cand = self.bitmap.candidates(v)
        idx = np.minimum(np.searchsorted(self.keys, v[cand]), self.keys.size - 1)
        hit = self.keys[idx] == v[cand]
        start, idx = cand[hit], idx[hit]
        ok = pre.inside(start, self.n)
        docs.append(pre.doc_of[start[ok]])
        members.append(self.member[idx[ok]])
    if self.short_first.size:
        v = pre.all_windows(self.short_min)
        cand = self.short_bitmap.candidates(v)
        lo = np.searchsorted(self.short_first, v[cand], side="left")
        hi = np.searchsorted(self.short_first, v[cand], side="right")
        some = np.flatnonzero(hi > lo)
        start, reps, lo = cand[some], (hi - lo)[some], lo[some]
        pos = np.repeat(start, reps)
        entry = np.repeat(lo - np.cumsum(reps) + reps, reps) + np.arange(reps.sum())
        length = self.short_len[entry]
        fits = pre.inside(pos, length) if pos.size else np.zeros(0, bool)
        pos, entry, length = pos[fits], entry[fits], length[fits]
        same = pre.at(pos, length) == self.short_whole[entry]
        docs.append(pre.doc_of[pos[same]])
        members.append(self.short_member[entry[same]])
    d = np.concatenate(docs)
    if d.size:
        m = np.concatenate(members)
        for t in range(len(self.tasks)):
            counts[:, t] = np.bincount(d[m[:, t]], minlength=n_docs)
    return counts


# minhash.signatures_from_hashes before the compiled kernel (stop 22), verbatim.
BLOCK = 1 << 17


def signatures_from_hashes_blocked(
    h32: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray, chunk: int = CHUNK
) -> np.ndarray:
    """Signatures (n_docs x num_perm, uint32) of documents given as flat 32-bit shingle hashes.

    `offsets` (n_docs + 1) delimits each document's shingles. The flat array is cut into blocks of
    max(chunk, BLOCK) shingles regardless of document boundaries; per block and permutation one
    affine map and one `minimum.reduceat` over the document segments, on a 1-D vector that stays in
    cache, folded into the documents' running minima.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n_docs = len(offsets) - 1
    num_perm = len(a)
    out = np.full((n_docs, num_perm), EMPTY, dtype=np.uint32)
    total = int(offsets[-1]) if n_docs else 0
    if total == 0:
        return out
    x = fmix32(h32[:total])
    a, b = a.astype(np.uint32), b.astype(np.uint32)
    block = max(chunk, BLOCK)
    work = np.empty(min(block, total), dtype=np.uint32)
    inner = offsets[1:-1]
    for s in range(0, total, block):
        e = min(s + block, total)
        # Segment starts inside this block: the block start plus every document start within it.
        starts = np.unique(np.concatenate(([s], inner[(inner > s) & (inner < e)])))
        docs = np.searchsorted(offsets, starts, side="right") - 1
        red = np.empty((num_perm, len(starts)), np.uint32)
        m = work[: e - s]
        for k in range(num_perm):
            np.multiply(x[s:e], a[k], out=m)
            m += b[k]
            np.minimum.reduceat(m, starts - s, out=red[k])
        out[docs] = np.minimum(out[docs], red.T)
    return out


# textkeys.word_hashes before the compiled kernel (stop 22), verbatim: each distinct word hashed once,
# short words by the vectorised XXH64 below.
def word_hashes_dictionary(word_lists: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """(flat uint64 word hashes, int64 offsets of length n_docs + 1)."""
    if isinstance(word_lists, pa.ChunkedArray):
        word_lists = word_lists.combine_chunks()
    offsets = np.asarray(word_lists.offsets, dtype=np.int64)
    offsets = offsets - offsets[0]
    flat = word_lists.flatten()
    if len(flat) == 0:
        return np.zeros(0, dtype=np.uint64), offsets
    enc = pc.dictionary_encode(flat)
    table = _xxh64(enc.dictionary)
    idx = np.asarray(enc.indices, dtype=np.int64)
    return table[idx], offsets


_X1, _X2, _X3 = np.uint64(0x9E3779B185EBCA87), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)
_X4, _X5 = np.uint64(0x85EBCA77C2B2AE63), np.uint64(0x27D4EB2F165667C5)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _xxh64(strings: pa.Array) -> np.ndarray:
    """xxh64 (seed 0) of each string's UTF-8 bytes, as `word_hash`: XXH64's short-input path (under
    32 bytes: 8-byte lanes, one 4-byte lane, single bytes, the avalanche) vectorised over all the
    strings; longer strings through the xxhash package."""
    n = len(strings)
    o = np.frombuffer(strings.buffers()[1], np.int64, n + 1, strings.offset * 8)
    nb = int(o[-1] - o[0])
    pad = np.zeros(nb + 8, np.uint8)
    if nb:
        pad[:nb] = np.frombuffer(strings.buffers()[2], np.uint8, nb, int(o[0]))
    lanes8 = np.ndarray((nb + 1,), "<u8", pad, 0, (1,))  # little-endian words at every byte offset
    lanes4 = np.ndarray((nb + 5,), "<u4", pad, 0, (1,))
    pos, size = o[:-1] - o[0], np.diff(o)
    left = size.copy()
    with np.errstate(over="ignore"):
        h = size.astype(np.uint64) + _X5
        i = np.flatnonzero((left >= 8) & (size < 32))
        while i.size:
            k = lanes8[pos[i]] * _X2
            k = _rotl(k, 31) * _X1
            h[i] = _rotl(h[i] ^ k, 27) * _X1 + _X4
            pos[i] += 8
            left[i] -= 8
            i = i[left[i] >= 8]
        i = np.flatnonzero((left >= 4) & (size < 32))
        h[i] = _rotl(h[i] ^ (lanes4[pos[i]].astype(np.uint64) * _X1), 23) * _X2 + _X3
        pos[i] += 4
        left[i] -= 4
        i = np.flatnonzero((left >= 1) & (size < 32))
        while i.size:
            h[i] = _rotl(h[i] ^ (pad[pos[i]].astype(np.uint64) * _X5), 11) * _X1
            pos[i] += 1
            left[i] -= 1
            i = i[left[i] >= 1]
        h ^= h >> np.uint64(33)
        h *= _X2
        h ^= h >> np.uint64(29)
        h *= _X3
        h ^= h >> np.uint64(32)
    for j in np.flatnonzero(size >= 32).tolist():
        h[j] = xxhash.xxh64_intdigest(pad[o[j] - o[0] : o[j + 1] - o[0]].tobytes())
    return h


# contamination's bitmap candidates and Registry.scan_word_hashes before the compiled kernels (stop 22),
# verbatim (as functions of the bitmap / registry).
def bitmap_candidates_numpy(self, v: np.ndarray) -> np.ndarray:
    at = v >> self.shift  # each value's bit: the byte at >> 3, bit at & 7
    bit = at.astype(np.uint8)
    bit &= np.uint8(7)
    at >>= np.uint64(3)
    got = np.take(self.bits, at.view(np.intp))  # (< 2**61: the view is the value)
    np.right_shift(got, bit, out=got)
    got &= np.uint8(1)
    return np.flatnonzero(got.view(bool))


def bitmap_lookup_numpy(self, keys: np.ndarray, v: np.ndarray, by_key: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(positions in `v` of the values in `keys`, their indices in `keys`), in position order, or
    with `by_key` in key order; `keys`: the non-empty sorted keys the bitmap was built from. Looked
    up in ascending order: searchsorted then walks the keys once instead of missing the cache at
    random."""
    cand = bitmap_candidates_numpy(self, v)
    w = v[cand]
    by = np.argsort(w)
    if by_key:
        cand, w = cand[by], w[by]
        idx = np.searchsorted(keys, w)
    else:
        idx = np.empty(len(w), np.int64)
        idx[by] = np.searchsorted(keys, w[by])
    np.minimum(idx, keys.size - 1, out=idx)
    hit = keys[idx] == w
    return cand[hit], idx[hit]


def registry_scan_prefix(self: Registry, h: np.ndarray, off: np.ndarray) -> np.ndarray:
    """int64 (n_docs, n_tasks): overlapping n-gram windows per document and task."""
    n_docs = len(off) - 1
    counts = np.zeros((n_docs, len(self.tasks)), np.int64)
    if len(h) == 0 or self.keys.size + self.short_first.size == 0:
        return counts
    pre = _Prefix(h, off)
    docs, members = [], []
    if self.keys.size:
        v = pre.all_windows(self.n)
        start, idx = bitmap_lookup_numpy(self.bitmap, self.keys, v)
        ok = pre.inside(start, self.n)
        docs.append(pre.docs(start[ok]))
        members.append(self.member[idx[ok]])
    if self.short_first.size:
        # A short item matches where its first `short_min` words match and then its whole
        # window does; all short items sharing those first words are tried.
        v = pre.all_windows(self.short_min)
        cand = bitmap_candidates_numpy(self.short_bitmap, v)
        lo = np.searchsorted(self.short_first, v[cand], side="left")
        hi = np.searchsorted(self.short_first, v[cand], side="right")
        some = np.flatnonzero(hi > lo)
        start, reps, lo = cand[some], (hi - lo)[some], lo[some]
        pos = np.repeat(start, reps)
        entry = np.repeat(lo - np.cumsum(reps) + reps, reps) + np.arange(reps.sum())
        length = self.short_len[entry]
        fits = pre.inside(pos, length) if pos.size else np.zeros(0, bool)
        pos, entry, length = pos[fits], entry[fits], length[fits]
        same = pre.at(pos, length) == self.short_whole[entry]
        docs.append(pre.docs(pos[same]))
        members.append(self.short_member[entry[same]])
    d = np.concatenate(docs)
    if d.size:
        m = np.concatenate(members)
        for t in range(len(self.tasks)):
            counts[:, t] = np.bincount(d[m[:, t]], minlength=n_docs)
    return counts


# fuzzy._heavy_buckets before the compiled kernel (stop 22), verbatim.
def _heavy_buckets(item_hash: np.ndarray, doc_hash: np.ndarray, weight: np.ndarray, need: float) -> np.ndarray:
    """Indices of the postings that may be in an (item, document) pair of weight >= `need`, from the
    postings' item and document hashes: the weights summed per bucket of pairs (top bits of the two
    hashes' sum) bound each pair's own sum, so a posting in a light bucket is in a light pair. On prose
    about 1 posting in 700 is in a heavy pair and a few in 100 in a heavy bucket: only those are sorted.
    `doc_hash` is overwritten (the work array)."""
    bits = min(22, max(10, len(weight).bit_length()))
    with np.errstate(over="ignore"):
        bucket = np.add(item_hash, doc_hash, out=doc_hash)
    bucket >>= np.uint64(64 - bits)
    bucket = bucket.view(np.intp)
    return np.flatnonzero(np.bincount(bucket, weights=weight, minlength=1 << bits)[bucket] >= need)


# textkeys.ngram_hashes before the compiled kernel (stop 22), verbatim (its window_polynomials too).
def ngram_hashes_doubling(
    hashes: np.ndarray, offsets: np.ndarray, n: int, short: str = "whole"
) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every word n-gram inside each document.

    A document with fewer than `n` words (but at least one) yields one n-gram over all its words
    when `short == "whole"` (the documented rule for short items and short documents), none when
    `short == "drop"`. Empty documents yield none. Returns (flat uint64, offsets of n_docs + 1).
    """
    if short not in ("whole", "drop"):
        raise ValueError(f"short must be 'whole' or 'drop', got {short!r}")
    lens = np.diff(offsets)
    total = len(hashes)
    full_counts = np.maximum(lens - n + 1, 0)
    out_counts = full_counts.copy()
    short_docs = (lens > 0) & (lens < n)
    if short == "whole":
        out_counts[short_docs] = 1
    out_offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(out_counts, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), dtype=np.uint64)

    with np.errstate(over="ignore"):
        if total >= n and full_counts.sum():
            acc = window_polynomials(hashes, n)
            acc ^= np.uint64(n)
            splitmix64(acc, copy=False)
            # A window starting at one of a document's last n-1 words runs past its end.
            valid = np.ones(len(acc), bool)
            for k in range(1, n):
                start = offsets[1:] - k
                valid[start[(start >= offsets[:-1]) & (start < len(acc))]] = False
            full_vals = acc[valid]
            if short == "whole" and short_docs.any():
                # Full n-grams fill each document's slots in position order; a short document has one slot.
                slot = np.ones(len(out), bool)
                slot[out_offsets[:-1][short_docs]] = False
                out[slot] = full_vals
            else:
                out = full_vals
        if short == "whole" and short_docs.any():
            # One n-gram over all words: sum of h[j] * P**(L-1-j), the same polynomial as above.
            sd = np.flatnonzero(short_docs)
            pos_doc = np.repeat(sd, lens[sd])
            starts = np.concatenate([[0], np.cumsum(lens[sd])[:-1]])
            pos = np.repeat(offsets[sd] - starts, lens[sd]) + np.arange(len(pos_doc))
            powers = np.ones(n, dtype=np.uint64)
            for k in range(1, n):
                powers[k] = powers[k - 1] * _P
            terms = hashes[pos] * powers[offsets[1:][pos_doc] - 1 - pos]
            acc1 = np.add.reduceat(terms, starts)
            out[out_offsets[sd]] = splitmix64(acc1 ^ lens[sd].astype(np.uint64))
    return out, out_offsets


def window_polynomials(hashes: np.ndarray, n: int) -> np.ndarray:
    """sum_j hashes[i + j] * P**(n-1-j) mod 2**64 for every start i <= len - n, by doubling:
    windows of 1, 2, 4, 8... words (W_2a[i] = W_a[i] * P**a + W_a[i + a]), then joined along the
    bits of n, so about 2 log2(n) vector passes instead of 2 n."""
    pw = {1: hashes}
    size = 1
    with np.errstate(over="ignore"):
        while 2 * size <= n:
            w = pw[size]
            nxt = np.multiply(w[:-size], _P ** np.uint64(size))
            nxt += w[size:]
            size *= 2
            pw[size] = nxt
        acc, have = pw[size], size
        if have == n:
            return acc.copy() if acc is hashes else acc
        for part in sorted(pw, reverse=True):
            if have + part <= n:
                m = len(hashes) - have - part + 1
                acc = np.multiply(acc[:m], _P ** np.uint64(part))
                acc += pw[part][have : have + m]
                have += part
    return acc


# textkeys._split and its helpers before the compiled kernel (stop 22), verbatim.
_U8 = np.uint8
_WALK = 8  # steps back over deleted bytes before the general run lookup


def split_numpy(a: pa.Array, ascii_only: bool) -> pa.ListArray:
    """`words` of texts already NFKC-normalised and lower-cased where not ASCII, from their bytes.

    On ASCII, NFKC is the identity and lower-casing is A-Z -> a-z; `_PUNCT` keeps [a-z0-9] and
    RE2's \\s = [\\t\\n\\f\\r ] and deletes the rest (\\v and \\x1c-\\x1f included, unlike Python's
    str.split); other code points are classed by `_code_point_classes`. Words are the whitespace-
    separated tokens with their deleted characters removed, tokens left empty dropped. A text
    without words is a null list, as in the Arrow pipeline this replaces.
    """
    n = len(a)
    if n == 0:
        return pa.array([], pa.list_(pa.large_string()))
    o, b = _offsets_bytes(pc.ascii_lower(a))
    nb = len(b)
    t, m = np.empty(nb, np.uint8), np.empty(nb, bool)
    keep = np.less(np.subtract(b, _U8(97), out=t), _U8(26))  # a-z
    keep |= np.less(np.subtract(b, _U8(48), out=t), _U8(10), out=m)  # 0-9
    drop = np.less(np.subtract(b, _U8(9), out=t), _U8(5))  # 9-13 ...
    drop &= np.not_equal(t, _U8(2), out=m)  # ... but 11 (vertical tab), not whitespace to RE2
    drop |= np.equal(b, _U8(32), out=m)
    drop |= keep
    np.logical_not(drop, out=drop)  # deleted: neither kept nor whitespace
    if not ascii_only:
        _class_non_ascii(b, keep, drop)
    doc = np.zeros(nb + 1, bool)
    doc[o] = True  # words never cross documents
    # A word starts at its token's first kept byte: a kept byte after whitespace or a document
    # start, or after deleted bytes that follow one ("'tis" -> "tis", but not the t of "don't").
    first = np.empty(nb, bool)
    first[:1] = True
    np.logical_not(keep[:-1], out=first[1:])
    first |= doc[:-1]
    first &= keep
    p = np.flatnonzero(np.logical_and(drop[:-1], keep[1:], out=m[1:])) + 1
    p = p[~doc[p]]
    first[p[_inside_token(p, keep, drop, doc)]] = False
    if ascii_only:  # one filter moves each kept byte with its word-start flag (in bit 7)
        both = np.left_shift(first.view(np.uint8), _U8(7), out=t)
        both |= b
        kept = np.compress(keep, both)
        soff = np.flatnonzero(np.greater_equal(kept, _U8(0x80)))
        kept &= _U8(0x7F)
    else:  # (in the high byte)
        both = first.astype(np.uint16)
        both <<= 8
        both |= b
        kept = np.compress(keep, both)
        soff = np.flatnonzero(np.greater(kept, np.uint16(0xFF)))
        kept = kept.astype(np.uint8)
    soff = np.append(soff, len(kept))
    loff = np.searchsorted(soff[:-1], _bits_before(o, keep)).astype(np.int32)
    has = loff[1:] > loff[:-1]
    nulls = n - int(np.count_nonzero(has))
    valid = pa.py_buffer(np.packbits(has, bitorder="little")) if nulls else None
    strings = pa.LargeStringArray.from_buffers(len(soff) - 1, pa.py_buffer(soff), pa.py_buffer(kept))
    return pa.Array.from_buffers(pa.list_(pa.large_string()), n, [valid, pa.py_buffer(loff)],
                                 null_count=nulls, children=[strings])


def _class_non_ascii(b: np.ndarray, keep: np.ndarray, drop: np.ndarray) -> None:
    """Mark the bytes of each (valid UTF-8) non-ASCII character as kept, deleted or whitespace."""
    lead, size, cp = _code_points(b)
    if not lead.size:
        return
    cls = _code_point_classes(cp)
    high = b >= _U8(0x80)
    keep |= high
    drop &= ~high
    odd = cls != _KEEP
    for k in range(4):
        sel = odd & (size > k)
        at = lead[sel] + k
        keep[at] = False
        drop[at] = cls[sel] == _DROP


def _inside_token(p: np.ndarray, keep: np.ndarray, drop: np.ndarray, doc: np.ndarray) -> np.ndarray:
    """For kept bytes `p` that follow deleted bytes (not at a document start): whether a kept byte
    precedes those deleted bytes in the same token."""
    out = np.zeros(len(p), bool)
    cur, idx = p - 1, np.arange(len(p))
    for _ in range(_WALK):  # runs of deleted bytes are short: step back over them
        back = ~doc[cur] & drop[cur - 1]  # (cur >= 1: doc[0] is set)
        out[idx[~back]] = ~doc[cur[~back]] & keep[cur[~back] - 1]
        cur, idx = cur[back] - 1, idx[back]
        if not len(idx):
            return out
    run_start = np.flatnonzero(drop & (doc[:-1] | ~np.concatenate(([False], drop[:-1]))))
    rs = run_start[np.searchsorted(run_start, cur, side="right") - 1]
    out[idx] = ~doc[rs] & keep[rs - 1]
    return out


def _bits_before(pos: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """For each position, how many set entries of `mask` precede it (pos <= len(mask))."""
    packed = np.zeros(-(-(len(mask) + 1) // 64) * 8, np.uint8)
    packed[: -(-len(mask) // 8)] = np.packbits(mask, bitorder="little")
    words64 = packed.view(np.uint64)
    ones = np.zeros(len(words64) + 1, np.int64)
    np.cumsum(np.bitwise_count(words64), out=ones[1:])
    q, r = pos >> 6, (pos & 63).astype(np.uint64)
    return ones[q] + np.bitwise_count(words64[q] & ((np.uint64(1) << r) - np.uint64(1))).astype(np.int64)



# fuzzy.candidates' posting expansion and heavy-bucket filter as of stop 22 (every posting of every
# hit expanded into per-posting arrays, then the buckets); stop 23 made it one compiled pass.
def heavy_postings_expanded(index, pos: np.ndarray, r: np.ndarray, soff: np.ndarray,
                            need: float) -> tuple[np.ndarray, np.ndarray]:
    """fuzzy._heavy_postings' (posting, shingle position) pairs."""
    n = index.post_off[r + 1] - index.post_off[r]
    owner = fuzzy._owners(n)
    at = (index.post_off[r] - np.cumsum(n) + n)[owner] + np.arange(owner.size)
    doc_of = fuzzy._owners(np.diff(soff))  # each position's document
    with np.errstate(over="ignore"):
        doc_hash = (doc_of[pos].astype(np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    heavy = _heavy_buckets(index.post_hash[at], doc_hash[owner], index.post_weight[at], need)
    return at[heavy], pos[owner[heavy]]


def word_keys(texts: Sequence[str] | pa.Array):
    """textkeys.word_keys before its one compiled pass (stop 23): words, then their hashes, then the join."""
    from mix_assets.core import textkeys as tk

    wl = words(texts)
    h, off = word_hashes(wl)
    o, b = tk._offsets_bytes(tk.join_words(wl).cast(pa.large_string()))
    return tk.WordKeys(h, off, b, o, tk._as_array(texts))
