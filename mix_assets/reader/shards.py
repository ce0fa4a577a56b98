"""The shards of one split (_Shards): fetched when a read needs them, their size and sha256 verified,
memory-mapped (local files in place, remote ones in the shared cache, or read into memory when the cache has
no room: the bytes decoded by format/shards.map_rows / rows), and the prefetcher's holds ahead of the reads."""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import threading
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from mix_assets.core.transport import sha256_stream
from mix_assets.format import shards as shard_format
from mix_assets.reader.cache import _SharedCache
from mix_assets.reader.errors import _DISK_FULL, ReaderError, ShardCorruptError, _raise_if_corrupt


log = logging.getLogger("mix_assets.reader")


class _Shards:
    """The shards of one split: memmaps opened on demand; remote files held in a _SharedCache."""

    def __init__(self, backend, entries: list[dict], sample_len: int, dtype: np.dtype, cache_bytes: int,
                 cache_dir: Path):
        self.backend = backend
        self.entries = entries
        self.sample_len = sample_len
        self.dtype = dtype
        self.maps: list[np.ndarray | None] = [None] * len(entries)
        self.lru: collections.OrderedDict[int, None] = collections.OrderedDict()  # mapped remote shards
        self.fetched: list[str] = []  # relative paths fetched by this reader, in order
        self.verified: set[str] = set()  # sha256 of the files this reader has checked
        self.pinned: set[str] = set()  # non-shard files handed out by path: held until close()
        self.private: set[int] = set()  # shards read into memory because the cache had no room
        self.private_reads = 0
        self.disk_full = 0  # cache misses because its disk had no space (not the budget): warned once
        self.budget_warned = False
        self.ahead: dict[int, int] = {}  # shard -> bytes: held by the prefetcher, not yet opened by a read
        self.opening: int | None = None  # the shard a read is opening (the prefetcher must not release it)
        self.prefetch_errors: dict[int, BaseException] = {}
        biggest = max((e["bytes"] for e in entries), default=0)
        if backend.remote and biggest > cache_bytes:
            raise ReaderError(f"cache_bytes={cache_bytes} cannot hold one shard ({biggest} bytes); raise it")
        self.cache = _SharedCache(cache_dir, cache_bytes) if backend.remote else None
        # One lock for the holds of this process's threads (the cache's): no lock-order question between them.
        self.ahead_lock = self.cache._tlock if self.cache is not None else threading.RLock()

    def own(self) -> list[str]:
        """This reader's holds, the first to give up first: mapped shards least recently used first, then
        shards prefetched ahead, the furthest ahead first."""
        with self.ahead_lock:
            ahead = list(self.ahead)[::-1]
        return list(dict.fromkeys(self.entries[i]["sha256"] for i in [*self.lru, *ahead]))

    def drop(self, sha: str) -> None:
        for i in [i for i in self.lru if self.entries[i]["sha256"] == sha]:
            del self.lru[i]
            self.maps[i] = None
        with self.ahead_lock:
            for i in [i for i in self.ahead if self.entries[i]["sha256"] == sha]:
                del self.ahead[i]
        if sha not in self.pinned:
            self.cache.release(sha)

    def _held(self, rel: str, sha: str, nbytes: int, owner: _Shards | None, over_ok: bool = False) -> BinaryIO | None:
        """A remote file, held in the cache (fetched if missing) and verified once by this reader; None when
        the cache has no room for it (see _SharedCache.fetch)."""
        label = f"{self.backend.label}/{rel}"
        f = self.cache.adopt(sha)
        if f is None:
            try:
                f = self.cache.fetch(sha, nbytes, lambda dest: self.backend.download(rel, dest), label, owner,
                                     over_ok)
            except OSError as e:
                if e.errno not in _DISK_FULL:
                    raise
                if not self.disk_full:
                    log.warning("cache %s: no space left on its disk for %s (%s): reading into memory "
                                "instead; free space there or pass another cache_dir", self.cache.root, label,
                                e.strerror or e)
                self.disk_full += 1
                return None
            if f is None:
                return None
            self.fetched.append(rel)
            self.verified.add(sha)
            log.debug("fetched %s (%d bytes)", rel, nbytes)
        else:  # adding nothing, but the directory may still be over from files others held until now
            self.cache.make_room(0, sha, owner)
        if sha not in self.verified:
            try:
                self._verify(label, f.name, nbytes, sha)
            except ShardCorruptError:
                self.drop(sha)
                self.cache.remove_corrupt(sha)
                raise
        return f

    def open(self, i: int) -> np.ndarray:
        e = self.entries[i]
        if self.cache is None:
            path = self.backend.local_path(e["path"])
            if e["sha256"] not in self.verified:
                self._verify(f"{self.backend.label}/{e['path']}", path, e["bytes"], e["sha256"])
            src: Any = path
        else:
            err = self.prefetch_errors.pop(i, None)
            if err is not None:  # the prefetch thread's failure, raised where the shard is read
                raise err
            with self.ahead_lock:
                self.ahead.pop(i, None)  # from now on a read's hold, in the LRU order
                self.opening = i
            try:
                full = self.disk_full
                src = self._held(e["path"], e["sha256"], e["bytes"], self)
                self.lru[i] = None
                self.lru.move_to_end(i)
                if src is None:
                    return self._read_private(i, disk_full=self.disk_full > full)
                return self._map(i, src)
            finally:
                self.opening = None
        return self._map(i, src)

    def _map(self, i: int, src: Any) -> np.ndarray:
        self.maps[i] = shard_format.map_rows(src, self.dtype, self.sample_len, self.entries[i]["samples"])
        return self.maps[i]

    def _read_private(self, i: int, disk_full: bool = False) -> np.ndarray:
        """Shard i into this process's memory, verified, outside the cache (which other readers fill, or whose
        disk is full: `disk_full`, warned about in _held): at most one such shard per reader; the next shard
        tries the cache again."""
        e = self.entries[i]
        label = f"{self.backend.label}/{e['path']}"
        if not disk_full and not self.budget_warned:
            self.budget_warned = True
            log.warning("cache %s is full of files other readers hold (budget %d bytes): reading %s into memory "
                        "instead; raise cache_bytes to share it", self.cache.root, self.cache.budget, label)
        for j in self.private - {i}:
            self.lru.pop(j, None)
            self.maps[j] = None
        data = self.backend.read_private(e["path"])
        _raise_if_corrupt(label, len(data), hashlib.sha256(data).hexdigest(), e["bytes"], e["sha256"])
        self.private, self.private_reads = {i}, self.private_reads + 1
        self.maps[i] = shard_format.rows(data, self.dtype, self.sample_len, label)
        return self.maps[i]

    def prefetch_one(self, i: int) -> bool:
        """Hold shard i in the cache for a coming read (prefetch thread): never evicting a hold of this or any
        reader; False when the directory has no room."""
        e = self.entries[i]
        if self._held(e["path"], e["sha256"], e["bytes"], None) is None:
            return False
        with self.ahead_lock:
            if self.maps[i] is None and self.opening != i:  # else a read has it already: not ahead
                self.ahead[i] = e["bytes"]
        return True

    def unhold_ahead(self, keep: set[int]) -> None:
        """Release prefetched shards no longer wanted (not opened by a read meanwhile)."""
        with self.ahead_lock:  # a read opening one of them waits for this, or is skipped (opening)
            gone = [i for i in self.ahead if i not in keep]
            for i in gone:
                del self.ahead[i]
            busy = {self.entries[j]["sha256"] for j, m in enumerate(self.maps) if m is not None}
            if self.opening is not None:
                busy.add(self.entries[self.opening]["sha256"])
            for i in gone:
                sha = self.entries[i]["sha256"]
                if sha not in busy and sha not in self.pinned:
                    self.cache.release(sha)

    def file(self, rel: str, sha: str, nbytes: int) -> str:
        """A non-shard file as a local path, verified; a remote one stays held until close()."""
        if self.cache is None:
            path = self.backend.local_path(rel)
            self._verify(f"{self.backend.label}/{rel}", path, nbytes, sha)
            return path
        held = self._held(rel, sha, nbytes, self, over_ok=True)  # a path must exist: may go over the budget
        if held is None:  # only when the cache's disk is full (warned)
            raise ReaderError(f"{self.backend.label}/{rel}: no space left in the cache {self.cache.root} "
                              "to keep it; free space there or pass another cache_dir")
        path = held.name
        self.pinned.add(sha)
        return path

    def _verify(self, label: str, path: str, nbytes: int, sha: str) -> None:
        _raise_if_corrupt(label, os.path.getsize(path), None, nbytes, sha)
        with open(path, "rb") as f:
            got, n = sha256_stream(f)
        _raise_if_corrupt(label, n, got, nbytes, sha)
        self.verified.add(sha)

    def close(self) -> None:
        self.lru.clear()
        self.private.clear()
        with self.ahead_lock:
            self.ahead.clear()
        self.maps[:] = [None] * len(self.maps)
        if self.cache is not None:
            self.cache.close()
        self.pinned.clear()
