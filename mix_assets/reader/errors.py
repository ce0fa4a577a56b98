"""The reader's errors (ReaderError and its kinds, ResumeMismatchError, EndOfMix), the size/sha256 check that
raises ShardCorruptError (_raise_if_corrupt), and the errnos that mean the cache's disk is full (_DISK_FULL)."""

from __future__ import annotations

import errno


# Writing into the cache failed for lack of local space (disk or quota): the cache directory's fault, not the
# remote object's; the shard is read into memory instead (shards._Shards._held)
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class ReaderError(RuntimeError):
    """The reader cannot serve what was asked."""


class ShardCorruptError(ReaderError):
    """A shard whose bytes differ from the manifest (size or sha256); the message names the file."""


class NoDocIndexError(ReaderError):
    """doc_starts on a revision built without packing.doc_index."""


class ResumeMismatchError(ValueError):
    """A state_dict that belongs to another dataset, permutation, seq_len or seed."""


class PositionError(ReaderError):
    """A read that would re-read consumed samples or skip unconsumed ones."""


class EndOfMix(IndexError):
    """Reading past the last allowed pass of the split."""


def _raise_if_corrupt(label: str, n: int, sha: str | None, want_n: int, want_sha: str) -> None:
    if n != want_n:
        raise ShardCorruptError(f"{label}: {n} bytes, manifest says {want_n} (truncated or wrong file)")
    if sha is not None and sha != want_sha:
        raise ShardCorruptError(f"{label}: sha256 {sha}, manifest says {want_sha} (corrupt shard)")
