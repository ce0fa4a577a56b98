"""Normalisation for matching, done once and natively for dedup and audit alike.

normalise = NFKC, lowercase, delete punctuation and symbols, collapse whitespace; words are the
whitespace-separated pieces. Everything runs in Arrow's C++ string kernels; Python touches only the
distinct words of a batch (to hash them), never each word or n-gram.

Hashes are stable across library versions (xxh64 of the UTF-8 word; n-grams combine word hashes
with a fixed polynomial mod 2**64 and a splitmix64 finaliser), so keys published with a mix can be
recomputed by anyone.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

# Letters, digits and combining marks survive; everything else that is not whitespace is deleted
# ("don't" -> "dont", "well-known" -> "wellknown"), matching the lm-eval decontamination convention.
_PUNCT = r"[^\p{L}\p{N}\p{M}\p{Z}\s]+"
_P = np.uint64(0x100000001B3)  # FNV-64 prime, the rolling-hash base
_MASK = (1 << 64) - 1


def _as_array(texts: Sequence[str] | pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if not isinstance(texts, pa.Array):
        texts = pa.array(texts, type=pa.large_string())
    if not pa.types.is_large_string(texts.type):
        texts = texts.cast(pa.large_string())
    return texts.fill_null("")


def text_array(texts: Sequence[str] | pa.Array | pa.ChunkedArray, what: str) -> pa.Array:
    """`texts` as one string Array with no nulls; `what` names the caller in the error."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if not isinstance(texts, pa.Array):
        try:
            texts = pa.array(texts, type=pa.large_string())
        except (UnicodeEncodeError, pa.ArrowException) as e:
            row = next((i for i, t in enumerate(texts) if not _encodes(t)), None)
            raise ValueError(f"{what}: text at row {row} is not valid text ({e})") from e
    arr = texts
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        raise TypeError(f"{what}: texts must be strings, got {arr.type}")
    if arr.null_count:
        raise ValueError(f"{what}: text at row {pc.index(pc.is_null(arr), True).as_py()} is null")
    return arr


def _encodes(t) -> bool:
    if t is None or not isinstance(t, str):
        return t is None
    try:
        t.encode("utf-8")
        return True
    except UnicodeEncodeError:  # a lone surrogate, e.g. from errors="surrogateescape"
        return False


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


def join_words(word_lists: pa.ListArray) -> pa.Array:
    """Normalised texts from word lists: words joined by single spaces."""
    return pc.binary_join(word_lists, pa.scalar(" ", pa.large_string())).fill_null("")


def normalise(texts: Sequence[str] | pa.Array) -> pa.Array:
    """Normalised texts (single spaces between words, no leading/trailing space)."""
    return join_words(words(texts))


def exact_keys(normalised: pa.Array) -> list[str]:
    """sha256 hex of each normalised text (the exact-duplicate key)."""
    return [hashlib.sha256(s.encode("utf-8")).hexdigest() for s in normalised.to_pylist()]


def splitmix64(x: np.ndarray, copy: bool = True) -> np.ndarray:
    """The splitmix64 finaliser on a uint64 array (in place when copy is False)."""
    if copy:
        x = x.copy()
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def word_hash(word: str) -> int:
    """The hash of one normalised word (for tests and references)."""
    return xxhash.xxh64_intdigest(word.encode("utf-8"))


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


def ngram_hash_reference(ws: Sequence[str], n: int) -> list[int]:
    """Pure-Python reference of `ngram_hashes` for one document's words (tests only)."""
    h = [word_hash(w) for w in ws]

    def mix(x: int) -> int:
        x ^= x >> 30
        x = (x * 0xBF58476D1CE4E5B9) & _MASK
        x ^= x >> 27
        x = (x * 0x94D049BB133111EB) & _MASK
        return x ^ (x >> 31)

    def comb(seq: Iterable[int], length: int) -> int:
        acc = 0
        for v in seq:
            acc = (acc * int(_P) + v) & _MASK
        return mix(acc ^ length)

    if not h:
        return []
    if len(h) < n:
        return [comb(h, len(h))]
    return [comb(h[i : i + n], n) for i in range(len(h) - n + 1)]
