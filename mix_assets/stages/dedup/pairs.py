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
"""

from __future__ import annotations

import hashlib
import json
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.core import imports, layout, tables
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
