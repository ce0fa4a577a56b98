"""MinHash signatures over word shingles, computed in numpy a chunk of shingles at a time.

The permutation scheme is datasketch 2.x `affine32`, bit for bit: each 32-bit shingle hash is
pre-mixed with the MurmurHash3 finaliser, then permutation k maps it to `a_k * h + b_k mod 2**32`
(odd `a_k`, so a bijection), and the signature is the per-permutation minimum. `a`, `b` come from
`numpy.random.RandomState(seed)` exactly as datasketch draws them, so a signature here equals
`datasketch.MinHash(num_perm, seed, hashfunc=<our 32-bit shingle hash>).hashvalues`
(mix_assets_tests/stages/dedup/test_minhash.py proves it).

Shingles: normalised words (core/textkeys.py), 5-word n-gram hashes from `textkeys.ngram_hashes`;
the 32-bit shingle hash is the low half of that 64-bit hash. A document with at least one but
fewer than `shingle` words has exactly one shingle (all its words, `short="whole"`), so short
documents only ever match documents with the same few words. A document with no words has no
shingle and an all-`EMPTY` signature; the LSH stage never bands such documents (they would all
collide), so they can only be exact duplicates, keyed on their raw text (`textkeys.WordKeys.dedup_keys`:
distinct emoji-only documents all normalise to "").

Memory is bounded by the batch, not the document: signing holds one row of minima per document,
and documents are fed in batches of bounded text size. Batches run on a thread pool: Arrow's string
kernels, numpy's ufunc loops and the compiled kernels release the GIL, so two threads use both cores.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.core import textkeys

EMPTY = np.uint32(0xFFFFFFFF)  # signature value of a document without shingles (datasketch's too)
DEFAULT_SEED = 1  # datasketch's default seed
BATCH_BYTES = 1 << 20  # text per batch handed to a worker thread


def permutations(num_perm: int, seed: int = DEFAULT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) uint32 arrays of the affine32 permutations, drawn as datasketch draws them."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


def fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser (datasketch's pre-mix), element-wise on uint32."""
    h = h.astype(np.uint32, copy=True)
    with np.errstate(over="ignore"):
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h


def shingle_hash32(h64: np.ndarray) -> np.ndarray:
    """The 32-bit shingle hash fed to the permutations: the low half of textkeys' 64-bit n-gram hash."""
    return (h64 & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def signatures_from_hashes(h32: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Signatures (n_docs x num_perm, uint32) of documents given as flat 32-bit shingle hashes.

    `offsets` (n_docs + 1) delimits each document's shingles. One compiled pass
    (`kernels_jit.minhash_rows`): per shingle, the affine map of every permutation folded into its
    document's row of minima, which stays in L1.
    """
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    n_docs = len(offsets) - 1
    out = np.full((n_docs, len(a)), EMPTY, dtype=np.uint32)
    if n_docs and int(offsets[-1]):
        from mix_assets.core import kernels_jit  # numba loads only in processes that run a kernel (core/kernels_jit.py)
        kernels_jit.minhash_rows(np.ascontiguousarray(h32, dtype=np.uint32), offsets,
                                 np.ascontiguousarray(a, dtype=np.uint32), np.ascontiguousarray(b, dtype=np.uint32), out)
    return out


@dataclass
class Batch:
    """Per-document dedup inputs of one batch of texts."""

    signatures: np.ndarray  # (n, num_perm) uint32
    n_words: np.ndarray  # int64, normalised words
    n_shingles: np.ndarray  # int64, shingles (0 for a document without words)
    exact_keys: list[str]  # sha256 hex of the normalised text (without words: the raw's, WordKeys.dedup_keys)


def sign_batch(
    texts: Sequence[str] | pa.Array, num_perm: int = 128, shingle: int = 5, seed: int = DEFAULT_SEED
) -> Batch:
    """Normalise, hash shingles, sign and exact-key one batch of documents."""
    a, b = permutations(num_perm, seed)
    return _sign(texts, a, b, shingle)


def sign_words(keys: textkeys.WordKeys, a: np.ndarray, b: np.ndarray, shingle: int) -> Batch:
    """Signature, word and shingle counts and exact key (`WordKeys.dedup_keys`) of each document, from
    its normalised words (`textkeys.word_keys`); `a`, `b`: `permutations`. The same values `sign_batch`
    gives for the texts."""
    sh, soff = textkeys.ngram_hashes(keys.hashes, keys.offsets, shingle, short="whole")
    sigs = signatures_from_hashes(shingle_hash32(sh), soff, a, b)
    return Batch(sigs, np.diff(keys.offsets), np.diff(soff), keys.dedup_keys())


def _sign(texts, a: np.ndarray, b: np.ndarray, shingle: int) -> Batch:
    return sign_words(textkeys.word_keys(texts), a, b, shingle)


def _batches(texts: pa.Array, batch_bytes: int) -> Iterator[tuple[int, int]]:
    """(start, stop) row ranges of about `batch_bytes` of text each (at least one row)."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    lengths = np.nan_to_num(
        np.asarray(pc.binary_length(texts).to_numpy(zero_copy_only=False), dtype=np.float64)
    )
    ends = np.cumsum(lengths)
    start = 0
    n = len(texts)
    while start < n:
        base = ends[start - 1] if start else 0.0
        stop = int(np.searchsorted(ends, base + batch_bytes, side="right"))
        stop = max(stop, start + 1)
        yield start, min(stop, n)
        start = stop


def sign_texts(
    texts: Sequence[str] | pa.Array | pa.ChunkedArray,
    num_perm: int = 128,
    shingle: int = 5,
    seed: int = DEFAULT_SEED,
    threads: int = 2,
    batch_bytes: int = BATCH_BYTES,
) -> Batch:
    """`sign_batch` over any number of documents, in bounded batches on `threads` threads.

    The result does not depend on `threads` or `batch_bytes`: every document is signed alone.
    """
    arr = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    if not isinstance(arr, pa.Array):
        arr = pa.array(list(arr), type=pa.large_string())
    a, b = permutations(num_perm, seed)
    ranges = list(_batches(arr, batch_bytes))
    if not ranges:
        return Batch(np.zeros((0, num_perm), np.uint32), np.zeros(0, np.int64), np.zeros(0, np.int64), [])

    def run(rng: tuple[int, int]) -> Batch:
        return _sign(arr.slice(rng[0], rng[1] - rng[0]), a, b, shingle)

    if threads > 1 and len(ranges) > 1:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            parts = list(pool.map(run, ranges))
    else:
        parts = [run(r) for r in ranges]
    return Batch(
        np.concatenate([p.signatures for p in parts]),
        np.concatenate([p.n_words for p in parts]),
        np.concatenate([p.n_shingles for p in parts]),
        [k for p in parts for k in p.exact_keys],
    )

def shingle_sets(texts: Sequence[str] | pa.Array, n: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Per text its set of n-word shingles as distinct 64-bit hashes (sorted) and offsets (len(texts) + 1).

    The full 64-bit `textkeys.ngram_hashes` values (signatures use their low 32 bits), short documents
    one shingle, no words none: the sets exact verification and the split gate compare.
    """
    h, off = textkeys.word_hashes(textkeys.words(texts))
    g, goff = textkeys.ngram_hashes(h, off, n, short="whole")
    doc = np.repeat(np.arange(len(texts), dtype=np.int64), np.diff(goff))
    g, doc = _by_doc_then_hash(g, doc)
    keep = np.ones(len(g), bool)
    keep[1:] = (g[1:] != g[:-1]) | (doc[1:] != doc[:-1])
    g, doc = g[keep], doc[keep]
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(np.bincount(doc, minlength=len(texts)), out=offsets[1:])
    return g, offsets


def _by_doc_then_hash(g: np.ndarray, doc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(g, doc) ordered by document, then hash: one argsort of (doc, top bits of g) packed into a
    uint64, exact whenever equal packed keys hold equal or ascending hashes (else a lexsort)."""
    if len(g) < 2:
        return g, doc
    bits = max(1, int(doc[-1]).bit_length())  # doc is ascending (and < 2**63)
    key = (doc.astype(np.uint64) << np.uint64(64 - bits)) | (g >> np.uint64(bits))
    order = np.argsort(key)
    key, gs = key[order], g[order]
    if not np.any((key[1:] == key[:-1]) & (gs[1:] < gs[:-1])):
        return gs, doc[order]
    order = np.lexsort((g, doc))
    return g[order], doc[order]


def jaccard_estimate(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """Estimated Jaccard = share of equal signature values (row-wise for 2-D inputs)."""
    return np.mean(sig_a == sig_b, axis=-1)
