"""The cache of remote files shared by any number of processes (_SharedCache): cache_dir/objects/<sha>,
fcntl locks, one budget for the whole directory; what it asks of the reader that owns holds (_CacheOwner)."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from mix_assets.core.transport import sha256_stream
from mix_assets.reader.errors import _raise_if_corrupt


log = logging.getLogger("mix_assets.reader")


class _CacheOwner(Protocol):
    """What _SharedCache asks of a reader's shards (shards._Shards) when it needs room: their holds, the
    first to give up first, and giving one up."""

    def own(self) -> list[str]: ...

    def drop(self, sha: str) -> None: ...


def _try_lock(f: BinaryIO, kind: int) -> bool:
    try:
        fcntl.flock(f, kind | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


class _SharedCache:
    """Remote files kept under cache_dir/objects/<sha[:2]>/<sha> (named by content, never modified), shared by
    any number of processes through fcntl.flock locks:

    * `objects/.lock` (exclusive), held briefly for bookkeeping: adopting, adding or removing a file;
    * each file, shared, for as long as a reader has it open or mapped; removal takes it exclusive without
      waiting, so a held file is never removed;
    * `<sha>.fetching` (exclusive) by the one process downloading that file; its size reserves the bytes.

    The budget is for the whole directory (files + reservations): a reservation is made only when it fits,
    after removing files no reader holds (least recently adopted first, by mtime) and, when `owner` is given,
    the owner's own holds; otherwise `fetch` returns None (the caller reads around the cache). `owner` (the
    reader's _Shards) lists its own holds, least recently used first (`own()`), and gives one up when asked
    (`drop(sha)`: unmap, release). A reader's threads (reads, prefetch) share one _SharedCache.
    """

    def __init__(self, cache_dir: Path, budget: int):
        self.root = cache_dir / "objects"
        self.budget = budget
        self.held: dict[str, BinaryIO] = {}  # sha -> the open file carrying our shared lock
        self._tlock = threading.RLock()  # this process's threads; taken before the directory's flock

    def path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with self._tlock, open(self.root / ".lock", "ab") as f:  # closing the file releases the lock
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def _hold(self, sha: str) -> BinaryIO | None:
        """Open and share-lock the file if present. Under the directory lock: no removal can interleave."""
        if sha in self.held:
            return self.held[sha]
        try:
            f = open(self.path(sha), "rb")  # kept open while held
        except FileNotFoundError:
            return None
        fcntl.flock(f, fcntl.LOCK_SH)  # removers lock exclusively only under the directory lock: never blocks
        with contextlib.suppress(OSError):
            os.utime(f.fileno())  # recency, for the directory's least-recently-used order
        self.held[sha] = f
        return f

    def adopt(self, sha: str) -> BinaryIO | None:
        """The file, held, if some process already put it in the cache."""
        f = self.held.get(sha)
        if f is not None:
            return f
        if not self.path(sha).exists():
            return None
        with self._locked():
            return self._hold(sha)

    def release(self, sha: str) -> None:
        with self._tlock:
            f = self.held.pop(sha, None)
            if f is not None:
                f.close()

    def close(self) -> None:
        with self._tlock:
            for sha in list(self.held):
                self.release(sha)

    def fetch(self, sha: str, nbytes: int, download: Callable[[Path], str | None], label: str,
              owner: _CacheOwner | None, over_ok: bool = False) -> BinaryIO | None:
        """The file, held: downloaded (and verified) by this process, or by another one fetching it now.
        None when the directory has no room for it (unless over_ok: then it goes over by this file)."""
        while True:
            with self._locked():
                f = self._hold(sha)
                if f is not None:
                    return f
                res_path = self.path(sha).with_name(sha + ".fetching")
                try:
                    res = open(res_path, "r+b")  # a fetch in progress, or a crashed one's
                    mine = _try_lock(res, fcntl.LOCK_EX)
                except FileNotFoundError:
                    res_path.parent.mkdir(parents=True, exist_ok=True)
                    res = open(res_path, "xb")
                    fcntl.flock(res, fcntl.LOCK_EX)
                    mine = True
                if mine:
                    res.truncate(0)  # a crashed fetch's reservation is not counted twice
                    if not self._make_room(nbytes, sha, owner) and not over_ok:
                        res_path.unlink()
                        res.close()
                        return None
                    res.truncate(nbytes)  # a sparse file: reserves the bytes in every process's count
            if mine:
                break
            with res:  # another process is fetching it: wait for it to finish (or die), then look again
                fcntl.flock(res, fcntl.LOCK_SH)
        part = res_path.with_name(sha + ".part")
        try:
            got = download(part)
            n = part.stat().st_size
            if got is None:
                with open(part, "rb") as g:
                    got, n = sha256_stream(g)
            _raise_if_corrupt(label, n, got, nbytes, sha)
        except BaseException:
            # part first: once the reservation is gone another process may start writing a new part
            for p in (part, res_path):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            res.close()
            raise
        with self._locked():
            os.replace(part, self.path(sha))
            res_path.unlink()
            f = self._hold(sha)
        res.close()
        return f

    def remove_corrupt(self, sha: str) -> None:
        """Remove a file that failed verification, held or not (it must not be served again)."""
        self.release(sha)
        with self._locked(), contextlib.suppress(FileNotFoundError):
            self.path(sha).unlink()

    def _scan(self) -> tuple[int, list[tuple[float, str, int]]]:
        """Bytes in the directory (files + live reservations) and its files as (mtime, sha, size).
        Reservations of crashed fetches are removed on the way."""
        total, files = 0, []
        for sub in os.scandir(self.root):
            if not sub.is_dir():
                continue
            for ent in os.scandir(sub.path):
                name = ent.name
                try:
                    st = ent.stat()
                except FileNotFoundError:
                    continue
                if len(name) == 64:
                    total += st.st_size
                    files.append((st.st_mtime, name, st.st_size))
                elif name.endswith(".fetching"):
                    with open(ent.path, "rb") as res:
                        if not _try_lock(res, fcntl.LOCK_EX):
                            total += st.st_size
                            continue
                    for stale in (ent.path, ent.path[:-len(".fetching")] + ".part"):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(stale)
        return total, files

    def _remove_if_unheld(self, sha: str) -> bool:
        try:
            f = open(self.path(sha), "rb")
        except FileNotFoundError:
            return True
        with f:
            if not _try_lock(f, fcntl.LOCK_EX):
                return False
            self.path(sha).unlink()
            log.debug("evicted %s", sha)
            return True

    def _make_room(self, need: int, keep: str, owner: _CacheOwner | None) -> bool:
        """Remove files until `need` more bytes fit; whether they do."""
        total, files = self._scan()
        size = {sha: n for _, sha, n in files}
        # Files nobody holds first (oldest first), then this reader's own holds (least recently used first).
        unheld = [sha for _, sha, _ in sorted(files) if sha != keep and sha not in self.held]
        own = [] if owner is None else [sha for sha in owner.own() if sha != keep and sha in size]
        for sha in unheld + own:
            if total + need <= self.budget:
                return True
            if sha in self.held:
                owner.drop(sha)  # unmapped and released (unless pinned)
            if sha not in self.held and self._remove_if_unheld(sha):
                total -= size[sha]
        if total + need > self.budget:
            log.debug("cache %s: %d bytes (+%d) over the budget of %d: the rest is held by readers",
                      self.root, total, need, self.budget)
            return False
        return True

    def make_room(self, need: int, keep: str, owner: _CacheOwner | None) -> None:
        with self._locked():
            self._make_room(need, keep, owner)

    def resident_bytes(self) -> int:
        with self._locked():
            return self._scan()[0]
