"""Normalisation for matching, done once and natively for dedup and audit alike.

normalise = NFKC, lowercase, delete punctuation and symbols, collapse whitespace; words are the
whitespace-separated pieces. The rule is defined by Arrow's kernels (utf8_normalize, utf8_lower, the
`_PUNCT` regex, utf8_split_whitespace); `words` computes the same thing faster: Arrow's lower-casing
only on non-ASCII texts and NFKC only where it can change them, then one compiled pass over the
bytes (core/kernels_jit.py) that classes ASCII bytes by fixed rules and other code points by asking
those Arrow kernels once per code point (mix_assets_tests/core/test_kernels_identity.py holds it to
the Arrow pipeline on every code point). Word and n-gram hashing are compiled passes too, never a
Python loop over words; the full-text scans take `word_keys`, which splits, hashes each word and
joins the normalised text in that one pass, without an Arrow string per word.

Hashes are stable across library versions (xxh64 of the UTF-8 word; n-grams combine word hashes
with a fixed polynomial mod 2**64 and a splitmix64 finaliser), so keys published with a mix can be
recomputed by anyone.
"""

from __future__ import annotations

import hashlib
import threading
import unicodedata
from dataclasses import dataclass
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
    return _split(*_prepared(texts))


def _prepared(texts: Sequence[str] | pa.Array) -> tuple[pa.Array, bool]:
    """(the texts NFKC-normalised and lower-cased where not ASCII, whether all are ASCII)."""
    a = _as_array(texts)
    ascii_rows = pc.string_is_ascii(a)
    if ascii_rows.false_count:  # NFKC and lower-casing by Arrow where they can change anything
        other = pc.invert(ascii_rows)
        u = a.filter(other)
        nfkc = pa.array(_may_change_under_nfkc(u))
        if nfkc.true_count:
            u = pc.replace_with_mask(u, nfkc, pc.utf8_normalize(u.filter(nfkc), form="NFKC"))
        a = pc.replace_with_mask(a, other, pc.utf8_lower(u))
    return a, not ascii_rows.false_count


@dataclass
class WordKeys:
    """A batch's normalised words as the scans use them, without a Python or Arrow string per word."""

    hashes: np.ndarray  # uint64 `word_hash` of every word, in order
    offsets: np.ndarray  # int64 (n_texts + 1): each text's words
    text: np.ndarray  # uint8: each text's `normalise`d bytes (its words joined by single spaces), in order
    text_offsets: np.ndarray  # int64 (n_texts + 1): each text's normalised bytes
    raw: pa.Array | None = None  # the texts as given (large_string, null as ""), for `dedup_keys`

    def exact_keys(self) -> list[str]:
        """`exact_keys(normalise(texts))`."""
        return _sha256_slices(self.text_offsets, self.text)

    def dedup_keys(self) -> list[str]:
        """Each text's exact-duplicate key: `exact_keys()`, except that a text without words (emoji,
        arrows, other symbols: all normalise to "") is keyed on its raw whitespace-separated pieces
        joined by single spaces, so distinct ones are not one exact duplicate (issue 25). Such a
        string holds no letter or digit, so it never equals a text with words' normalised text; an
        empty or blank text keeps the key of ""."""
        keys = self.exact_keys()
        wordless = np.flatnonzero(np.diff(self.text_offsets) == 0)
        if not len(wordless):
            return keys
        if self.raw is None:
            raise ValueError("WordKeys.dedup_keys: texts without words and no raw texts to key them on")
        raw = pc.utf8_trim_whitespace(self.raw.take(pa.array(wordless)))
        pieces = join_words(pc.utf8_split_whitespace(raw))
        for i, k in zip(wordless.tolist(), exact_keys(pieces)):
            keys[i] = k
        return keys


def word_keys(texts: Sequence[str] | pa.Array) -> WordKeys:
    """`word_hashes(words(texts))` and the bytes of `normalise(texts)`, in one compiled pass over the
    texts' bytes (`kernels_jit.split_hash_words`)."""
    raw = _as_array(texts)
    a, ascii_only = _prepared(raw)
    if len(a) == 0:
        zero = np.zeros(1, np.int64)
        return WordKeys(np.zeros(0, np.uint64), zero, np.zeros(0, _U8), zero.copy(), raw)
    o, b = _offsets_bytes(a)
    from mix_assets.core import kernels_jit  # numba loads only in processes that run a kernel (core/kernels_jit.py)
    text, toff, h, off = kernels_jit.split_hash_words(o, b, np.zeros(0, _U8) if ascii_only else _high_classes(b))
    return WordKeys(h, off, text, toff, raw)


# Second characters of the canonical two-character decompositions in this Python's Unicode data
# (test_kernels_identity recomputes them): after a suitable first character they compose.
_COMPOSES_SECOND = frozenset((
    768, 769, 770, 771, 772, 774, 775, 776, 777, 778, 779, 780, 783, 785, 787, 788, 795, 803, 804, 805,
    806, 807, 808, 813, 814, 816, 817, 824, 834, 837, 1460, 1463, 1464, 1465, 1468, 1471, 1473, 1474,
    1619, 1620, 1621, 2364, 2492, 2494, 2519, 2620, 2876, 2878, 2902, 2903, 3006, 3031, 3158, 3266,
    3285, 3286, 3390, 3415, 3530, 3535, 3551, 3954, 3956, 3968, 4021, 4023, 4142, 6965, 12441, 12442,
    69818, 69927, 70462, 70487, 70832, 70842, 70845, 71087, 71984, 119141, 119150, 119151, 119152,
    119153, 119154,
))
# Per code point: 0 not yet asked, 1 "NFKC quick check Yes": assigned, unchanged by NFKC alone,
# combining class 0, never composing with what precedes it (not a second character above, not a
# Hangul vowel or final consonant). A text of ASCII and such code points is NFKC-normalised (UAX #15
# quick check), under every later Unicode version too (the normalisation stability policy). 2 not.
_NFKC_YES = np.zeros(0x110000, np.uint8)


def _nfkc_yes(cps: np.ndarray) -> np.ndarray:
    todo = np.unique(cps[_NFKC_YES[cps] == 0])
    for c in todo.tolist():
        ch = chr(c)
        yes = (unicodedata.category(ch) not in ("Cn", "Cs") and unicodedata.combining(ch) == 0
               and unicodedata.normalize("NFKC", ch) == ch and c not in _COMPOSES_SECOND
               and not 0x1161 <= c <= 0x1175 and not 0x11A8 <= c <= 0x11C2)
        _NFKC_YES[c] = 1 if yes else 2
    return _NFKC_YES[cps] == 1


def _may_change_under_nfkc(a: pa.Array) -> np.ndarray:
    """Per text, whether NFKC might change it: whether it holds a code point without `_nfkc_yes`."""
    try:
        a.validate(full=True)
    except pa.ArrowInvalid:  # not UTF-8: utf8_normalize reports it, as the Arrow pipeline did
        return np.ones(len(a), bool)
    o, b = _offsets_bytes(a)
    lead, _, cp = _code_points(b)
    no = ~_nfkc_yes(cp)
    out = np.zeros(len(a), bool)
    out[np.searchsorted(o, lead[no], side="right") - 1] = True
    return out


def _offsets_bytes(a: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets from 0, uint8 bytes) of a large_string array."""
    bufs = a.buffers()
    o = np.frombuffer(bufs[1], np.int64, len(a) + 1, a.offset * 8)
    o0, nb = int(o[0]), int(o[-1] - o[0])
    return o - o0, (np.frombuffer(bufs[2], np.uint8, nb, o0) if nb else np.zeros(0, np.uint8))


def _code_points(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(position, byte length, code point) of each non-ASCII character of valid UTF-8 bytes."""
    lead = np.flatnonzero(b >= _U8(0xC0))
    last = len(b) - 1
    b0 = b[lead].astype(np.int32)
    at = [np.minimum(lead + k, last) for k in (1, 2, 3)] if lead.size else [lead] * 3
    nxt = [b[i].astype(np.int32) & 0x3F for i in at]
    size = np.where(b0 < 0xE0, 2, np.where(b0 < 0xF0, 3, 4))
    cp = np.where(size == 2, (b0 & 0x1F) << 6 | nxt[0],
                  np.where(size == 3, (b0 & 0x0F) << 12 | nxt[0] << 6 | nxt[1],
                           (b0 & 0x07) << 18 | nxt[0] << 12 | nxt[1] << 6 | nxt[2]))
    return lead, size, cp


# What `_PUNCT` and Arrow's whitespace split make of each non-ASCII code point after NFKC and
# lower-casing: 0 not yet asked, 1 word character, 2 deleted, 3 whitespace. Filled lazily by asking
# those two functions themselves, so the byte splitter below follows them exactly.
_KEEP, _DROP, _SPACE = 1, 2, 3  # = kernels_jit.KEEP, DROP, SPACE (test_kernels_jit pins them)
_CP_CLASS = np.zeros(0x110000, np.uint8)
_CP_LOCK = threading.Lock()


def _code_point_classes(cps: np.ndarray) -> np.ndarray:
    todo = np.unique(cps[_CP_CLASS[cps] == 0])
    if todo.size:
        with _CP_LOCK:
            chars = pa.array([chr(c) for c in todo.tolist()], pa.large_string())
            deleted = pc.equal(pc.replace_substring_regex(chars, pattern=_PUNCT, replacement=""), "")
            between = pa.array([f"a{c}b" for c in chars.to_pylist()], pa.large_string())
            space = pc.greater(pc.list_value_length(pc.utf8_split_whitespace(between)), 1)
            cls = np.where(deleted.to_numpy(zero_copy_only=False), _DROP,
                           np.where(space.to_numpy(zero_copy_only=False), _SPACE, _KEEP))
            _CP_CLASS[todo] = cls
    return _CP_CLASS[cps]


_U8 = np.uint8


def _split(a: pa.Array, ascii_only: bool) -> pa.ListArray:
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
    o, b = _offsets_bytes(a)
    from mix_assets.core import kernels_jit  # numba loads only in processes that run a kernel (core/kernels_jit.py)
    kept, soff, loff = kernels_jit.split_words(o, b, np.zeros(0, _U8) if ascii_only else _high_classes(b))
    has = loff[1:] > loff[:-1]
    nulls = n - int(np.count_nonzero(has))
    valid = pa.py_buffer(np.packbits(has, bitorder="little")) if nulls else None
    strings = pa.LargeStringArray.from_buffers(len(soff) - 1, pa.py_buffer(soff), pa.py_buffer(kept))
    return pa.Array.from_buffers(pa.list_(pa.large_string()), n, [valid, pa.py_buffer(loff)],
                                 null_count=nulls, children=[strings])


def _high_classes(b: np.ndarray) -> np.ndarray:
    """Per byte of (valid UTF-8) `b`: the class (`_code_point_classes`) of the non-ASCII character it
    belongs to, 0 for ASCII bytes."""
    high = np.zeros(len(b), _U8)
    lead, size, cp = _code_points(b)
    if lead.size:
        cls = _code_point_classes(cp)
        for k in range(4):
            sel = size > k
            high[lead[sel] + k] = cls[sel]
    return high


def join_words(word_lists: pa.ListArray) -> pa.Array:
    """Normalised texts from word lists: words joined by single spaces."""
    return pc.binary_join(word_lists, pa.scalar(" ", pa.large_string())).fill_null("")


def normalise(texts: Sequence[str] | pa.Array) -> pa.Array:
    """Normalised texts (single spaces between words, no leading/trailing space)."""
    return join_words(words(texts))


def exact_keys(normalised: pa.Array) -> list[str]:
    """sha256 hex of each normalised text (the exact-duplicate key)."""
    if isinstance(normalised, pa.ChunkedArray):
        normalised = normalised.combine_chunks()
    typ = normalised.type
    if normalised.null_count or not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        return [hashlib.sha256(s.encode("utf-8")).hexdigest() for s in normalised.to_pylist()]
    return _sha256_slices(*_offsets_bytes(normalised.cast(pa.large_string())))


def _sha256_slices(o: np.ndarray, b: np.ndarray) -> list[str]:
    text = memoryview(b)  # hashed slice by slice: no Python string per text
    return [hashlib.sha256(text[s:e]).hexdigest() for s, e in zip(o[:-1].tolist(), o[1:].tolist())]


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
    """(flat uint64 word hashes, int64 offsets of length n_docs + 1): `word_hash` of every word, one
    compiled pass over the words' bytes (`kernels_jit.xxh64_strings`)."""
    if isinstance(word_lists, pa.ChunkedArray):
        word_lists = word_lists.combine_chunks()
    offsets = np.asarray(word_lists.offsets, dtype=np.int64)
    offsets = offsets - offsets[0]
    flat = word_lists.flatten()
    if len(flat) == 0:
        return np.zeros(0, dtype=np.uint64), offsets
    o, b = _offsets_bytes(flat.cast(pa.large_string()))
    from mix_assets.core import kernels_jit  # numba loads only in processes that run a kernel (core/kernels_jit.py)
    return kernels_jit.xxh64_strings(o, b), offsets


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
    full_counts = np.maximum(lens - n + 1, 0)
    out_counts = full_counts.copy()
    short_docs = (lens > 0) & (lens < n)
    if short == "whole":
        out_counts[short_docs] = 1
    out_offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(out_counts, out=out_offsets[1:])
    from mix_assets.core import kernels_jit  # numba loads only in processes that run a kernel (core/kernels_jit.py)
    out = kernels_jit.ngram_hashes(np.ascontiguousarray(hashes, np.uint64), np.ascontiguousarray(offsets, np.int64),
                                   out_offsets, n, short == "whole", _P)
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
