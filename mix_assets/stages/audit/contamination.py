"""13-gram contamination scan: documents against the eval registry, counts and ids only.

The registry is, per task, a sorted unique uint64 array of hashed n-grams of its reference items
(`textkeys` hashing, so dedup and audit normalise identically). Items shorter than `n` words are
one n-gram over all their words (the whole-item rule), kept when they have at least
`short_item_min_words` words; the scan therefore looks up every document window of length n and of
each short-item length present in the registry.

Lookups are one `np.searchsorted` of a batch's window hashes into the union of all tasks' keys
(never `np.isin`, which re-sorts the reference on every call), with a key x task membership matrix.
Window hashes come from prefix sums (the polynomial hash is invertible mod 2**64: P is odd), so each
extra window length costs a few vector operations instead of L multiply-adds; they are bit-identical
to `textkeys.ngram_hashes` (tested). Batches run on a thread pool: Arrow string kernels and numpy
release the GIL, so both cores work.

Nothing here returns or logs text: results are integer arrays.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from mix_assets.core import textkeys as tk

_P = int(tk._P)
_PINV = pow(_P, -1, 1 << 64)
REGISTRY_FORMAT = "mix_assets.eval_registry/1"
REPORT_FORMAT = "mix_assets.contamination_report/1"


# -- window hashing ------------------------------------------------------------------------------

_pow_lock = threading.Lock()
_pows: tuple[np.ndarray, np.ndarray] = (np.ones(1, np.uint64), np.ones(1, np.uint64))


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(P**k, P**-k) for k < n, mod 2**64 (grown and cached)."""
    global _pows
    pw, ipw = _pows
    if len(pw) >= n:
        return pw, ipw
    with _pow_lock:
        size = max(n, 2 * len(_pows[0]), 1 << 16)
        pw = np.full(size, _P, np.uint64)
        ipw = np.full(size, _PINV, np.uint64)
        pw[0] = ipw[0] = 1
        with np.errstate(over="ignore"):
            np.cumprod(pw, out=pw)
            np.cumprod(ipw, out=ipw)
        _pows = (pw, ipw)
        return _pows


class _Prefix:
    """Prefix sums of word hashes of one batch: any window's hash in O(1)."""

    def __init__(self, hashes: np.ndarray, offsets: np.ndarray):
        self.total = total = len(hashes)
        self.pw, ipw = _powers(total + 1)
        self.c = np.zeros(total + 1, np.uint64)
        with np.errstate(over="ignore"):
            np.cumsum(hashes * ipw[:total], out=self.c[1:])
        self.offsets = offsets

    @functools.cached_property
    def doc_of(self) -> np.ndarray:
        """The document of every word position."""
        return np.repeat(np.arange(len(self.offsets) - 1, dtype=np.int64), np.diff(self.offsets))

    def docs(self, start: np.ndarray) -> np.ndarray:
        """The document of each of a few word positions (no per-word array)."""
        return np.searchsorted(self.offsets, start, side="right") - 1

    def all_windows(self, L: int) -> np.ndarray:
        """Hashes of the windows starting at every position 0..total-L (boundaries NOT checked)."""
        m = self.total - L + 1
        if m <= 0:
            return np.zeros(0, np.uint64)
        with np.errstate(over="ignore"):
            v = np.subtract(self.c[L : L + m], self.c[:m])
            np.multiply(v, self.pw[L - 1 : L - 1 + m], out=v)
        v ^= np.uint64(L)
        return tk.splitmix64(v, copy=False)

    def bitmap_hits(self, L: int, bitmap: "_Bitmap") -> tuple[np.ndarray, np.ndarray]:
        """(start, hash) of the windows `all_windows(L)` whose bit is set in `bitmap`, in one compiled
        pass that never holds every window's hash (boundaries NOT checked)."""
        from mix_assets.core import kernels_jit  # numba loads only in processes that run a kernel (core/kernels_jit.py)
        return kernels_jit.window_bitmap_hits(self.c, self.pw, L, bitmap.shift, bitmap.bits)

    def at(self, start: np.ndarray, length: np.ndarray) -> np.ndarray:
        """Hashes of the windows (start[i], length[i]); caller checks they fit their document."""
        with np.errstate(over="ignore"):
            v = self.c[start + length] - self.c[start]
            v *= self.pw[start + length - 1]
        v ^= length.astype(np.uint64)
        return tk.splitmix64(v, copy=False)

    def inside(self, start: np.ndarray, length: np.ndarray | int) -> np.ndarray:
        """Which windows lie inside one document."""
        return start + length <= self.offsets[self.docs(start) + 1]


def window_hashes(
    hashes: np.ndarray, offsets: np.ndarray, lengths: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every window of each length in `lengths` that lies inside one document.

    Returns (uint64 hashes, int64 document index), windows grouped by length. Equal to
    `textkeys.ngram_hashes(hashes, offsets, L, short="drop")` for each L.
    """
    pre = _Prefix(hashes, offsets)
    out_h, out_d = [np.zeros(0, np.uint64)], [np.zeros(0, np.int64)]
    for L in lengths:
        v = pre.all_windows(L)
        ok = pre.inside(np.arange(v.size, dtype=np.int64), L)
        out_h.append(v[ok])
        out_d.append(pre.doc_of[: v.size][ok])
    return np.concatenate(out_h), np.concatenate(out_d)


# -- the registry --------------------------------------------------------------------------------


@dataclass
class TaskNgrams:
    """One task's registry entry: hashes and denominators (counts only, no text)."""

    hashes: np.ndarray  # sorted unique uint64: every n-gram, and one whole-item hash per short item
    short: np.ndarray  # uint64 (k, 3): [hash of first short_item_min_words words, length, whole hash]
    items: int
    ngrams: int  # len(hashes)
    short_items: int  # items with short_item_min_words <= words < n: one whole-item n-gram each
    short_items_unmatched: int  # items with fewer words than short_item_min_words: not matchable
    empty_items: int  # items that normalise to no words
    scrub: np.ndarray | None = None  # with scrub_k: `scrub_ngrams(items, scrub_k)`, from the same normalisation
    words: tuple[np.ndarray, np.ndarray] | None = None  # with keep_words: the items' word hashes and offsets


def item_words(items: Sequence[str], chunk: int = 4096, threads: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    """`textkeys.word_hashes` of the items, `chunk` items at a time (which bounds the Arrow buffers of the
    normalisation), on up to `threads` threads: one (hashes, offsets) per chunk."""
    chunks = [items[i : i + chunk] for i in range(0, len(items), chunk)] or [[]]
    return list(ordered_map(_words_of, chunks, threads))


def _words_of(items: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    return tk.word_hashes(tk.words(pa.array(list(items), pa.large_string())))


def task_ngrams(
    items: Sequence[str], n: int = 13, short_item_min_words: int = 8, chunk: int = 4096,
    scrub_k: int | None = None, keep_words: bool = False, threads: int = 1,
    words: list[tuple[np.ndarray, np.ndarray]] | None = None,
) -> TaskNgrams:
    """Hashed n-grams of reference items, with the whole-item rule for short items (and, with
    `scrub_k`, their scrub set: the items are normalised and their words hashed once for both; with
    `keep_words`, those word hashes, `textkeys.word_hashes` of all the items).

    `words`: `item_words(items, chunk)` when the caller has it already (the items are not read then).
    """
    words = item_words(items, chunk, threads) if words is None else words
    one = functools.partial(_task_ngrams, n=n, short_item_min_words=short_item_min_words, scrub_k=scrub_k)
    parts = list(ordered_map(lambda hw: one(*hw), words, threads))
    hashes = merged_unique([p.hashes for p in parts])
    short = np.concatenate([p.short for p in parts])
    return TaskNgrams(
        hashes=hashes,
        short=np.unique(short, axis=0) if len(short) else short,
        items=sum(p.items for p in parts),
        ngrams=int(hashes.size),
        short_items=sum(p.short_items for p in parts),
        short_items_unmatched=sum(p.short_items_unmatched for p in parts),
        empty_items=sum(p.empty_items for p in parts),
        scrub=None if scrub_k is None else merged_unique([p.scrub for p in parts]),
        words=joined_words(words) if keep_words else None,
    )


def joined_words(words: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive batches' (word hashes, offsets) as one."""
    ends = np.cumsum([0] + [len(h) for h, _ in words])
    off = np.concatenate([[0]] + [o[1:] + e for (_, o), e in zip(words, ends)]).astype(np.int64)
    return np.concatenate([h for h, _ in words]).astype(np.uint64, copy=False), off


def _task_ngrams(h: np.ndarray, off: np.ndarray, n: int, short_item_min_words: int,
                 scrub_k: int | None = None) -> TaskNgrams:
    """`task_ngrams` of one chunk of items, from their word hashes and offsets."""
    lens = np.diff(off)
    grams, goff = tk.ngram_hashes(h, off, n, short="whole")
    short = (lens > 0) & (lens < n)
    matched = short & (lens >= short_item_min_words)
    unmatched = short & ~matched
    keep = np.ones(len(grams), bool)
    keep[goff[:-1][unmatched]] = False  # a short item owns exactly one entry, at its offset
    uniq = sorted_unique(grams[keep])
    sd = np.flatnonzero(matched)
    if sd.size:
        pre = _Prefix(h, off)
        first = pre.at(off[sd], np.full(sd.size, short_item_min_words, np.int64))
        table = np.stack([first, lens[sd].astype(np.uint64), grams[goff[sd]]], axis=1)
        table = np.unique(table, axis=0)
    else:
        table = np.zeros((0, 3), np.uint64)
    return TaskNgrams(
        hashes=uniq,
        short=table,
        items=len(off) - 1,
        ngrams=int(uniq.size),
        short_items=int(matched.sum()),
        short_items_unmatched=int(unmatched.sum()),
        empty_items=int((lens == 0).sum()),
        scrub=None if scrub_k is None else sorted_unique(_runs(h, off, scrub_k)),  # sorted on the chunk's thread
    )


def scrub_ngrams(items: Sequence[str], k: int = 8) -> np.ndarray:
    """Sorted unique hashes of every k-word run of the items (for the scrub check)."""
    if not items:
        return np.zeros(0, np.uint64)
    return sorted_unique(_runs(*tk.word_hashes(tk.words(pa.array(list(items), pa.large_string()))), k))


def _runs(h: np.ndarray, off: np.ndarray, k: int) -> np.ndarray:
    return tk.ngram_hashes(h, off, k, short="drop")[0].astype(np.uint64, copy=False)


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
        """Positions in `v` of the values whose bit is set (every key's is)."""
        from mix_assets.core import kernels_jit  # numba loads only in processes that run a kernel (core/kernels_jit.py)
        return kernels_jit.bitmap_hits(np.ascontiguousarray(v, np.uint64), self.shift, self.bits)

    def lookup(self, keys: np.ndarray, v: np.ndarray, by_key: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(positions in `v` of the values in `keys`, their indices in `keys`), in position order, or
        with `by_key` in key order; `keys`: the non-empty sorted keys the bitmap was built from."""
        cand = self.candidates(v)
        return self.found(keys, cand, v[cand], by_key)

    def found(self, keys: np.ndarray, cand: np.ndarray, w: np.ndarray, by_key: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """`lookup` of the candidates `cand` (ascending positions) with values `w`. Looked up in
        ascending order: searchsorted then walks the keys once instead of missing the cache at random."""
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

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes)


@dataclass
class Registry:
    """All tasks' n-grams as one sorted key array plus a key x task membership matrix."""

    tasks: list[str]
    n: int
    keys: np.ndarray  # sorted unique uint64 (every task's n-grams and whole-item hashes)
    member: np.ndarray  # bool (len(keys), len(tasks))
    short_first: np.ndarray  # uint64, sorted: first-words hash of each short item
    short_len: np.ndarray  # int64 item length in words
    short_whole: np.ndarray  # uint64 whole-item hash
    short_member: np.ndarray  # bool (len(short_first), len(tasks))
    short_min: int
    bitmap: _Bitmap = field(repr=False, default=None)
    short_bitmap: _Bitmap = field(repr=False, default=None)  # over short_first: most windows start no short item

    @classmethod
    def build(
        cls, per_task: dict[str, TaskNgrams | np.ndarray], n: int = 13, short_min: int = 8
    ) -> "Registry":
        tasks = list(per_task)
        hashes = [v.hashes if isinstance(v, TaskNgrams) else np.asarray(v, np.uint64) for v in per_task.values()]
        shorts = [v.short if isinstance(v, TaskNgrams) else np.zeros((0, 3), np.uint64) for v in per_task.values()]
        keys, member = _union(hashes)
        rows, smember = _union_rows(shorts)
        order = np.argsort(rows[:, 0], kind="stable")
        rows, smember = rows[order], smember[order]
        reg = cls(
            tasks=tasks,
            n=n,
            keys=keys,
            member=member,
            short_first=np.ascontiguousarray(rows[:, 0]),
            short_len=rows[:, 1].astype(np.int64),
            short_whole=np.ascontiguousarray(rows[:, 2]),
            short_member=smember,
            short_min=short_min,
        )
        reg.bitmap, reg.short_bitmap = _Bitmap(keys), _Bitmap(reg.short_first)
        return reg

    def in_order(self, tasks: Sequence[str]) -> "Registry":
        """This registry with its task columns in the order of `tasks` (the same tasks): what `build` gives
        for the tasks inserted in that order (keys and short rows do not depend on it; the order of every
        per-task count does). Shares the key arrays and prefilters."""
        if sorted(tasks) != sorted(self.tasks) or len(set(tasks)) != len(tasks):
            raise ValueError(f"registry tasks {self.tasks} cannot be put in the order {list(tasks)}")
        if list(tasks) == self.tasks:
            return self
        idx = [self.tasks.index(t) for t in tasks]
        return replace(self, tasks=list(tasks), member=self.member[:, idx], short_member=self.short_member[:, idx])

    @property
    def nbytes(self) -> int:
        """Memory held by the registry for scanning."""
        arrays = (self.keys, self.member, self.short_first, self.short_len, self.short_whole, self.short_member)
        return int(sum(a.nbytes for a in arrays) + self.bitmap.nbytes + self.short_bitmap.nbytes)

    def scan_word_hashes(self, h: np.ndarray, off: np.ndarray) -> np.ndarray:
        """int64 (n_docs, n_tasks): overlapping n-gram windows per document and task."""
        n_docs = len(off) - 1
        counts = np.zeros((n_docs, len(self.tasks)), np.int64)
        if len(h) == 0 or self.keys.size + self.short_first.size == 0:
            return counts
        pre = _Prefix(h, off)
        docs, members = [], []
        if self.keys.size:
            start, w = pre.bitmap_hits(self.n, self.bitmap)
            start, idx = self.bitmap.found(self.keys, start, w)
            ok = pre.inside(start, self.n)
            docs.append(pre.docs(start[ok]))
            members.append(self.member[idx[ok]])
        if self.short_first.size:
            # A short item matches where its first `short_min` words match and then its whole
            # window does; all short items sharing those first words are tried.
            cand, w = pre.bitmap_hits(self.short_min, self.short_bitmap)
            lo = np.searchsorted(self.short_first, w, side="left")
            hi = np.searchsorted(self.short_first, w, side="right")
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

    def scan_texts(self, texts: Sequence[str] | pa.Array) -> np.ndarray:
        """int64 (n_docs, n_tasks) overlap counts for a batch of raw document texts."""
        h, off = tk.word_hashes(tk.words(texts))
        return self.scan_word_hashes(h, off)

    def scan_batches(self, batches: Iterable, threads: int = 2) -> Iterator[np.ndarray]:
        """Counts per batch, in input order, scanning up to `threads` batches at a time."""
        return ordered_map(self.scan_texts, batches, threads)


def ordered_map(fn, items: Iterable, threads: int = 2) -> Iterator:
    """fn(item) for every item, in input order, up to `threads` at a time (numpy and Arrow release the GIL)."""
    if threads <= 1:
        for b in items:
            yield fn(b)
        return
    with ThreadPoolExecutor(max_workers=threads) as pool:
        window: deque = deque()
        for b in items:
            window.append(pool.submit(fn, b))
            if len(window) > threads:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def _union(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique keys of all arrays, key x array membership). A stable sort merges the arrays (each task's
    is sorted) and one searchsorted per array marks its keys: ~3x faster than np.unique(return_inverse)
    (numpy 2.4), which every process that loads the registry pays."""
    keys = sorted_unique(np.concatenate(arrays), kind="stable") if arrays else np.zeros(0, np.uint64)
    member = np.zeros((keys.size, len(arrays)), bool)
    for t, a in enumerate(arrays):
        member[np.searchsorted(keys, a), t] = True  # every value of `a` is in keys
    return keys, member


def _union_rows(tables: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    allr = np.concatenate(tables) if tables else np.zeros((0, 3), np.uint64)
    if allr.size == 0:
        return np.zeros((0, 3), np.uint64), np.zeros((0, len(tables)), bool)
    rows, inv = np.unique(allr, axis=0, return_inverse=True)
    member = np.zeros((len(rows), len(tables)), bool)
    member[inv.ravel(), np.repeat(np.arange(len(tables)), [len(t) for t in tables])] = True
    return rows, member


# -- the report ----------------------------------------------------------------------------------


@dataclass
class Tally:
    """Per source x task counters and contaminated doc ids. Holds no text."""

    tasks: list[str]
    docs_scanned: dict[str, int] = field(default_factory=dict)
    docs_with_overlap: dict[str, np.ndarray] = field(default_factory=dict)  # per source, per task
    overlap_ngrams: dict[str, np.ndarray] = field(default_factory=dict)
    contaminated: dict[str, int] = field(default_factory=dict)  # docs with >= 1 overlap, any task
    # doc_id, source, tasks hit, n-grams over those tasks, n-grams per task hit (aligned with tasks)
    hits: list[tuple[str, str, list[str], int, list[int]]] = field(default_factory=list)

    def add(self, source: str, doc_ids: Sequence[str], counts: np.ndarray) -> None:
        k = len(self.tasks)
        self.docs_scanned[source] = self.docs_scanned.get(source, 0) + len(doc_ids)
        self.docs_with_overlap.setdefault(source, np.zeros(k, np.int64))
        self.overlap_ngrams.setdefault(source, np.zeros(k, np.int64))
        self.contaminated.setdefault(source, 0)
        self.docs_with_overlap[source] += (counts > 0).sum(axis=0)
        self.overlap_ngrams[source] += counts.sum(axis=0)
        for i in np.flatnonzero(counts.any(axis=1)):
            row, hit = counts[i], np.flatnonzero(counts[i])
            self.hits.append((str(doc_ids[i]), source, [self.tasks[t] for t in hit], int(row.sum()),
                              row[hit].tolist()))
            self.contaminated[source] += 1

    @property
    def overlap_total(self) -> int:
        return int(sum(int(v.sum()) for v in self.overlap_ngrams.values()))

    def rows(self) -> list[dict]:
        """One record per source x task (the report table)."""
        out = []
        for s in self.docs_scanned:
            for t, task in enumerate(self.tasks):
                out.append(
                    {
                        "source": s,
                        "task": task,
                        "docs_scanned": self.docs_scanned[s],
                        "docs_with_overlap": int(self.docs_with_overlap[s][t]),
                        "overlap_ngrams": int(self.overlap_ngrams[s][t]),
                    }
                )
        return out

    def share(self, source: str) -> float:
        n = self.docs_scanned.get(source, 0)
        return self.contaminated.get(source, 0) / n if n else 0.0

    def report(self, n: int, denominators: dict) -> dict:
        sources = {
            s: {
                "docs_scanned": self.docs_scanned[s],
                "contaminated_docs": self.contaminated[s],
                "contaminated_share": round(self.share(s), 6),
                "overlap_ngrams": int(self.overlap_ngrams[s].sum()),
                "tasks": {
                    task: {
                        "docs_with_overlap": int(self.docs_with_overlap[s][t]),
                        "overlap_ngrams": int(self.overlap_ngrams[s][t]),
                    }
                    for t, task in enumerate(self.tasks)
                },
            }
            for s in self.docs_scanned
        }
        return {
            "format": REPORT_FORMAT,
            "ngram": n,
            "denominators": denominators,
            "sources": sources,
            "overlap_total": self.overlap_total,
            "contaminated_docs": sum(self.contaminated.values()),
            "docs_scanned": sum(self.docs_scanned.values()),
        }


# -- scrubbing -----------------------------------------------------------------------------------


def leaking_strings(strings: Sequence[str], scrub: np.ndarray, k: int) -> list[int]:
    """Indices of the strings holding a run of `k` consecutive words of a reference item."""
    if not len(strings) or scrub.size == 0:
        return []
    h, off = tk.word_hashes(tk.words(pa.array(list(strings), pa.large_string())))
    grams, doc = window_hashes(h, off, [k])
    idx = np.minimum(np.searchsorted(scrub, grams), scrub.size - 1)
    return sorted({int(d) for d in doc[scrub[idx] == grams]})


def json_strings(obj) -> Iterator[str]:
    """Every string (keys and values) inside a parsed JSON value."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield str(k)
            yield from json_strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from json_strings(v)


def file_strings(path: str) -> list[str]:
    """The text a file could carry: JSON strings, Parquet string cells and names, else its bytes."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        t = pq.read_table(path)
        out = list(t.column_names)
        for col in t.columns:
            typ = col.type
            while pa.types.is_list(typ) or pa.types.is_large_list(typ):
                col = pa.chunked_array([c.flatten() for c in col.chunks], typ.value_type)
                typ = typ.value_type
            if pa.types.is_string(typ) or pa.types.is_large_string(typ):
                out.extend(x for x in col.to_pylist() if x)
        return out
    if path.endswith(".npy"):
        # A numeric .npy (all the audit writes) cannot carry text; anything else is scanned as bytes.
        try:
            a = np.load(path, allow_pickle=False, mmap_mode="r")
            if a.dtype.kind in "uifb":
                return []
        except ValueError:
            pass
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".json"):
        try:
            return list(json_strings(json.loads(data)))
        except ValueError:
            pass
    # Binary (.npy hashes) or unknown: scan the bytes as text so nothing is skipped.
    return [data.decode("utf-8", errors="replace"), data.decode("latin-1")]


def sorted_unique(a: np.ndarray, kind: str | None = None) -> np.ndarray:
    """np.unique for uint64 via sort (numpy 2.4's hash-based unique is ~100x slower here)."""
    s = np.sort(a, kind=kind)
    if s.size:
        s = s[np.concatenate([[True], s[1:] != s[:-1]])]
    return s


def merged_unique(runs: list[np.ndarray]) -> np.ndarray:
    """`sorted_unique` of the concatenation of arrays that are each sorted: a stable sort (timsort) merges
    the runs it finds, several times faster than sorting the values afresh; equal integers are
    indistinguishable, so the same array as any sort."""
    return sorted_unique(np.concatenate(runs), kind="stable") if runs else np.zeros(0, np.uint64)

