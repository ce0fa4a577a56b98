"""LSH banding, confirmed candidate pairs, clusters and the keep rule, in numpy.

Pipeline (`dedup`):
1. Documents are put in a canonical order (sorted by doc_id) first, so nothing below depends on
   the input order or on how signatures were computed in parallel.
2. Exact duplicates: documents with the same exact key (sha256 of the normalised text) are joined
   unconditionally. Only one representative per exact key enters the LSH stage.
3. Near duplicates: per band, a 64-bit key over the band's `r` signature values; one `argsort` per
   band groups equal keys. Inside a group every pair of members fewer than `group_cap` apart in
   canonical order becomes a candidate, plus a star from the group's first member for larger
   groups (bounds the pairs of a huge group to O(size * group_cap)). Candidate pairs are
   de-duplicated across bands and VERIFIED by their exact shingle-set Jaccard (`set_jaccard` over
   the two documents' sets of 64-bit shingle hashes, the measure the split gate uses) >= threshold;
   only verified pairs become edges, so a pair is an edge iff its true Jaccard reaches the
   threshold, never by a band collision or a lucky estimate. Chains of verified pairs do join
   (A~B, B~C puts A, B, C in one cluster). Without shingle sets (signature-only callers, e.g. the
   clustering bench) the estimated Jaccard (share of equal signature values) stands in.
4. Clusters = connected components of exact + confirmed edges, labelled by their smallest document, as
   partition tasks (stages/dedup/partitioned.py: large-star / small-star rounds).
5. Keep rule, a pure function of a cluster's members: a document the filters rejected (`demoted`)
   survives only when every member was rejected; then the longest document (n_chars) survives;
   ties go to the higher source priority, then to the smallest doc_id. Every other member is
   excluded with reason `exact_dup` when its exact key equals the survivor's, else `near_dup`.

Index memory is a few arrays of N 8-byte values per band in flight (`candidate_pairs` runs one task
per band, or per band and bucket-hash slice, on the engine, one at a time in this thread by default, two at
once on two workers; each reads its r columns through `Signatures`, e.g. from the stored Parquet files, never
the whole matrix) and writes its pairs as a part; one task per partition then unions its pairs.
Verification holds the shingle sets of the documents in candidate pairs only (8 B per distinct
shingle of those documents).

(b, r) (`recall_params`): banding must find a pair AT the threshold with near certainty, because
the estimate no longer decides and a pair banding misses can never be verified. Among the (b, r)
with b*r <= num_perm and P(no shared band | J = threshold) = (1 - t^r)^b <= MAX_MISS (1e-6), the
one minimising datasketch's weighted false-positive / false-negative integral (`optimal_params`,
equal to `datasketch.lsh._optimal_param`, with the config's weights); at 0.8 and 128
permutations that is b=27, r=4. A false positive costs one exact set comparison.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.core import engine
from mix_assets.stages.dedup import partitioned as part

_K = np.uint64(0x9E3779B97F4A7C15)  # golden-ratio multiplier for band keys
CONFIRM_CHUNK = 8192  # candidate pairs compared per step (bounds the gather to ~8 MiB)
GROUP_CAP = 32  # candidate pairs per member of a band bucket (`_group_pairs`)
VERIFY_CHUNK = 1 << 20  # shingle values gathered per exact-verification step (~40 MB of sort work)
MAX_MISS = 1e-6  # largest P(a pair at exactly the threshold shares no band) recall_params allows


# -- parameters ------------------------------------------------------------------------------
# The fp / fn integrals are of polynomials of degree b*r <= num_perm, so Gauss-Legendre quadrature with
# num_perm // 2 + 1 nodes is exact (up to rounding; scipy's quad gave the same (b, r) on every grid tested,
# test_lsh.py). No scipy: importing it cost every dedup_keys step 1.9 CPU s for these two integrals.
# The searches integrate every (b, r) with the nodes for degree num_perm (exact for every b*r <= num_perm): one
# node set per search, not one per degree (computing ~65 node sets was 0.14 of the step process's 0.64 CPU s at
# 100 MB on Ray, bench/results/dedup_partitions.md).
def _integral(f, lo: float, hi: float, degree: int) -> float:
    """The integral of the polynomial f (of at most `degree`) over [lo, hi], by Gauss-Legendre."""
    x, w = _legendre(degree // 2 + 1)
    half = (hi - lo) / 2.0
    return float(half * np.dot(w, f(half * x + (hi + lo) / 2.0)))


@functools.lru_cache(maxsize=8)
def _legendre(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    return np.polynomial.legendre.leggauss(nodes)


def _fp(threshold: float, b: int, r: int, degree: int = 0) -> float:
    return _integral(lambda s: 1 - (1 - s ** float(r)) ** float(b), 0.0, threshold, max(degree, b * r))


def _fn(threshold: float, b: int, r: int, degree: int = 0) -> float:
    return _integral(lambda s: 1 - (1 - (1 - s ** float(r)) ** float(b)), threshold, 1.0, max(degree, b * r))


def optimal_params(
    threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5
) -> tuple[int, int]:
    """(bands, rows) minimising fp_weight * P(false positive) + fn_weight * P(false negative)."""
    best, opt = float("inf"), (0, 0)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            err = _fp(threshold, b, r, num_perm) * fp_weight + _fn(threshold, b, r, num_perm) * fn_weight
            if err < best:
                best, opt = err, (b, r)
    return opt


def recall_params(
    threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5, max_miss: float = MAX_MISS
) -> tuple[int, int]:
    """(bands, rows) with P(miss | J = threshold) <= max_miss and the smallest weighted fp/fn integral.

    When no (b, r) reaches max_miss (few permutations, low threshold), the one with the fewest misses.
    """
    best, opt = (float("inf"), float("inf")), (0, 0)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            miss = (1.0 - threshold**r) ** b
            if miss <= max_miss:
                key = (0.0, _fp(threshold, b, r, num_perm) * fp_weight + _fn(threshold, b, r, num_perm) * fn_weight)
            else:
                key = (miss, 0.0)
            if key < best:
                best, opt = key, (b, r)
    return opt


def s_curve(b: int, r: int, jaccard: float | np.ndarray) -> float | np.ndarray:
    """Probability that a pair with this Jaccard shares at least one band: 1 - (1 - J^r)^b."""
    return 1.0 - (1.0 - np.asarray(jaccard, dtype=np.float64) ** r) ** b


# -- banding and candidates ------------------------------------------------------------------
def band_keys(sig: np.ndarray, b: int, r: int, chunk: int = 8192) -> np.ndarray:
    """(b, n) uint64: key of band k of every row (band k = columns k*r .. k*r+r-1).

    One pass over the signature matrix in row chunks (band-by-band column slices would stream the
    whole matrix once per band). Equal bands give equal keys; unequal bands collide with
    probability ~2^-64, and a collision only adds a candidate pair that confirmation rejects.
    """
    n = len(sig)
    out = np.empty((b, n), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for s in range(0, n, chunk):
            part = sig[s : s + chunk, : b * r]
            if r % 2 == 0:  # two signature values per 64-bit word
                words = np.ascontiguousarray(part, dtype=np.uint32).view(np.uint64).reshape(len(part), b, r // 2)
            else:
                words = part.astype(np.uint64).reshape(len(part), b, r)
            key = words[:, :, 0].copy()
            for j in range(1, words.shape[2]):
                key *= _K
                key ^= key >> np.uint64(31)
                key += words[:, :, j]
            out[:, s : s + chunk] = key.T
    return out


def _group_pairs(order: np.ndarray, sk: np.ndarray, group_cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Candidate (lo, hi) index pairs among equal keys (sk = keys[order], ascending); see the module docstring."""
    dup = np.zeros(len(sk), dtype=bool)  # position shares its key with a neighbour
    if len(sk) > 1:
        eq = sk[1:] == sk[:-1]
        dup[1:] |= eq
        dup[:-1] |= eq
    pos = np.flatnonzero(dup)
    if pos.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    # Only members of multi-member groups from here on; put each group in index order, so the
    # pairs depend on the (canonical) indices only, not on the sort's tie order.
    g = np.cumsum(np.r_[True, sk[pos[1:]] != sk[pos[:-1]]]) - 1
    members = order[pos]
    o = np.lexsort((members, g))
    members, g = members[o], g[o]
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    size = np.diff(np.r_[first, len(g)])
    rank = np.arange(len(g)) - np.repeat(first, size)
    los, his = [], []
    for d in range(1, min(group_cap, int(size.max()))):
        same = g[:-d] == g[d:]
        los.append(members[:-d][same])
        his.append(members[d:][same])
    far = rank >= group_cap
    if far.any():
        head = np.repeat(members[first], size)
        los.append(head[far])
        his.append(members[far])
    lo, hi = np.concatenate(los), np.concatenate(his)
    return np.minimum(lo, hi), np.maximum(lo, hi)


class Signatures(Protocol):
    """A (documents x num_perm) uint32 signature matrix read a few columns at a time (e.g. from Parquet)."""

    shape: tuple[int, int]

    def columns(self, start: int, stop: int) -> np.ndarray:
        """(documents x (stop - start)) uint32: signature values start .. stop-1 of every document."""
        ...


class InMemory:
    """`Signatures` over a numpy matrix."""

    def __init__(self, sig: np.ndarray):
        self.sig, self.shape = sig, sig.shape

    def columns(self, start: int, stop: int) -> np.ndarray:
        return self.sig[:, start:stop]


def band_pairs(sig: Signatures, rows: np.ndarray | None, r: int, group_cap: int, band: int, slice: int = 0,
               slices: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Candidate (lo, hi) positions into `rows` of one band: its r columns read, keyed and grouped (pure); with
    `slices` > 1 only the buckets whose key falls in slice `slice` (a bucket's pairs depend on its members only)."""
    keys = band_keys(sig.columns(band * r, (band + 1) * r), 1, r)[0]
    if rows is not None:
        keys = keys[rows]
    mine = None
    if slices > 1:
        mine = np.flatnonzero((keys >> np.uint64(40)) % np.uint64(slices) == np.uint64(slice))
        keys = keys[mine]
    order = np.argsort(keys)
    keys = keys[order]  # the only reference: the unsorted keys go (two bands may run at once)
    return _group_pairs(order if mine is None else mine[order], keys, group_cap)


def candidate_pairs(
    sig: np.ndarray | Signatures, rows: np.ndarray | None, b: int, r: int, group_cap: int = 32,
    eng: Optional[engine.Engine] = None, partitions: int = 1, scratch=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Unique candidate pairs (positions into `rows`, lo < hi) over all bands, sorted by (lo, hi).

    One task per (band, bucket-hash slice) on `eng` (default: this thread), each holding one band's `r`
    columns and keys (~32 B per document), writing its pairs as a part partitioned by lo; then one task per
    partition unions its pairs (stages/dedup/partitioned.py; `scratch` a `partitioned.Scratch`, default a
    temporary folder). The pairs do not depend on `partitions` or on the engine.
    """
    sig = InMemory(sig) if isinstance(sig, np.ndarray) else sig
    n = sig.shape[0] if rows is None else len(rows)
    c = np.zeros(0, dtype=np.int64)
    if n < 2:
        return c, c
    with (contextlib.nullcontext(scratch) if scratch is not None else part.scratch()) as sc:
        bands = functools.partial(band_pairs, sig, rows, r, group_cap)
        got = [lo * n + hi for lo, hi in part.candidate_partitions(
            bands, b, eng or engine.Engine(num_cpus=1), partitions, sc)]
    c = np.sort(np.concatenate([c, *got]))
    return c // n, c % n


def estimated_jaccard(sig: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Estimated Jaccard of each (lo, hi) row pair of `sig`, computed in bounded chunks."""
    out = np.empty(len(lo), dtype=np.float32)
    for s in range(0, len(lo), CONFIRM_CHUNK):
        e = s + CONFIRM_CHUNK
        out[s:e] = np.count_nonzero(sig[lo[s:e]] == sig[hi[s:e]], axis=1) / sig.shape[1]
    return out


def ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated aranges starts[i] .. starts[i] + lens[i]."""
    total = int(lens.sum())
    return np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(total)


def set_jaccard(values: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray,
                chunk: int = VERIFY_CHUNK) -> np.ndarray:
    """Exact Jaccard |A & B| / |A | B| (float64) of the sets a[i], b[i].

    Set k is values[offsets[k]:offsets[k + 1]], its distinct elements (any order). Pairs are taken a
    chunk of ~`chunk` gathered elements at a time. 0.0 when both sets are empty.
    """
    offsets = np.asarray(offsets, np.int64)
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    sizes = np.diff(offsets)
    out = np.zeros(len(a), dtype=np.float64)
    work = np.cumsum(sizes[a] + sizes[b])
    s = 0
    while s < len(a):
        base = work[s - 1] if s else 0
        e = max(int(np.searchsorted(work, base + chunk, side="right")), s + 1)
        ca, cb = a[s:e], b[s:e]
        la, lb = sizes[ca], sizes[cb]
        va, vb = values[ranges(offsets[ca], la)], values[ranges(offsets[cb], lb)]
        inter = _sorted_intersections(va, la, vb, lb)
        if inter is None:
            inter = _sort_intersections(va, la, vb, lb)
        union = la + lb - inter
        out[s:e] = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
        s = e
    return out


def _sort_intersections(va, la, vb, lb) -> np.ndarray:
    """|A_i & B_i| for sets in any order: both tagged with the pair, sorted, equal neighbours counted."""
    vals = np.concatenate([va, vb])
    pid = np.concatenate([np.repeat(np.arange(len(la)), la), np.repeat(np.arange(len(lb)), lb)])
    o = np.lexsort((vals, pid))
    vals, pid = vals[o], pid[o]
    same = (vals[1:] == vals[:-1]) & (pid[1:] == pid[:-1])
    return np.bincount(pid[1:][same], minlength=len(la))


def _sorted_intersections(va, la, vb, lb) -> Optional[np.ndarray]:
    """|A_i & B_i| without a sort when every B_i is ascending uint64 (shingle_sets' order), else None.

    Each value becomes (pair << (64 - bits)) | (value >> bits), monotone in (pair, value): the B keys
    are ascending as they stand, and one searchsorted finds each A value's place, where an exact compare
    of the full values decides. None when the B keys are not strictly ascending (a set out of order, or
    two values of a set sharing a key).
    """
    if vb.dtype != np.uint64 or va.dtype != np.uint64:
        return None
    n = len(la)
    bits = np.uint64(max(int(n - 1).bit_length(), 1))
    pa_, pb = np.repeat(np.arange(n, dtype=np.uint64), la), np.repeat(np.arange(n, dtype=np.uint64), lb)
    top = np.uint64(64) - bits
    kb = (pb << top) | (vb >> bits)
    if not (kb[1:] > kb[:-1]).all():  # (pair, value) ascending implies this; a tie is a 2^-(64 - bits) event
        return None
    if not len(kb):
        return np.zeros(n, np.int64)
    at = np.minimum(np.searchsorted(kb, (pa_ << top) | (va >> bits)), len(kb) - 1)
    hit = (vb[at] == va) & (pb[at] == pa_)
    return np.bincount(pa_[hit].astype(np.int64), minlength=n)


class InMemorySets:
    """Shingle sets held as (values, offsets), the form `minhash.shingle_sets` returns."""

    def __init__(self, values: np.ndarray, offsets: np.ndarray):
        self.values, self.offsets = values, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def jaccard(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return set_jaccard(self.values, self.offsets, a, b)


def _set_store(sets):
    """A (values, offsets) pair as InMemorySets; anything with `jaccard` and `len` (signatures.SpilledSets) as is."""
    return InMemorySets(*sets) if isinstance(sets, tuple) else sets


class Verifier:
    """Exact Jaccard of pairs of documents (input indices), from `cached` where it knows them, else from the
    shingle sets `shingle_sets(docs)` loads (a text pass); every value given is kept in `known`.

    `cached(a, b)` -> (bool hit per pair, float64 values): Jaccards stored by an earlier run (a pure function
    of the two texts and the shingle code, so a hit is the value a comparison would give). Sets are loaded
    again only when a call needs a document the last load does not hold."""

    def __init__(self, shingle_sets: Callable[[np.ndarray], object], cached=None):
        self.shingle_sets, self.cached = shingle_sets, cached
        self.docs: Optional[np.ndarray] = None
        self.sets = None
        self.known: list = []  # (a, b, jaccard) of every call
        self.compared = 0  # pairs compared from shingle sets (not cached)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        out = np.empty(len(a), np.float64)
        todo = np.ones(len(a), bool)
        if self.cached is not None and len(a):
            hit, vals = self.cached(a, b)
            out[hit] = vals[hit]
            todo = ~hit
        if todo.any():
            ta, tb = a[todo], b[todo]
            docs = np.unique(np.concatenate([ta, tb]))
            if self.docs is None or not np.isin(docs, self.docs, assume_unique=True).all():
                self.docs, self.sets = docs, _set_store(self.shingle_sets(docs))
                if len(self.sets) != len(docs):
                    raise ValueError(f"dedup: shingle_sets gave {len(self.sets)} sets for {len(docs)} documents")
            out[todo] = self.sets.jaccard(np.searchsorted(self.docs, ta), np.searchsorted(self.docs, tb))
            self.compared += len(ta)
        self.known.append((a, b, out))
        return out

    def pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(a, b, jaccard) of every pair given so far (repeats included)."""
        if not self.known:
            e = np.zeros(0, np.int64)
            return e, e, np.zeros(0, np.float64)
        return tuple(np.concatenate(x) for x in zip(*self.known))


def _reused_jaccard(jaccard: Callable, a: np.ndarray, b: np.ndarray, known: tuple, n: int) -> np.ndarray:
    """jaccard(a, b) (input indices < n), taken from known = (ka, kb, jaccard(ka, kb)) for the pairs (either
    way round) compared already: the same numbers, each pair's sets compared once."""
    ka, kb, kj = known
    m = max(n, 1)
    keys = np.minimum(ka, kb) * m + np.maximum(ka, kb)
    order = np.argsort(keys)
    keys = keys[order]
    q = np.minimum(a, b) * m + np.maximum(a, b)
    at = np.minimum(np.searchsorted(keys, q), max(len(keys) - 1, 0))
    hit = keys[at] == q if len(keys) else np.zeros(len(q), bool)
    out = np.empty(len(a), np.float64)
    out[hit] = kj[order[at[hit]]]
    out[~hit] = jaccard(a[~hit], b[~hit]) if (~hit).any() else np.zeros(0)
    return out


# -- keep rule -------------------------------------------------------------------------------
def keep_rank(doc_ids: Sequence[str] | pa.Array, n_chars: np.ndarray, priority: np.ndarray,
              demoted: Optional[np.ndarray] = None) -> np.ndarray:
    """Rank of every document under the keep rule (0 = best): not demoted, longest, higher priority,
    smaller doc_id."""
    return _keep_rank(_argsort_ids(doc_ids), n_chars, priority, demoted)


def _keep_rank(id_order: np.ndarray, n_chars: np.ndarray, priority: np.ndarray,
               demoted: Optional[np.ndarray] = None) -> np.ndarray:
    id_rank = np.empty(len(id_order), dtype=np.int64)
    id_rank[id_order] = np.arange(len(id_order))
    keys = (id_rank, -np.asarray(priority, np.int64), -np.asarray(n_chars, np.int64))
    order = np.lexsort(keys if demoted is None else (*keys, np.asarray(demoted, bool)))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


def _argsort_ids(doc_ids: Sequence[str] | pa.Array) -> np.ndarray:
    arr = doc_ids if isinstance(doc_ids, (pa.Array, pa.ChunkedArray)) else pa.array(list(doc_ids), pa.string())
    return np.asarray(pc.sort_indices(arr), dtype=np.int64)


def key_groups(exact_keys: Sequence[str] | pa.Array) -> np.ndarray:
    """An int64 label per key, equal labels for equal keys.

    sha256 hex keys (the normal case) are grouped on two 64-bit mixes of their first 32 hex digits
    (128 bits of a uniform digest; a false merge needs ~2^64 documents), computed on the raw Arrow
    buffer without a Python loop; anything else falls back to Arrow's dictionary encoding.
    """
    arr = exact_keys if isinstance(exact_keys, pa.Array) else pa.array(list(exact_keys), pa.string())
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    arr = arr.cast(pa.string())
    mixed = hex_mixes(arr)
    if mixed is not None:
        h1, h2 = mixed
        order = np.lexsort((h2, h1))
        h1, h2 = h1[order], h2[order]
        new = np.r_[True, (h1[1:] != h1[:-1]) | (h2[1:] != h2[:-1])]
        label = np.empty(n, dtype=np.int64)
        label[order] = np.cumsum(new) - 1
        return label
    return np.asarray(arr.dictionary_encode().indices, dtype=np.int64)


def hex_mixes(arr: pa.Array) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """`key_groups`' two 64-bit mixes of every key (equal keys, equal mixes) when every key is 64 lowercase hex
    digits (a string array without nulls), else None."""
    arr = arr.cast(pa.string())
    n = len(arr)
    if arr.null_count or not pc.all(pc.match_substring_regex(arr, r"^[0-9a-f]{64}$")).as_py():
        return None
    if n == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    offs = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset : arr.offset + n + 1]
    raw = np.frombuffer(arr.buffers()[2], np.uint8)[offs[0] : offs[-1]].reshape(n, 64)
    w = np.ascontiguousarray(raw[:, :32]).view(np.uint64)  # (n, 4): 8 hex digits per word
    with np.errstate(over="ignore"):
        h1 = ((w[:, 0] * _K) ^ w[:, 1]) * np.uint64(0xBF58476D1CE4E5B9)
        h2 = ((w[:, 2] * _K) ^ w[:, 3]) * np.uint64(0x94D049BB133111EB)
    return h1, h2


# -- the whole stage -------------------------------------------------------------------------
KEEP, EXACT_DUP, NEAR_DUP = 0, 1, 2
REASONS = (None, "exact_dup", "near_dup")  # indexed by the codes above


@dataclass
class DedupResult:
    """Per document (input order) plus stage statistics."""

    kept_index: np.ndarray  # int64: index (input order) of the survivor of this document's cluster
    cluster_size: np.ndarray  # int64
    code: np.ndarray  # int8: KEEP, EXACT_DUP or NEAR_DUP
    jaccard_to_kept: np.ndarray  # float32: Jaccard to the survivor (1.0 for the survivor), exact when verified
    stats: dict = field(default_factory=dict)
    verified: Optional[tuple] = None  # (a, b, exact Jaccard) of the pairs verification used (input indices)

    @property
    def keep(self) -> np.ndarray:
        return self.code == KEEP

    @property
    def reason(self) -> list:
        return [REASONS[c] for c in self.code.tolist()]


def dedup(
    doc_ids: Sequence[str] | pa.Array,
    exact_keys: Sequence[str] | pa.Array,
    signatures: np.ndarray | Signatures,
    n_shingles: np.ndarray,
    n_chars: np.ndarray,
    priority: np.ndarray,
    b: int,
    r: int,
    threshold: float,
    group_cap: int = 32,
    shingle_sets: Optional[Callable[[np.ndarray], object]] = None,
    demoted: Optional[np.ndarray] = None,
    eng: Optional[engine.Engine] = None,
    cached: Optional[Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]] = None,
    partitions: int = 1,
    scratch=None,
) -> DedupResult:
    """Exact + near-duplicate clusters and survivors; the result ignores the input order.

    `exact_keys` may also be int64 labels, equal for equal keys (`key_groups`' output), so a caller
    need not hold the key strings. `shingle_sets(indices)`, given ascending input indices, returns
    those documents' shingle sets (distinct 64-bit shingle hashes per document) as (values, offsets
    of len(indices) + 1), or as a store with `len` and `jaccard(a, b)` (`signatures.SpilledSets`,
    sets on disk, loaded a chunk of pairs at a time). With it
    every candidate pair is verified by exact Jaccard (and jaccard_to_kept is exact); without it
    the signature estimate decides, which needs the whole matrix (a numpy array); `signatures` read
    column by column (`Signatures`, e.g. from Parquet) need `shingle_sets`. `demoted` (bool per
    document, input order): documents the filters rejected; they cluster as usual but survive only
    a cluster whose members were all rejected, so a rejected document never stands in for a good copy.
    `eng`: where the bands run as tasks (`candidate_pairs`; default this thread); the result does not
    depend on it. `cached(a, b)` (input indices) -> (hit, jaccard): exact Jaccards an earlier run stored
    (`Verifier`), used instead of comparing those pairs' sets; the result's `verified` holds every exact
    Jaccard this call used (input indices), for the caller to store. `partitions`: how many node partitions
    the candidate pairs, the components and the keep rule run in (stages/dedup/partitioned.py), their parts
    under `scratch` (a `partitioned.Scratch`; default a temporary folder); the result does not depend on it.
    """
    if partitions < 1:
        raise ValueError(f"dedup: partitions is {partitions}, expected at least 1")
    n = len(exact_keys)
    if shingle_sets is None and not isinstance(signatures, np.ndarray):
        raise ValueError("dedup: signatures read by columns need shingle_sets (exact verification)")
    if signatures.shape[0] != n or len(n_shingles) != n or len(n_chars) != n or len(priority) != n:
        raise ValueError("dedup: exact_keys, signatures, n_shingles, n_chars, priority differ in length")
    if demoted is not None and len(demoted) != n:
        raise ValueError(f"dedup: {len(demoted)} demoted flags for {n} documents")
    if b * r > signatures.shape[1]:
        raise ValueError(f"dedup: b*r = {b * r} exceeds the {signatures.shape[1]} signature values")
    ids = doc_ids if isinstance(doc_ids, pa.Array) else pa.array(list(doc_ids), pa.string())
    if len(ids) != n:
        raise ValueError(f"dedup: {len(ids)} doc_ids for {n} documents")
    canon = _argsort_ids(ids)  # canonical position -> input index
    sorted_ids = ids.take(pa.array(canon))
    same = pc.equal(sorted_ids.slice(1), sorted_ids.slice(0, max(n - 1, 0)))
    if n > 1 and pc.any(same).as_py():
        dup = sorted(set(sorted_ids.filter(pa.concat_arrays([same, pa.array([False])])).to_pylist()))[:5]
        raise ValueError(f"dedup: doc_id must be unique; repeated: {dup}")
    del sorted_ids, same  # intermediates go as soon as they are used: the reduce's memory is per document
    at = np.arange(n)
    # Exact groups, in canonical order: the representative is the group's first member.
    labels = exact_keys if isinstance(exact_keys, np.ndarray) and exact_keys.dtype.kind == "i" else None
    group = (key_groups(exact_keys) if labels is None else labels)[canon]
    _, rep_pos = np.unique(group, return_index=True)
    rep_of = rep_pos[group]  # canonical position of each document's exact representative
    is_rep = rep_of == at
    ex_lo, ex_hi = rep_of[~is_rep], at[~is_rep]

    # Near duplicates among representatives with at least one shingle.
    sh_c = np.asarray(n_shingles)[canon]
    active = np.flatnonzero(is_rep & (sh_c > 0))
    no_shingle = int(np.count_nonzero(sh_c == 0))
    del is_rep, sh_c
    rows = canon[active]  # input indices, canonical order
    eng = eng or engine.Engine(num_cpus=1)
    lo, hi = candidate_pairs(signatures, rows, b, r, group_cap, eng, partitions, scratch)
    verify = Verifier(shingle_sets, cached) if shingle_sets is not None else None
    if verify is not None:
        est = verify(rows[lo], rows[hi])  # loads the candidate documents' sets (unless `cached` knows them all)
    else:
        est = estimated_jaccard(signatures, rows[lo], rows[hi])
    ok = est >= threshold
    nd_lo, nd_hi = active[lo[ok]], active[hi[ok]]

    rank_c = _keep_rank(canon, n_chars, priority, demoted)[canon]
    # Clusters (connected components of exact + confirmed edges) and survivors, as partition tasks
    with (contextlib.nullcontext(scratch) if scratch is not None else part.scratch()) as sc:
        ranks = part.put_ranks(sc, rank_c, partitions)
        del rank_c
        labels, rounds = part.components(np.concatenate([ex_lo, nd_lo]), np.concatenate([ex_hi, nd_hi]),
                                         partitions, eng, sc, ranks)
        del ex_lo, ex_hi, nd_lo, nd_hi
        kept_c, size_c, cstats = part.survivors(labels, n, partitions, eng, sc)

    kept_index = np.empty(n, dtype=np.int64)
    kept_index[canon] = canon[kept_c]
    cluster_size = np.empty(n, dtype=np.int64)
    cluster_size[canon] = size_c
    del size_c
    code_c = np.where(kept_c == at, KEEP, np.where(group == group[kept_c], EXACT_DUP, NEAR_DUP))
    code = np.empty(n, dtype=np.int8)
    code[canon] = code_c
    del code_c, group, kept_c, at
    jac = np.ones(n, dtype=np.float32)
    drop = np.flatnonzero(code == NEAR_DUP)  # exact dups keep 1.0: their normalised texts are equal
    if shingle_sets is not None:
        # Both sides through their exact representatives (same text), which are candidate documents.
        rep_in = np.empty(n, dtype=np.int64)
        rep_in[canon] = canon[rep_of]
        jac[drop] = _reused_jaccard(verify, rep_in[drop], rep_in[kept_index[drop]], (rows[lo], rows[hi], est), n)
    else:
        jac[drop] = estimated_jaccard(signatures, drop, kept_index[drop])

    counts = np.bincount(code, minlength=3)
    stats = {
        "documents": n,
        "exact_groups": int(len(rep_pos)),
        "lsh_documents": int(len(active)),
        "no_shingle_documents": no_shingle,
        "candidate_pairs": int(len(lo)),
        "verification": "exact" if shingle_sets is not None else "estimated",
        "confirmed_pairs": int(ok.sum()),
        "rejected_pairs": int(len(lo) - ok.sum()),
        **cstats,
        "partitions": partitions,
        "component_rounds": rounds,
        "kept": int(counts[KEEP]),
        "excluded_exact_dup": int(counts[EXACT_DUP]),
        "excluded_near_dup": int(counts[NEAR_DUP]),
        "confirmed_jaccard_min": float(est[ok].min()) if ok.any() else None,
        "rejected_jaccard_max": float(est[~ok].max()) if (~ok).any() else None,
    }
    verified = verify.pairs() if verify is not None else None
    if verify is not None:
        stats["pairs_compared"] = verify.compared
    return DedupResult(kept_index, cluster_size, code, jac, stats, verified)
