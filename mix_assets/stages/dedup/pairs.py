"""dedup_keys' verified pairs, stored per pair of sources so a rerun compares only the pairs it has not seen.

The reduce's candidate pairs are verified by exact shingle-set Jaccard (lsh.Verifier), which needs both
documents' texts read and shingled (the reduce's text pass, its largest cost). A pair's Jaccard is a pure
function of the two texts, the shingle size and the shingling code, so it is stored once per pair of sources
(layout.DEDUP_PAIRS): rows (row_a in the first source, row_b in the second, source names sorted; row_a <
row_b within one source) and the float64 Jaccard, under a key over both sources' identities (name, row count
and their signature file's metadata: raw data version, num_perm, shingle, seed, signing code) and the code that
shingles and compares (signatures.py and every module it reaches). A source whose raw data changes gets a new
identity, so only the files pairing it are new; the others answer the pairs among unchanged sources.

Banding and candidate generation still run over every document (the candidates' group ranks depend on all
of them, and the argsort that dominates banding does not shrink), as do clusters and the keep rule: the cache
only spares comparisons, and a candidate it does not hold is compared as before, so the output's bytes are a
from-scratch reduce's. A file is written once under its key, atomically, never replaced (a key that exists
holds the same numbers); stale files stay until `python -m mix_assets.gc` removes them (the files no current
or kept signature files key, older than its --keep-days).

`TextPairs` is the second lookup: the last reduce's pairs keyed by the two documents' exact keys (their
normalised texts), one file replaced by each reduce, so a source whose rows moved (an append changes its
sample) still has the pairs among its unchanged texts answered.
"""

from __future__ import annotations

import hashlib
import json
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.core import engine, imports, layout, tables
from mix_assets.stages.dedup import signatures as sig

FORMAT = "mix_assets.dedup_pairs/1"
SCHEMA = pa.schema([("row_a", pa.int64()), ("row_b", pa.int64()), ("jaccard", pa.float64())])
# the text pass (signatures.shingle_task), minhash.shingle_sets and lsh.set_jaccard: an edit invalidates every file
_CODE = imports.source_version(sig.__name__)[:16]


def source_identity(storage, name: str, key: str, rows: int) -> Optional[dict]:
    """What a source's pairs are computed from; None (not stored) when its signature file records no raw version."""
    meta = sig.stored_meta(storage.source(key))
    if not meta or meta.get("raw") is None:
        return None
    return {"source": name, "rows": int(rows), "signatures": meta}


def pair_key(first: dict, second: dict, shingle: int) -> str:
    """The storage key of the pairs between two sources (identities in source-name order)."""
    body = {"format": FORMAT, "code": _CODE, "shingle": shingle, "sources": [first, second]}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return layout.DEDUP_PAIRS.format(key=digest)


class PairStore:
    """Lookup (`cached`, for lsh.dedup) and store (`store`) of verified Jaccards over documents numbered as the
    reduce numbers them: sources in sorted name order, each one's rows in raw row order."""

    def __init__(self, storage, rows: list[int], identities: list[Optional[dict]], shingle: int):
        self.storage, self.rows = storage, np.asarray(rows, np.int64)
        self.starts = np.r_[0, np.cumsum(self.rows)[:-1]].astype(np.int64)
        self.ids, self.shingle = identities, shingle
        self._loaded: dict = {}
        self.reused = 0  # pairs answered from stored files
        self.written: list[str] = []

    @classmethod
    def of(cls, storage, names: list[str], rows: list[int], shingle: int) -> "PairStore":
        ids = [source_identity(storage, n, layout.DEDUP_SIGNATURES.format(source=n), k) for n, k in zip(names, rows)]
        return cls(storage, rows, ids, shingle)

    def key(self, i: int, j: int) -> Optional[str]:
        a, b = self.ids[i], self.ids[j]
        return None if a is None or b is None else pair_key(a, b, self.shingle)

    def _split(self, a: np.ndarray, b: np.ndarray):
        """(source, row) of both ends, ordered so (source, row) of the first is the smaller."""
        sa = np.searchsorted(self.starts, a, side="right") - 1
        sb = np.searchsorted(self.starts, b, side="right") - 1
        ra, rb = a - self.starts[sa], b - self.starts[sb]
        swap = (sa > sb) | ((sa == sb) & (ra > rb))
        return (np.where(swap, sb, sa), np.where(swap, rb, ra), np.where(swap, sa, sb), np.where(swap, ra, rb))

    def _codes(self, j: int, ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
        return ra * max(int(self.rows[j]), 1) + rb

    def _load(self, i: int, j: int):
        if (i, j) not in self._loaded:
            key = self.key(i, j)
            got = None
            if key is not None and self.storage.exists(key):
                t = pq.read_table(self.storage.source(key))
                got = (self._codes(j, t.column("row_a").to_numpy(), t.column("row_b").to_numpy()),
                       t.column("jaccard").to_numpy())
            self._loaded[(i, j)] = got
        return self._loaded[(i, j)]

    def cached(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(hit, jaccard) of the pairs (a[k], b[k]) (document numbers, either way round) the stored files hold."""
        hit, out = np.zeros(len(a), bool), np.zeros(len(a), np.float64)
        sa, ra, sb, rb = self._split(np.asarray(a, np.int64), np.asarray(b, np.int64))
        for i, j in {(int(x), int(y)) for x, y in zip(sa.tolist(), sb.tolist())}:
            got = self._load(i, j)
            if got is None or not len(got[0]):
                continue
            codes, vals = got
            at = np.flatnonzero((sa == i) & (sb == j))
            q = self._codes(j, ra[at], rb[at])
            pos = np.minimum(np.searchsorted(codes, q), len(codes) - 1)
            found = codes[pos] == q
            hit[at[found]], out[at[found]] = True, vals[pos[found]]
        self.reused += int(hit.sum())
        return hit, out

    def store(self, a: np.ndarray, b: np.ndarray, jaccard: np.ndarray) -> list[str]:
        """Write, per pair of sources with an identity and no stored file yet, every pair given between them
        (sorted, each once); returns the keys written."""
        sa, ra, sb, rb = self._split(np.asarray(a, np.int64), np.asarray(b, np.int64))
        jaccard = np.asarray(jaccard, np.float64)
        for i, j in sorted({(int(x), int(y)) for x, y in zip(sa.tolist(), sb.tolist())}):
            key = self.key(i, j)
            if key is None or self.storage.exists(key):
                continue
            at = np.flatnonzero((sa == i) & (sb == j))
            codes, first = np.unique(self._codes(j, ra[at], rb[at]), return_index=True)  # sorted, each once
            keep = at[first]
            tables.write_parquet(self.storage, key, pa.table(
                {"row_a": ra[keep], "row_b": rb[keep], "jaccard": jaccard[keep]}, schema=SCHEMA))
            self.written.append(key)
        return self.written


# -- pairs keyed by text --------------------------------------------------------------------------------------
TEXT_FORMAT = "mix_assets.dedup_text_pairs/1"
TEXT_META_KEY = b"mix_assets.dedup_text_pairs"
TEXT_SCHEMA = pa.schema([("key_a", pa.string()), ("key_b", pa.string()), ("jaccard", pa.float64())])


def text_pairs_key(shingle: int) -> str:
    """Where the last reduce's pairs keyed by text live (one file per shingling code and shingle size)."""
    return layout.DEDUP_PAIRS.format(key=f"by-text-{_CODE}-{int(shingle)}")


class TextPairs:
    """Verified Jaccards keyed by the two documents' exact keys (sha256 of the normalised text: the shingle
    sets, so the Jaccard, are a function of it), whatever source or row holds them: after an append that moves a
    source's rows (its sample changes) and gives it a new identity, the pairs among its unchanged documents are
    still answered; only the pairs touching a new text are compared, and only their row groups' text is read.

    One file (`text_pairs_key`) holds every pair the last reduce verified (cached or compared), replaced by the
    next reduce atomically: a cache like the identity files (the output is a from-scratch reduce's)."""

    def __init__(self, storage, files: list, rows: list[int], shingle: int):
        self.storage, self.files, self.shingle = storage, list(files), int(shingle)
        self.rows = np.asarray(rows, np.int64)
        self.starts = np.r_[0, np.cumsum(self.rows)[:-1]].astype(np.int64)
        self.key = text_pairs_key(shingle)
        self._docs = np.zeros(0, np.int64)
        self._keys = np.zeros(0, "S64")
        self._stored: Optional[tuple[np.ndarray, np.ndarray]] = None
        self.reused = 0

    def keys(self, docs: np.ndarray) -> np.ndarray:
        """The exact keys (hex, S64) of documents `docs` (input indices), read from the signature files'
        row groups holding them (kept for later calls)."""
        docs = np.asarray(docs, np.int64)
        new = np.setdiff1d(docs, self._docs)
        if len(new):
            got = np.empty(len(new), "S64")
            src = np.searchsorted(self.starts, new, side="right") - 1
            for s in np.unique(src).tolist():
                at = np.flatnonzero(src == s)
                rows = new[at] - self.starts[s]
                with engine.open_parquet(self.files[s]) as f:
                    ends = np.cumsum([f.metadata.row_group(g).num_rows for g in range(f.metadata.num_row_groups)])
                    grp = np.searchsorted(ends, rows, side="right")
                    for g in np.unique(grp).tolist():
                        mine = np.flatnonzero(grp == g)
                        col = f.read_row_group(g, columns=["exact_key"], use_threads=False).column(0)
                        off = rows[mine] - (int(ends[g - 1]) if g else 0)
                        vals = col.take(pa.array(off, pa.int64()))
                        if vals.null_count:  # np.array([None], "S64") would be b"None": a key shared by all
                            raise ValueError(f"{self.files[s]}: row group {g}: field 'exact_key' is null")
                        got[at[mine]] = np.array(vals.to_pylist(), "S64")
            docs_all = np.concatenate([self._docs, new])
            order = np.argsort(docs_all, kind="stable")
            self._docs, self._keys = docs_all[order], np.concatenate([self._keys, got])[order]
        return self._keys[np.searchsorted(self._docs, docs)]

    def _pair_codes(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Each pair as its two keys, the smaller first (S128): the same code either way round."""
        ka, kb = self.keys(a), self.keys(b)
        swap = ka > kb
        lo, hi = np.where(swap, kb, ka), np.where(swap, ka, kb)
        return _joined(lo, hi)

    def _load(self) -> tuple[np.ndarray, np.ndarray]:
        if self._stored is None:
            codes, vals = np.zeros(0, "S128"), np.zeros(0, np.float64)
            try:
                if self.storage.exists(self.key):
                    t = pq.read_table(self.storage.source(self.key))
                    meta = json.loads((t.schema.metadata or {}).get(TEXT_META_KEY, b"{}"))
                    if meta == {"format": TEXT_FORMAT, "code": _CODE, "shingle": self.shingle}:
                        codes = _joined(np.array(t.column("key_a").to_pylist(), "S64"),
                                        np.array(t.column("key_b").to_pylist(), "S64"))
                        vals = t.column("jaccard").to_numpy()
            except (OSError, ValueError, KeyError, pa.ArrowException):  # a cache: an unreadable file is no hit
                codes, vals = np.zeros(0, "S128"), np.zeros(0, np.float64)
            self._stored = (codes, vals)  # sorted as written
        return self._stored

    def cached(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(hit, jaccard) of the pairs (a[k], b[k]) (input indices) the last reduce's file holds."""
        hit, out = np.zeros(len(a), bool), np.zeros(len(a), np.float64)
        codes, vals = self._load()
        if not len(a) or not len(codes):
            return hit, out
        q = self._pair_codes(np.asarray(a, np.int64), np.asarray(b, np.int64))
        pos = np.minimum(np.searchsorted(codes, q), len(codes) - 1)
        hit = codes[pos] == q
        out[hit] = vals[pos[hit]]
        self.reused += int(hit.sum())
        return hit, out

    def store(self, a: np.ndarray, b: np.ndarray, jaccard: np.ndarray) -> None:
        """Replace the file by the pairs given (each once, sorted by their keys), unless it holds just those."""
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        codes, first = np.unique(self._pair_codes(a, b), return_index=True) if len(a) else \
            (np.zeros(0, "S128"), np.zeros(0, np.int64))
        old, old_vals = self._load()
        if np.array_equal(codes, old) and np.array_equal(np.asarray(jaccard, np.float64)[first], old_vals):
            return  # the same pairs as stored: not written again
        halves = codes.view("S64").reshape(-1, 2) if len(codes) else np.zeros((0, 2), "S64")
        t = pa.table({"key_a": pa.array(halves[:, 0].astype(str), pa.string()),
                      "key_b": pa.array(halves[:, 1].astype(str), pa.string()),
                      "jaccard": np.asarray(jaccard, np.float64)[first]}, schema=TEXT_SCHEMA)
        meta = {"format": TEXT_FORMAT, "code": _CODE, "shingle": self.shingle}
        tables.write_parquet(self.storage, self.key, t.replace_schema_metadata(
            {TEXT_META_KEY: json.dumps(meta, sort_keys=True).encode()}))


def _joined(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Two S64 arrays as one S128 array (hex keys hold no NUL byte, so none is cut)."""
    m = np.empty((len(lo), 128), np.uint8)
    m[:, :64] = np.asarray(lo, "S64").view(np.uint8).reshape(-1, 64)
    m[:, 64:] = np.asarray(hi, "S64").view(np.uint8).reshape(-1, 64)
    return m.view("S128").reshape(-1)


def first_hit(*lookups):
    """One `cached(a, b)` from several: each pair answered by the first lookup that holds it."""
    def cached(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        hit, out = np.zeros(len(a), bool), np.zeros(len(a), np.float64)
        for look in lookups:
            todo = np.flatnonzero(~hit)
            if not len(todo):
                break
            h, v = look(a[todo], b[todo])
            hit[todo[h]], out[todo[h]] = True, v[h]
        return hit, out
    return cached
