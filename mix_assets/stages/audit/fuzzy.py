"""Fuzzy contamination advisory: documents holding a near copy of an eval item (MinHash, Jaccard ~0.6).

The exact audit (stages/audit/contamination.py) matches 13-word runs, so an item of fewer than ~27 words with one
word changed in its middle escapes it. This scan is advisory: it excludes nothing, it reports counts
and ids only (never item or document text).

Measure. An item is its set I of `shingle`-word shingles (normalised words, `textkeys` hashing; default
2-word shingles); it matches a document when some window W of the document, as many shingles long as
the item, has Jaccard |I & W| / |I | W| >= `threshold` (0.6). A window, not the whole document, because
a document is long and an item short: the Jaccard of an item with a whole document is ~ |I| / |D|.
With equal lengths a one-word substitution inside the item keeps m - k of its m shingles, J = (m-k)/(m+k),
so J >= 0.6 needs m >= 4k: 2-word shingles find one-word edits in items of >= 9 words, 3-word shingles
only from 14 words (half of commonsense_qa's items are shorter). Items of fewer than `min_words` words
are not indexed (`items_too_short`): a few words match too much prose to attribute.

Candidates (linear in the corpus). Each item gets a MinHash signature of `num_perm` permutations
(stages/dedup/minhash's affine32 scheme) over its informative shingles (those in at most MAX_ITEM_DF items;
"of the" identifies nothing and would make every document a candidate); the index maps each shingle
that is some item's argmin for some permutation to its (item, permutations) postings: LSH with one
row per band, so a document shingle probes it with one lookup. The share of an item's permutations
whose argmin shingle lies in a window estimates the item's containment in that window, so a window
holding >= CANDIDATE_SHARE of them is a candidate (J = 0.6 at equal length is containment 0.75).
Candidates are then verified exactly: the item's full shingle set against every window of its length
around the candidate position, so the reported Jaccard is exact, never an estimate.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from mix_assets.stages.audit import contamination as ct
from mix_assets.stages.dedup import minhash
from mix_assets.core import textkeys as tk

FORMAT = "mix_assets.fuzzy_contamination/1"
INDEX_FORMAT = "mix_assets.fuzzy_index/1"
MAX_ITEM_DF = 16  # a shingle in more items is no representative (still counted when verifying); bench/fuzzy.py
CANDIDATE_SHARE = 0.5  # of an item's permutations found in one window: a candidate, verified exactly
HEAVY_BUCKET_BITS = 18  # at most 2**18 bucket sums (2 MB): they stay in cache; more buckets filtered more but missed it
ITEM_CHUNK = 4096  # items signed at a time (bounds the permutations x shingles work matrix)
INDEX_ARRAYS = ("rep_keys", "post_off", "post_item", "post_weight", "item_task", "item_off", "item_sh")


@dataclass(frozen=True)
class Params:
    shingle: int = 2
    num_perm: int = 32
    threshold: float = 0.6
    min_words: int = 8


@dataclass
class Index:
    """Items' shingle sets and the argmin postings of their signatures. Hashes and ints only."""

    params: Params
    tasks: list[str]
    rep_keys: np.ndarray  # sorted unique uint64: shingles that are an item's argmin for >= 1 permutation
    post_off: np.ndarray  # int64 (len(rep_keys) + 1): CSR offsets into post_item / post_weight
    post_item: np.ndarray  # int32 item
    post_weight: np.ndarray  # int32 permutations of that item whose argmin is this shingle
    item_task: np.ndarray  # int32 task of each indexed item
    item_off: np.ndarray  # int64 (items + 1): CSR offsets into item_sh
    item_sh: np.ndarray  # uint64, each item's distinct shingles, sorted
    denominators: dict = field(default_factory=dict)  # per task: items, indexed, too short
    bitmap: ct._Bitmap = field(default=None, repr=False)
    post_hash: np.ndarray = field(default=None, repr=False)  # uint64 hash of each posting's item (`candidates`)
    radix: np.ndarray = field(default=None, repr=False)  # rep_keys' radix buckets (stages/audit/kernels.py)

    def __post_init__(self):
        if self.bitmap is None:
            self.bitmap = ct._Bitmap(self.rep_keys)
        if self.post_hash is None:
            self.post_hash = tk.splitmix64(self.post_item.astype(np.uint64), copy=False)
        if self.radix is None:
            self.radix = _radix_starts(self.rep_keys, self.radix_bits)

    @property
    def radix_bits(self) -> int:
        """Top bits of a rep key naming its radix bucket: about one key per bucket (2**19 int64 at 355k keys)."""
        return max(10, int(np.ceil(np.log2(max(self.rep_keys.size, 1)))))

    @property
    def items(self) -> int:
        return len(self.item_task)

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in INDEX_ARRAYS}

    def meta(self) -> dict:
        return {"format": INDEX_FORMAT, "params": self.params.__dict__, "tasks": self.tasks,
                "max_item_df": MAX_ITEM_DF, "candidate_share": CANDIDATE_SHARE, "denominators": self.denominators}

    @classmethod
    def from_files(cls, meta: dict, arrays: dict[str, np.ndarray]) -> "Index":
        return cls(Params(**meta["params"]), meta["tasks"], denominators=meta["denominators"], **arrays)


def _shingles(texts, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flat uint64 k-word shingle hashes, offsets, words per text); a text of 1..k-1 words is one shingle."""
    h, off = tk.word_hashes(tk.words(texts))
    sh, soff = tk.ngram_hashes(h, off, k, short="whole")
    return sh, soff, np.diff(off)


def _distinct(sh: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each segment's distinct values, sorted, their new offsets, and each value's count of segments:
    a sort per segment (`kernels_jit.segment_distinct`), then one argsort of the distinct values to count them."""
    from mix_assets.core import kernels_jit  # numba loads only in processes that run a kernel (core/kernels_jit.py)

    vals, out = np.empty(len(sh), np.uint64), np.empty(len(off), np.int64)
    vals = vals[: kernels_jit.segment_distinct(np.ascontiguousarray(sh, np.uint64), np.ascontiguousarray(off, np.int64),
                                               vals, out)]
    order, sv = _argsort_u64(vals)
    new = np.ones(len(sv), bool)
    new[1:] = sv[1:] != sv[:-1]
    group = np.cumsum(new) - 1
    df = np.empty(len(vals), np.int64)
    df[order] = np.bincount(group, minlength=int(group[-1]) + 1 if len(group) else 0)[group]
    return vals, out, df


def _argsort_u64(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(an argsort of uint64 `a`, equal values in any order; `a` sorted) from one value sort of each
    value's top bits packed with its position (several times faster than np.argsort here); np.argsort
    when two different values share those top bits (rare: they then come out in position order)."""
    pb = np.uint64(max(len(a) - 1, 1).bit_length())
    packed = a >> pb << pb
    packed |= np.arange(len(a), dtype=np.uint64)
    packed.sort()
    order = (packed & ((np.uint64(1) << pb) - np.uint64(1))).astype(np.int64)
    s = a[order]
    if len(s) > 1 and (s[1:] < s[:-1]).any():
        order = np.argsort(a)
        s = a[order]
    return order, s


def _argmin_weights(sh: np.ndarray, off: np.ndarray, a: np.ndarray, b: np.ndarray, threads: int = 2) -> np.ndarray:
    """For every shingle of the items (segments of `sh`), how many permutations have it as their item's
    minimum (tied shingles each count). ITEM_CHUNK items at a time, split over `threads` threads (numpy
    releases the GIL; each thread takes every threads-th chunk of ITEM_CHUNK // threads items, so the
    work buffers stay the size one thread had), in buffers reused across chunks (a fresh large array
    costs a page fault per 4 KB written)."""
    x = minhash.fmix32(minhash.shingle_hash32(sh))
    w = np.zeros(len(sh), np.int32)
    items, step = len(off) - 1, max(ITEM_CHUNK // max(threads, 1), 1)
    starts = list(range(0, items, step))
    if threads <= 1 or len(starts) <= 1:
        _weights_of(x, off, a, b, starts, step, w)
        return w
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for f in [pool.submit(_weights_of, x, off, a, b, starts[t::threads], step, w) for t in range(threads)]:
            f.result()
    return w


def _weights_of(x: np.ndarray, off: np.ndarray, a: np.ndarray, b: np.ndarray, starts: list[int], step: int,
                w: np.ndarray) -> None:
    """`_argmin_weights` of the chunks of `step` items at `starts`, into `w` (of hashed shingles `x`)."""
    items, p = len(off) - 1, len(a)
    most = max((int(off[min(s + step, items)] - off[s]) for s in starts), default=0)
    mbuf, gbuf, ebuf = np.empty(p * most, np.uint32), np.empty(p * most, np.uint32), np.empty(p * most, bool)
    for s in starts:
        lo, hi = off[s], off[min(s + step, items)]
        seg_off = off[s : min(s + step, items) + 1] - lo
        lens = np.diff(seg_off)
        nonempty = np.flatnonzero(lens)
        if not nonempty.size:
            continue
        m, g, eq = (buf[: p * (hi - lo)].reshape(p, hi - lo) for buf in (mbuf, gbuf, ebuf))
        with np.errstate(over="ignore"):
            np.multiply(a[:, None], x[None, lo:hi], out=m)  # (num_perm, shingles) uint32
            m += b[:, None]
        full = np.zeros((p, len(lens)), np.uint32)
        full[:, nonempty] = np.minimum.reduceat(m, seg_off[nonempty], axis=1)
        np.take(full, _owners(lens), axis=1, out=g)
        np.equal(m, g, out=eq)
        w[lo:hi] = np.count_nonzero(eq, axis=0)


def build_index(task_items: dict[str, list[str]], params: Params = Params()) -> Index:
    """The index of every task's items (item text is dropped once hashed)."""
    return build_index_from_words({name: tk.word_hashes(tk.words(pa.array(list(items), pa.large_string())))
                                   for name, items in task_items.items()}, params)


def build_index_from_words(task_words: dict[str, tuple[np.ndarray, np.ndarray]], params: Params = Params()) -> Index:
    """`build_index` from each task's items as normalised word hashes and offsets (`textkeys.word_hashes`),
    e.g. those the eval registry computed from the same items."""
    k = params.shingle
    tasks, parts, item_task, den = list(task_words), [], [], {}
    for t, (name, (h, woff)) in enumerate(task_words.items()):
        sh, off = tk.ngram_hashes(h, woff, k, short="whole")
        nwords = np.diff(woff)
        long_enough = nwords >= max(params.min_words, 1)
        sel = np.flatnonzero(long_enough)
        lens = np.diff(off)[sel]
        parts.append((sh[np.repeat(long_enough, np.diff(off))], lens))
        item_task.append(np.full(sel.size, t, np.int32))
        den[name] = {"items": len(nwords), "items_indexed": int(sel.size),
                     "items_too_short": int((nwords > 0).sum() - sel.size), "items_empty": int((nwords == 0).sum())}
    lens = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    raw_off = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=raw_off[1:])
    flat = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.uint64)
    item_sh, item_off, df = _distinct(flat, raw_off)
    informative = df <= MAX_ITEM_DF
    owner = np.repeat(np.arange(len(lens)), np.diff(item_off))
    inf_off = np.zeros_like(item_off)
    np.cumsum(np.bincount(owner[informative], minlength=len(lens)), out=inf_off[1:])
    inf_sh = item_sh[informative]
    w = _argmin_weights(inf_sh, inf_off, *minhash.permutations(params.num_perm))
    at = np.flatnonzero(w)  # ascending: items in order
    rep_keys, post_off, post_item, post_weight = _postings(inf_sh[at], _owners(np.diff(inf_off))[at], w[at])
    item_task = np.concatenate(item_task) if item_task else np.zeros(0, np.int32)
    for t, name in enumerate(tasks):  # every shingle in > MAX_ITEM_DF items: never a candidate
        den[name]["items_unrepresented"] = int((np.diff(inf_off)[item_task == t] == 0).sum())
    return Index(params, tasks, rep_keys, post_off, post_item, post_weight, item_task, item_off, item_sh, den)


def _postings(rep: np.ndarray, item: np.ndarray, weight: np.ndarray):
    """CSR from distinct (shingle, item) pairs and their weights: sorted unique shingles, their (item,
    weight) postings, items ascending (a shingle's rank and its item packed in one int64 sort)."""
    order, sr = _argsort_u64(rep)
    new = np.ones(len(sr), bool)
    new[1:] = sr[1:] != sr[:-1]
    keys = sr[new]
    bits = int(item.max()).bit_length() if item.size else 0
    pair, weight = _sorted_with((np.cumsum(new) - 1) << bits | item[order], weight[order])
    rank, item = pair >> bits, pair & ((1 << bits) - 1)
    off = np.zeros(len(keys) + 1, np.int64)
    np.cumsum(np.bincount(rank, minlength=len(keys)), out=off[1:])
    return keys, off, item.astype(np.int32), weight.astype(np.int32)


# -- the scan --------------------------------------------------------------------------------------


@dataclass
class Matches:
    """Verified matches of a batch: document (row in the batch), item, exact window Jaccard."""

    doc: np.ndarray  # int64
    item: np.ndarray  # int64
    jaccard: np.ndarray  # float64

    @classmethod
    def empty(cls) -> "Matches":
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))


def candidates(index: Index, sh: np.ndarray, soff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shingle position, item) of each (document, item) whose best window holds >= CANDIDATE_SHARE of
    the item's permutations' argmin shingles."""
    if not sh.size or not index.rep_keys.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    from mix_assets.stages.audit import kernels  # numba loads only in processes that run a kernel (core/kernels_jit.py)
    # the rep-key hits grouped by key (postings then read in order), with their documents, in one compiled pass
    pos, r, doc = kernels.key_hits(np.ascontiguousarray(sh, np.uint64), np.ascontiguousarray(soff, np.int64),
                                       index.bitmap.shift, index.bitmap.bits, index.rep_keys, index.radix,
                                       np.uint64(64 - index.radix_bits))
    need = np.ceil(CANDIDATE_SHARE * index.params.num_perm)
    at, pos = _heavy_postings(index, pos, r, doc, need)
    item, weight = index.post_item[at].astype(np.int64), index.post_weight[at].astype(np.int64)
    span = np.int64(len(sh) + 1)
    key = item * span + pos
    if not key.size:
        return key, key
    # keys are distinct (a shingle's postings name an item once): any sort is stable
    key, weight = _sorted_with(key, weight)
    item = key // span
    pos = key - item * span
    doc = np.searchsorted(soff, pos, side="right") - 1
    # a window lies in one (item, document) run of keys: drop the runs too light for any candidate
    new = np.ones(len(key), bool)
    new[1:] = (item[1:] != item[:-1]) | (doc[1:] != doc[:-1])
    starts = np.flatnonzero(new)
    csum = np.concatenate([[0], np.cumsum(weight)])
    heavy = (np.diff(csum[np.append(starts, len(key))]) >= need)[np.cumsum(new) - 1]
    key, weight, item, pos, doc = key[heavy], weight[heavy], item[heavy], pos[heavy], doc[heavy]
    csum = np.concatenate([[0], np.cumsum(weight)])
    m = np.diff(index.item_off)[item]
    end = np.searchsorted(key, item * span + np.minimum(pos + m, soff[doc + 1]))
    count = csum[end] - csum[np.arange(len(key))]
    ok = count >= need
    pos, item, count, doc = pos[ok], item[ok], count[ok], doc[ok]
    # one candidate per (document, item): its best window start
    order = np.lexsort((-count, doc, item))
    pos, item, doc = pos[order], item[order], doc[order]
    first = np.ones(len(pos), bool)
    first[1:] = (item[1:] != item[:-1]) | (doc[1:] != doc[:-1])
    return pos[first], item[first]


def _radix_starts(keys: np.ndarray, bits: int) -> np.ndarray:
    """int64 (2**bits + 1): where each bucket of the top `bits` bits of the sorted uint64 `keys` starts."""
    start = np.zeros((1 << bits) + 1, np.int64)
    np.cumsum(np.bincount((keys >> np.uint64(64 - bits)).astype(np.int64), minlength=1 << bits), out=start[1:])
    return start


def _heavy_postings(index: Index, pos: np.ndarray, r: np.ndarray, doc: np.ndarray,
                    need: float) -> tuple[np.ndarray, np.ndarray]:
    """(posting, shingle position) of the postings of the rep-key hits (positions `pos`, keys `r`) that
    may be in an (item, document) pair of weight >= `need`: the weights summed per bucket of pairs (top
    bits of the item's and the document's hashes' sum) bound each pair's own sum, so a posting in a
    light bucket is in a light pair. On prose about 1 posting in 700 is in a heavy pair and a few in 100
    in a heavy bucket: only those are kept. One compiled pass over the postings in place
    (`kernels_jit.heavy_postings`), no per-posting array."""
    n = int((index.post_off[r + 1] - index.post_off[r]).sum()) if r.size else 0
    bits = min(HEAVY_BUCKET_BITS, max(10, n.bit_length()))
    with np.errstate(over="ignore"):
        doc_hash = (doc.astype(np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    from mix_assets.core import kernels_jit  # numba loads only in processes that run a kernel (core/kernels_jit.py)
    return kernels_jit.heavy_postings(pos, r, doc_hash, index.post_off, index.post_hash, index.post_weight,
                                      float(need), bits)


def _owners(n: np.ndarray) -> np.ndarray:
    """`np.repeat(np.arange(len(n)), n)` for counts n >= 0, from a cumulative sum: np.repeat holds the
    GIL, which the scan's other thread then waits for."""
    nz = np.flatnonzero(n)
    step = np.zeros(int(n.sum()), np.int64)
    if nz.size:
        step[(np.cumsum(n) - n)[nz[1:]]] = np.diff(nz)
        step[0] = nz[0]
    return np.cumsum(step)


def _sorted_with(key: np.ndarray, val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct non-negative int64 `key` ascending, `val` (non-negative) permuted alike: one value sort
    of both packed into an int64 when they fit, else an argsort."""
    if not key.size:
        return key, val
    vbits = int(val.max()).bit_length()
    if int(val.min()) >= 0 and int(key.max()).bit_length() + vbits <= 62:
        packed = key << vbits | val
        packed.sort()
        return packed >> vbits, packed & ((1 << vbits) - 1)
    order = np.argsort(key)
    return key[order], val[order]


def best_jaccards(index: Index, sh: np.ndarray, soff: np.ndarray, pos: np.ndarray, item: np.ndarray) -> np.ndarray:
    """Exact Jaccard of each candidate's item shingles with its best equal-length window of the document
    near `pos` (from m before to 2m after, m the item's shingles), all candidates at once: each window's
    distinct shingles and those in the item come from range counts over the region, no window is sorted."""
    if not pos.size:
        return np.zeros(0)
    m = np.diff(index.item_off)[item]
    d = np.searchsorted(soff, pos, side="right") - 1
    lo, hi = np.maximum(soff[d], pos - m), np.minimum(soff[d + 1], pos + 2 * m)
    rlen = hi - lo
    w = np.minimum(m, rlen)
    nwin = rlen - w + 1
    c = _owners(rlen)  # the candidate of each region element
    rstart = np.cumsum(rlen) - rlen
    t = np.arange(rlen.sum()) - rstart[c]  # its position in its region
    val = sh[lo[c] + t]
    # the item's shingles tagged 0 and the region's 1, grouped by (candidate, value): a region element
    # is in the item when its group starts with an item shingle; its previous occurrence precedes it
    ic = _owners(m)
    ival = index.item_sh[(index.item_off[item] - np.cumsum(m) + m)[ic] + np.arange(ic.size)]
    allc, allv = np.concatenate([ic, c]), np.concatenate([ival, val])
    kind = np.concatenate([np.zeros(ic.size, np.int8), np.ones(c.size, np.int8)])
    at = np.concatenate([np.full(ic.size, -1), t])
    order = np.lexsort((at, kind, allv, allc))
    allc, allv, kind, at = allc[order], allv[order], kind[order], at[order]
    first = np.ones(order.size, bool)
    first[1:] = (allc[1:] != allc[:-1]) | (allv[1:] != allv[:-1])
    group_first = np.maximum.accumulate(np.where(first, np.arange(order.size), 0))
    in_item = kind[group_first] == 0
    prev = np.where(first, -1, np.roll(at, 1))  # the item's tag -1 reads as "none before"
    reg = kind == 1
    cc, tt, prev, in_item = allc[reg], at[reg], prev[reg], in_item[reg]
    # element tt counts as distinct for the windows j in [max(prev + 1, tt - w + 1), min(tt, nwin - 1)]
    j0 = np.maximum(prev + 1, tt - w[cc] + 1)
    j1 = np.minimum(tt, nwin[cc] - 1)
    live = j0 <= j1
    wstart = np.cumsum(nwin) - nwin
    a, b = (wstart[cc] + j0)[live], (wstart[cc] + j1 + 1)[live]
    total = int(nwin.sum())
    distinct = np.cumsum(np.bincount(a, minlength=total + 1) - np.bincount(b, minlength=total + 1))[:total]
    ia, ib = a[in_item[live]], b[in_item[live]]
    inter = np.cumsum(np.bincount(ia, minlength=total + 1) - np.bincount(ib, minlength=total + 1))[:total]
    union = m[_owners(nwin)] + distinct - inter
    return np.maximum.reduceat(inter / union, wstart)


def scan_texts(index: Index, texts) -> Matches:
    """Verified matches (J >= threshold) of a batch of document texts."""
    return scan_word_hashes(index, *tk.word_hashes(tk.words(texts)))


def scan_word_hashes(index: Index, h: np.ndarray, off: np.ndarray) -> Matches:
    """`scan_texts` from the batch's normalised word hashes (`textkeys.word_hashes`), as the 13-gram scan
    has them: one normalisation of the text serves both scans."""
    sh, soff = tk.ngram_hashes(h, off, index.params.shingle, short="whole")
    pos, item = candidates(index, sh, soff)
    if not pos.size:
        return Matches.empty()
    jac = best_jaccards(index, sh, soff, pos, item)
    ok = jac >= index.params.threshold
    return Matches(np.searchsorted(soff, pos[ok], side="right") - 1, item[ok], jac[ok])


# -- the report ------------------------------------------------------------------------------------


@dataclass
class Tally:
    """Per source x task: documents scanned and matched, items matched; per matched document its tasks."""

    tasks: list[str]
    docs_scanned: dict[str, int] = field(default_factory=dict)
    hits: list[tuple] = field(default_factory=list)  # (doc_id, source, tasks, items per task, max jaccard)
    items: dict[str, set] = field(default_factory=dict)  # per task: matched item indices

    def add(self, source: str, doc_ids: list, m: Matches, item_task: np.ndarray) -> None:
        self.docs_scanned[source] = self.docs_scanned.get(source, 0) + len(doc_ids)
        task = item_task[m.item]
        for t, i in zip(task, m.item):
            self.items.setdefault(self.tasks[t], set()).add(int(i))
        for d in np.unique(m.doc):
            sel = m.doc == d
            ts, n = np.unique(task[sel], return_counts=True)
            self.hits.append((str(doc_ids[d]), source, [self.tasks[t] for t in ts], n.tolist(),
                              round(float(m.jaccard[sel].max()), 4)))

    def report(self, exact: set[str], denominators: dict, params: Params) -> dict:
        """Counts per source x task; `fuzzy_only_docs` are matched documents the exact audit did not flag."""
        sources = {}
        for s, n in self.docs_scanned.items():
            mine = [h for h in self.hits if h[1] == s]
            tasks = {t: {"docs_matched": sum(t in h[2] for h in mine),
                         "fuzzy_only_docs": sum(t in h[2] and h[0] not in exact for h in mine)} for t in self.tasks}
            sources[s] = {"docs_scanned": n, "docs_matched": len(mine),
                          "fuzzy_only_docs": sum(h[0] not in exact for h in mine), "tasks": tasks}
        return {"format": FORMAT, "advisory": True, "params": params.__dict__, "max_item_df": MAX_ITEM_DF,
                "denominators": {t: {**d, "items_matched": len(self.items.get(t, ()))} for t, d in denominators.items()},
                "sources": sources, "docs_scanned": sum(self.docs_scanned.values()),
                "docs_matched": len(self.hits), "fuzzy_only_docs": sum(h[0] not in exact for h in self.hits)}

    def table(self, exact: set[str]) -> pa.Table:
        hits = sorted(self.hits, key=lambda h: (h[1], h[0]))
        return pa.table({
            "doc_id": pa.array([h[0] for h in hits], pa.string()),
            "source": pa.array([h[1] for h in hits], pa.string()),
            "tasks": pa.array([h[2] for h in hits], pa.list_(pa.string())),
            "task_items": pa.array([h[3] for h in hits], pa.list_(pa.int64())),  # items matched, aligned with tasks
            "max_jaccard": pa.array([h[4] for h in hits], pa.float64()),
            "exact_hit": pa.array([h[0] in exact for h in hits], pa.bool_()),
        })


def dumps(obj: dict) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)

