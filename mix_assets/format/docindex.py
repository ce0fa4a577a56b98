"""The per-shard document index (`packing.doc_index`): where each document starts inside a shard.

One `.npy` file per shard (layout.DOC_INDEX), a 1-D little-endian uint32 array, strictly increasing:
the token offset inside the shard of every document (appearance) that starts in it, 0 included when
one starts exactly at the shard's first token. A document continuing from the previous shard has no
entry in this one. Sample r of the shard spans offsets [r*L, (r+1)*L): its document starts are the
entries in that range minus r*L (one binary search), from which a trainer builds intra-document
attention masks (`segment_ids`). Shards hold at most 2**30 tokens, so uint32 always fits.

Agreement with the separator (when one is configured): every start follows a separator token, except
the split's first token and the appearances the budget cut short (the last of each source's train
stream, which loses its separator). The converse is not checked: a document's own text may encode the
separator token.
"""

from __future__ import annotations

import io
from typing import Optional

import numpy as np

DTYPE = np.dtype("<u4")


def to_bytes(starts) -> bytes:
    """The .npy bytes of one shard's document starts (format 1.0: the same bytes for the same starts)."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(starts, dtype=DTYPE), version=(1, 0), allow_pickle=False)
    return buf.getvalue()


def from_bytes(data: bytes, label: str, shard_tokens: int) -> np.ndarray:
    """The starts of one index file, refused (ValueError naming `label`) unless 1-D uint32, strictly
    increasing and inside the shard."""
    try:
        arr = np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    except Exception as e:  # noqa: BLE001 -- any unreadable header or body
        raise ValueError(f"{label}: not a readable .npy document index ({type(e).__name__}: {e})") from None
    problem = shape_problem(arr, shard_tokens)
    if problem:
        raise ValueError(f"{label}: {problem}")
    return arr


def shape_problem(arr: np.ndarray, shard_tokens: int) -> Optional[str]:
    if arr.ndim != 1 or arr.dtype != DTYPE:
        return f"dtype {arr.dtype} shape {arr.shape}, expected a 1-D {DTYPE.str} array"
    if len(arr) and int(arr[-1]) >= shard_tokens:
        return f"offset {int(arr[-1])} outside the shard's {shard_tokens} tokens"
    bad = np.flatnonzero(np.diff(arr.astype(np.int64)) <= 0)
    if len(bad):
        return f"offsets not strictly increasing at entry {int(bad[0]) + 1}"
    return None


def sample_starts(starts: np.ndarray, row: int, sample_len: int) -> np.ndarray:
    """Offsets inside sample `row` of the shard where a document starts (int64, 0 included when one does)."""
    lo, hi = np.searchsorted(starts, [row * sample_len, (row + 1) * sample_len], side="left")
    return starts[lo:hi].astype(np.int64) - row * sample_len


def segment_ids(doc_starts: np.ndarray, sample_len: int) -> np.ndarray:
    """Per token of a sample, the number of document starts at or before it (int32): tokens with equal
    ids belong to one document; 0 marks a document continuing from before the sample."""
    marks = np.zeros(sample_len, np.int32)
    marks[np.asarray(doc_starts, np.int64)] = 1
    return np.cumsum(marks, dtype=np.int32)


def unexplained_starts(starts: np.ndarray, tokens: np.ndarray, separator_id: int,
                       prev_token: Optional[int]) -> np.ndarray:
    """The starts not preceded by a separator token (`prev_token`: the previous shard's last token,
    None for the split's first shard, whose offset 0 needs none)."""
    s = starts.astype(np.int64)
    inner = s[s > 0]
    bad = inner[tokens[inner - 1] != separator_id]
    if len(s) and s[0] == 0 and prev_token is not None and prev_token != separator_id:
        bad = np.concatenate([[0], bad])
    return bad
