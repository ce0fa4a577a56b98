"""A compact exact set of doc ids for the reduce steps that must hold one (excluded, contaminated ids).

Fixed-width bytes in a sorted numpy array: the longest id's UTF-8 bytes + 1 per id, no Python object
per id; membership of a batch of ids is one vectorised binary search.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class IdSet:
    """A sorted set of doc ids as fixed-width bytes (numpy 'S<w>', w = the longest id's UTF-8 bytes + 1):
    exact (each id ends in a 0x01 byte, so trailing NULs stay distinct), w B per id, binary search."""

    def __init__(self, ids=()):
        arr = ids if isinstance(ids, (pa.Array, pa.ChunkedArray)) else pa.array(list(ids), pa.string())
        arr = (arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr).drop_null()
        self.width = int(pc.max(pc.binary_length(arr)).as_py() or 0) + 1 if len(arr) else 1
        self.keys = np.unique(_fixed(arr, self.width)) if len(arr) else np.zeros(0, f"S{self.width}")

    def __len__(self) -> int:
        return len(self.keys)

    def index(self, ids) -> np.ndarray:
        """Position of each id in the set (sorted order), -1 when absent."""
        ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        if not len(self.keys) or not len(ids):
            return np.full(len(ids), -1, np.int64)
        fits = (pc.binary_length(ids).fill_null(self.width).to_numpy(zero_copy_only=False) < self.width)
        q = _fixed(ids, self.width)
        pos = np.minimum(np.searchsorted(self.keys, q), len(self.keys) - 1)
        return np.where(fits & (self.keys[pos] == q), pos, -1)

    def contains(self, ids) -> np.ndarray:
        return self.index(ids) >= 0

    def ids(self, limit: Optional[int] = None) -> list[str]:
        """The first `limit` ids in sorted order, as strings."""
        return [k[:-1].decode() for k in self.keys[:limit].tolist()]


def _fixed(arr: pa.Array, width: int) -> np.ndarray:
    """Strings as 'S<width>' rows: the UTF-8 bytes, a 0x01 byte, zero padding. Nulls and strings too long
    for `width` become empty (callers compare lengths first)."""
    arr = arr.cast(pa.large_binary())
    long = pc.greater_equal(pc.binary_length(arr), width)
    arr = pc.if_else(pc.or_kleene(long, arr.is_null()).fill_null(True), pa.scalar(b"", pa.large_binary()), arr)
    off = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset:arr.offset + len(arr) + 1]
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    lens = np.diff(off)
    out = np.zeros((len(arr), width), np.uint8)
    out[np.arange(width) < lens[:, None]] = data[off[0]:off[-1]]
    out[np.arange(len(arr)), lens] = 1
    return out.view(f"S{width}").ravel()


UNSORTED = "null or not above the row before it (dedup_keys is sorted by doc_id, each document once)"


def unsorted_row(doc: pa.Array, last: Optional[str], row: int) -> Optional[int]:
    """The first row (numbered from `row`) of a batch of ids that is null or not above the one before it
    (`last`: the previous batch's last id), or None: the check of a stream sorted by doc_id."""
    if not len(doc):
        return None
    if doc.null_count:
        return row + int(np.flatnonzero(doc.is_null().to_numpy(zero_copy_only=False))[0])
    prev = pa.concat_arrays([pa.array([last], pa.string()), doc[:-1]]) if last is not None else doc[:-1]
    cur = doc if last is not None else doc[1:]
    bad = np.flatnonzero(~pc.greater(cur, prev).to_numpy(zero_copy_only=False))
    return row + int(bad[0]) + (0 if last is not None else 1) if len(bad) else None
