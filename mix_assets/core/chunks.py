"""Keyed chunk parts of a map stage: what lets a killed map resume at the first chunk it had not finished.

A map stage (document_filters' decisions, dedup_keys' signatures, contamination_report's scan) cuts each
source into row ranges (core/engine.row_ranges) and assembles one file per source from the chunks'
results. Here each chunk's result is also stored as a *part*: one Arrow IPC file at
`layout.CHUNK_PART` (`parts/<stage>/<key>.arrow`), written atomically (core/storage.py) as soon as the
driver receives it, under

    key = sha256(canonical JSON of {stage, source, meta, rows: [start, stop]})

where `meta` is what the stage's per-source file records it was computed from (the source's raw data
version, the stage's parameters, its code version: the same dict that decides per-source reuse). A
rerun after a kill loads the parts present and maps only the missing chunks (`resume`); the per-source
file is then assembled from the parts in row order exactly as from freshly computed chunks, and the
source's parts are deleted (`Parts.drop`). A chunk's key changes whenever its result could, so a part
is never stale; a part whose source is never finished stays until a later run with the same key uses it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Sequence

import pyarrow as pa

from mix_assets.core import engine, layout


def part_key(stage: str, source: str, meta: dict, start: int, stop: int) -> str:
    """The key of rows [start, stop) of `source` whose per-source file would record `meta` (the source's name
    is in it: two sources may share a raw version string and parameters)."""
    doc = json.dumps({"stage": stage, "source": source, "meta": meta, "rows": [int(start), int(stop)]},
                     sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(doc.encode()).hexdigest()


@dataclass(frozen=True)
class Parts:
    """The chunk parts of one stage under a storage root (`layout.CHUNK_PART`)."""

    storage: object  # core/storage.Storage
    stage: str

    def key(self, source: str, meta: dict, rows: engine.RowRange) -> Optional[str]:
        """The part key of a chunk, None when `meta` has no raw version to key it by (computed, not stored)."""
        return None if meta.get("raw") is None else part_key(self.stage, source, meta, rows.start, rows.stop)

    def path(self, key: str) -> str:
        return layout.CHUNK_PART.format(stage=self.stage, key=key)

    def put(self, key: str, table: pa.Table) -> None:
        """Store a chunk's table under `key`, atomically (a killed write leaves no part)."""
        with self.storage.writing(self.path(key)) as tmp:
            with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)

    def get(self, key: str) -> Optional[pa.Table]:
        """The table stored under `key`, None when there is none."""
        if not self.storage.exists(self.path(key)):
            return None
        with self.storage.open(self.path(key)) as f:
            return pa.ipc.open_file(f).read_all()

    def present(self, keys: Iterable[Optional[str]]) -> set[str]:
        """The keys among `keys` that have a part (one listing of the stage's folder)."""
        prefix = layout.CHUNK_PART.format(stage=self.stage, key="")[: -len(".arrow")]
        have = {k[len(prefix):-len(".arrow")] for k in self.storage.list(prefix.rstrip("/"))}
        return {k for k in keys if k is not None and k in have}

    def keyed(self, label: str, work: Sequence[tuple[str, engine.RowRange]], meta: dict, log=None
              ) -> tuple[list[Optional[str]], set[str], dict[str, int]]:
        """Each (source, rows) chunk's key, the keys that have a part, and per source how many chunks a killed
        run left; each source resumed is logged with `resumed_line`."""
        keys = [self.key(name, meta[name], rows) for name, rows in work]
        have = self.present(keys)
        resumed = {}
        for name in dict.fromkeys(name for name, _ in work):
            own = [k for (n, _), k in zip(work, keys) if n == name]
            resumed[name] = sum(k in have for k in own)
            line = resumed_line(label, name, own, have)
            if log and line:
                log.info(line)
        return keys, have, resumed

    def drop(self, keys: Iterable[Optional[str]]) -> None:
        """Delete the parts of `keys` (once the per-source file assembled from them is written)."""
        for k in keys:
            if k is not None:
                self.storage.delete(self.path(k))


def resume(fn: Callable, chunks: Sequence, keys: Sequence[Optional[str]], eng: engine.Engine,
           parts: Optional[Parts], encode: Callable[[object, object], pa.Table] = lambda c, r: r,
           have: Optional[set] = None) -> Iterator[tuple[pa.Table, object]]:
    """(table, fn's result or None when loaded) for every chunk, IN CHUNK ORDER: a chunk whose key has a
    part is loaded from it; the others alone are mapped with `fn` on `eng` (core/engine.map_chunks), and
    each result's table (`encode(chunk, result)`) is put under its key as the driver receives it (so a kill loses at most
    the chunks in flight). A None key (no raw version to key it by) or no `parts`: computed, not stored.
    `have`: the keys known present (default: listed here)."""
    have = (parts.present(keys) if parts is not None else set()) if have is None else have
    results = engine.map_chunks(fn, [c for c, k in zip(chunks, keys) if k not in have], eng)
    for c, k in zip(chunks, keys):
        if k in have:
            yield parts.get(k), None
            continue
        got = next(results)
        table = encode(c, got)
        if parts is not None and k is not None:
            parts.put(k, table)
        yield table, got


def resumed_line(label: str, name: str, keys: Sequence[Optional[str]], have: set) -> Optional[str]:
    """'document_filters: resumed web at chunk 7 of 12 (6 chunks from a killed run)', None when no part
    of the source is present."""
    found = [i for i, k in enumerate(keys) if k in have]
    if not found:
        return None
    first = next((i for i, k in enumerate(keys) if k not in have), len(keys))
    return (f"{label}: resumed {name} at chunk {first + 1} of {len(keys)} ({len(found)} chunk"
            f"{'s' if len(found) != 1 else ''} from a killed run)")
