"""The prefetcher (_Prefetcher): a daemon thread that fetches, within a byte bound, the shards the reader's
next reads need, and keeps a failure for the read of that shard to raise."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator

from mix_assets.reader.errors import ReaderError
from mix_assets.reader.shards import _Shards


log = logging.getLogger("mix_assets.reader")


class _Prefetcher:
    """A daemon thread that holds, in the shared cache, the shards of the positions a reader will read next
    (given by `want`, in reading order) while the reader reads the current ones: at most `limit` bytes of
    shards ahead (fetched or adopted, verified, not yet opened by a read). It never evicts a hold of any
    reader and skips when the directory has no room. A failure is kept and raised by the read of that shard.
    It refers to the reader only weakly (`locate`), so dropping the reader stops it (see MixReader)."""

    MAX_RANGES = 4096  # positions ranges looked at per want: enough ahead, bounded work when all is held

    def __init__(self, shards: _Shards, locate: Callable[[range], list[int]], limit: int):
        self.shards, self.locate, self.limit = shards, locate, limit
        self.cv = threading.Condition()
        self.pending: Iterator[range] | None = None
        self.generation = 0
        self.stopping = False
        self.peak_ahead_bytes = 0
        self.thread: threading.Thread | None = None

    def want(self, ranges: Iterable[range]) -> None:
        with self.cv:
            if self.stopping:
                return
            self.pending, self.generation = iter(ranges), self.generation + 1
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="mix-reader-prefetch", daemon=True)
                self.thread.start()
            self.cv.notify()

    def stop(self, timeout: float = 60.0) -> None:
        with self.cv:
            self.stopping, self.pending = True, None
            self.cv.notify()
        t = self.thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
            if t.is_alive():  # pragma: no cover - a download that does not return
                log.warning("prefetch thread still fetching after %.0f s; left as a daemon", timeout)

    def _plan(self, ranges: Iterator[range]) -> tuple[list[int], set[int]]:
        """(shards to hold ahead, in first-use order over the ranges after the first, until `limit` bytes of
        unopened ones; the first range's shards, which the read opens itself and which stay held)."""
        order: dict[int, None] = {}
        current: set[int] = set()
        need = 0
        for n, rng in zip(range(self.MAX_RANGES), ranges):
            try:
                ids = self.locate(rng)
            except (IndexError, ReaderError):  # past the last allowed pass, or the reader is gone
                break
            if n == 0:
                current.update(ids)
                continue
            for si in ids:
                if si in order or si in current:
                    continue
                order[si] = None
                if self.shards.maps[si] is None:
                    need += self.shards.entries[si]["bytes"]
                    if need > self.limit:
                        return list(order)[:-1], current
        return list(order), current

    def _run(self) -> None:
        while True:
            with self.cv:
                while self.pending is None and not self.stopping:
                    self.cv.wait()
                if self.stopping:
                    return
                ranges, gen, self.pending = self.pending, self.generation, None
            plan, current = self._plan(ranges)
            del ranges
            self.shards.unhold_ahead(set(plan) | current)
            for si in plan:
                with self.cv:
                    if self.stopping or self.generation != gen:
                        break
                if self.shards.maps[si] is not None or si in self.shards.ahead:
                    continue
                with self.shards.ahead_lock:
                    ahead = sum(self.shards.ahead.values())
                if ahead + self.shards.entries[si]["bytes"] > self.limit:
                    break
                try:
                    if not self.shards.prefetch_one(si):
                        break  # no room in the directory: the reads fetch for themselves
                except Exception as e:  # raised by the read that needs this shard (the message names it)
                    self.shards.prefetch_errors[si] = e
                    break
                with self.shards.ahead_lock:
                    self.peak_ahead_bytes = max(self.peak_ahead_bytes, sum(self.shards.ahead.values()))
