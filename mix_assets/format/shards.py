"""The token shard of the published mix: its bytes, the one writer and the one reader.

A shard (`<split>/<split>-NNNNN.bin` in the mix directory: core/layout.SHARD) is a raw array without
header: `samples x sample_len` token ids, little-endian, of the manifest's `dtype` (`uint16` when every
id of the vocabulary fits, else `uint32`: `dtype_for_vocab`). Sample r of a shard is its tokens
[r x sample_len, (r + 1) x sample_len); a split's samples are its shards' samples in manifest order.
Beside each shard, with `packing.doc_index`, its document index (core/layout.DOC_INDEX, format/docindex.py).

Writing: `ShardWriter` writes a split's shards and document indexes through a Storage and returns the
manifest's records (the token stage's packer hands it whole samples). Reading: `rows` (a shard's bytes
in memory), `map_rows` (a local file, memory-mapped), `read_row` (one sample of an open file), `read_tokens` (a
range of an open file) and `pread_tokens` (a range of a local file descriptor, one pread: scattered reads that
leave the file out of the process's RSS, which a map's fault-around does not) give samples or tokens as arrays; every reader of shard bytes (the trainer's reader, the rendered samples, the checker)
goes through them.

Changing the format (say, uint32 whatever the vocabulary) is an edit here: the token stage, the reader,
the rendered samples, the test fixtures and the checker's dtype rule (format/checks/files.py calls
`dtype_for_vocab`) all follow. What does not follow by itself: a revision published under the old rule
then fails the checker (`dtype: 'uint16', but tokenizer.vocab_size ... is stored as 'uint32'`), so if old
revisions must stay readable the change is a new manifest FORMAT (format/manifest.py); and the tests that
pin the bytes (mix_assets_tests/format/test_shards.py, the sizes in format/test_manifest.py and
reader/test_reader.py, the demo fingerprint) change with it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, BinaryIO, Optional

import numpy as np

from mix_assets.core import layout
from mix_assets.format import docindex
from mix_assets.format.manifest import DTYPES

_LITTLE = {name: np.dtype(name).newbyteorder("<") for name in DTYPES}


def token_dtype(dtype: str | np.dtype) -> np.dtype:
    """The little-endian numpy dtype of a manifest dtype ("uint16", "uint32", or such a numpy dtype)."""
    if isinstance(dtype, str):
        if dtype in _LITTLE:
            return _LITTLE[dtype]
    else:
        for dt in _LITTLE.values():
            if np.dtype(dtype).str == dt.str:
                return dt
    raise ValueError(f"dtype: {dtype!r} is not one of {sorted(DTYPES)}")


def dtype_for_vocab(vocab_size: int) -> str:
    """uint16 when every id fits, else uint32."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def shard_bytes(samples: int, sample_len: int, dtype: str | np.dtype) -> int:
    """The size of a shard of `samples` samples: samples x sample_len x itemsize."""
    return samples * sample_len * token_dtype(dtype).itemsize


# -- writing ------------------------------------------------------------------------------------------
@dataclass
class ShardRecord:
    """A shard's entry in the manifest's `splits.<split>.shards`."""

    path: str  # relative to the mix directory
    samples: int
    bytes: int
    sha256: str
    doc_index: Optional[dict] = None  # {"path", "bytes", "sha256", "documents"} with packing.doc_index


def to_bytes(tokens: np.ndarray, dtype: str | np.dtype) -> bytes:
    """The bytes of a shard holding `tokens` (whole samples), little-endian `dtype`."""
    return np.asarray(tokens).astype(token_dtype(dtype), copy=False).tobytes()


class ShardWriter:
    """Writes one split's shards and their document indexes through `storage` (atomic per file, at
    layout.SHARD / layout.DOC_INDEX); each call returns what the manifest records of the file.

    With `writes` (an object whose `submit(fn)` runs `fn` later, on another thread), the write and the sha256
    run there: the returned record's sha256 is filled in when they are done (its owner waits for them)."""

    def __init__(self, storage: Any, split: str, sample_len: int, dtype: str | np.dtype, writes: Any = None):
        self.storage, self.split, self.sample_len, self.dtype = storage, split, sample_len, token_dtype(dtype)
        self.writes = writes

    def _write(self, key: str, data: bytes, record: Any) -> None:
        """Write `data` at `key` and set the record's sha256 (here, or on `writes`)."""
        def write() -> None:
            sha = hashlib.sha256(data).hexdigest()
            self.storage.write_bytes(key, data)
            if isinstance(record, dict):
                record["sha256"] = sha
            else:
                record.sha256 = sha

        if self.writes is None:
            write()
        else:
            self.writes.submit(write)

    def shard(self, index: int, tokens: np.ndarray) -> ShardRecord:
        """Shard `index` of the split: `tokens` is a 1-D array of whole samples (copied: reusable on return)."""
        if len(tokens) % self.sample_len:
            raise ValueError(f"{self.split} shard {index}: {len(tokens)} tokens are not whole samples of "
                             f"{self.sample_len}")
        data = to_bytes(tokens, self.dtype)
        key = layout.SHARD.format(split=self.split, index=index)
        rec = ShardRecord(path=key.removeprefix(layout.MIX_DIR + "/"), samples=len(tokens) // self.sample_len,
                          bytes=len(data), sha256="")
        self._write(key, data, rec)
        return rec

    def doc_index(self, index: int, starts: np.ndarray) -> dict:
        """The document index of shard `index` (format/docindex.py) and its manifest entry."""
        data = docindex.to_bytes(starts)
        key = layout.DOC_INDEX.format(split=self.split, index=index)
        rec = {"path": key.removeprefix(layout.MIX_DIR + "/"), "bytes": len(data), "sha256": "",
               "documents": len(starts)}
        self._write(key, data, rec)
        return rec


# -- reading ------------------------------------------------------------------------------------------
def rows(data: bytes | memoryview, dtype: str | np.dtype, sample_len: int, label: str = "shard") -> np.ndarray:
    """A shard's bytes as its (samples, sample_len) array (read-only, no copy); ValueError naming `label`
    unless they are whole samples."""
    dt = token_dtype(dtype)
    if len(data) % (sample_len * dt.itemsize):
        raise ValueError(f"{label}: {len(data)} bytes are not whole samples of {sample_len} x {dt.itemsize} bytes")
    return np.frombuffer(data, dt).reshape(-1, sample_len)


def map_rows(src: Any, dtype: str | np.dtype, sample_len: int, samples: int) -> np.ndarray:
    """A local shard file (a path or an open file) memory-mapped as its (samples, sample_len) array."""
    mm = np.memmap(src, dtype=token_dtype(dtype), mode="r", shape=(samples, sample_len))
    return mm.view(np.ndarray)  # plain ndarray view: same mapping, cheaper indexing


def read_row(f: BinaryIO, row: int, dtype: str | np.dtype, sample_len: int, label: str = "shard") -> np.ndarray:
    """Sample `row` of an open shard file (one seek and read); ValueError naming `label` on a short read."""
    n = sample_len * token_dtype(dtype).itemsize
    f.seek(row * n)
    data = f.read(n)
    if len(data) != n:
        raise ValueError(f"{label}: short read at sample row {row} ({len(data)} bytes)")
    return rows(data, dtype, sample_len, label)[0]


def pread_tokens(fd: int, start: int, n: int, dtype: str | np.dtype, label: str = "shard") -> np.ndarray:
    """Tokens [start, start + n) of a local shard file open as descriptor `fd` (one os.pread); ValueError naming `label`
    on a short read."""
    dt = token_dtype(dtype)
    data = os.pread(fd, n * dt.itemsize, start * dt.itemsize) if n else b""
    if len(data) != n * dt.itemsize:
        raise ValueError(f"{label}: short read at token {start} ({len(data) // dt.itemsize} of {n} tokens)")
    return np.frombuffer(data, dt)


def read_tokens(f: BinaryIO, start: int, n: int, dtype: str | np.dtype, label: str = "shard") -> np.ndarray:
    """Tokens [start, start + n) of an open shard file (one seek and read); ValueError naming `label` on a short read."""
    dt = token_dtype(dtype)
    f.seek(start * dt.itemsize)
    data = f.read(n * dt.itemsize)
    if len(data) != n * dt.itemsize:
        raise ValueError(f"{label}: short read at token {start} ({len(data)} of {n * dt.itemsize} bytes)")
    return np.frombuffer(data, dt)

