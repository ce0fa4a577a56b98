"""dedup_keys' map outputs: per source one Parquet file of per-document signatures (no Dagster here).

`dedup/signatures/<source>.parquet` (layout.DEDUP_SIGNATURES), one row per raw document in the raw
file's row order: doc_id, exact_key, n_shingles, n_chars, n_words, then m000 .. m<num_perm-1>
(uint32, one column per MinHash permutation, so a band reads only its r columns). Row groups hold
GROUP_ROWS rows whatever the map's chunk size, so the bytes do not depend on the engine. The file's
key-value metadata (META_KEY) records what it was computed from: raw/<source>'s data version,
num_perm, shingle, seed and a hash of the signing code; `matches` compares it, so a source whose
raw data and dedup parameters are unchanged keeps its signatures.

`minhash.sign_words` is the one per-document signing function, on words already normalised: dedup_keys' map
(`dedup.sign_chunk`) calls it, and so does contamination_report's map pass (`audit.scan_chunk`), which
normalises each text once for its 13-gram scan and, when a source's stored file is missing or was
computed from an older raw version, writes that file for dedup_keys (`dedup.write_signatures`; the
same bytes dedup_keys writes, docs/scale.md).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.core import engine, imports
from mix_assets.stages.dedup import minhash
from mix_assets.stages.dedup.lsh import set_jaccard

FORMAT = "mix_assets.signatures/1"
META_KEY = b"mix_assets.signatures"
VERIFY_VALUES = 1 << 21  # shingle values loaded per verification step (16 MiB)
GROUP_ROWS = 16384  # rows per row group (~10 MB of a group in memory while writing)
TEXT_ROWS = 256  # most texts per batch of the verification's text reads (~0.6 MB at 2.4 KB a text)
SCALARS = ["doc_id", "exact_key", "n_shingles", "n_chars", "n_words"]


# The code that decides a signature's bits (minhash and every project module it reaches: textkeys,
# kernels_jit, ...): an edit there invalidates every stored file.
_CODE = imports.source_version(minhash.__name__)[:16]


def perm_columns(num_perm: int) -> list[str]:
    return [f"m{k:03d}" for k in range(num_perm)]


def describe(raw_version: Optional[str], num_perm: int, shingle: int, seed: int) -> dict:
    """What a signature file is computed from (stored in its metadata, compared by `matches`)."""
    return {"format": FORMAT, "raw": raw_version, "num_perm": num_perm, "shingle": shingle, "seed": seed,
            "code": _CODE}


def schema(num_perm: int, meta: dict) -> pa.Schema:
    fields = [("doc_id", pa.string()), ("exact_key", pa.string()), ("n_shingles", pa.int64()),
              ("n_chars", pa.int64()), ("n_words", pa.int64())]
    fields += [(c, pa.uint32()) for c in perm_columns(num_perm)]
    return pa.schema(fields, metadata={META_KEY: json.dumps(meta, sort_keys=True).encode()})


def stored_meta(source, key: bytes = META_KEY) -> Optional[dict]:
    """The recorded `describe` dict of a signature file (a path or file), None when it has none.
    `key`: the schema metadata key it is stored under (other per-source map outputs use their own)."""
    md = pq.read_schema(source).metadata or {}
    return json.loads(md[key]) if key in md else None


def matches(source, want: dict, rows: int, key: bytes = META_KEY) -> bool:
    """The file was computed from `want` (raw version known, same parameters and code) and has `rows` rows."""
    return (want["raw"] is not None and stored_meta(source, key) == want
            and pq.ParquetFile(source).metadata.num_rows == rows)


def table(doc_ids: pa.Array, exact_keys: list, n_shingles: np.ndarray, n_chars: np.ndarray,
          n_words: np.ndarray, signatures: np.ndarray, sch: pa.Schema) -> pa.Table:
    cols = [doc_ids, pa.array(exact_keys, pa.string()), n_shingles, n_chars, n_words]
    cols += [signatures[:, k] for k in range(signatures.shape[1])]
    return pa.Table.from_arrays([pa.array(c) if isinstance(c, np.ndarray) else c for c in cols], schema=sch)


def regroup(tables: Iterable[pa.Table], rows: int, sch: pa.Schema) -> Iterator[pa.Table]:
    """The rows of `tables` in order, re-cut into tables of exactly `rows` rows (the last one shorter)."""
    buf, n, any_out = [], 0, False
    for t in tables:
        buf.append(t)
        n += t.num_rows
        while n >= rows:
            whole = pa.concat_tables(buf)
            group, buf = [whole.slice(0, rows).combine_chunks()], [whole.slice(rows)]
            n = whole.num_rows - rows
            whole = t = None  # the consumed chunks go now, and the group once the consumer drops it
            yield group.pop()
            any_out = True
    if n or not any_out:
        yield pa.concat_tables(buf).combine_chunks() if buf else sch.empty_table()


class Stored:
    """`lsh.Signatures` over the signature files of several sources, concatenated in the given order."""

    def __init__(self, sources: list, num_perm: int):
        self.sources = sources  # paths or `engine.FileAt`s (each read opens its own: band tasks share them)
        self.rows = []
        for s in sources:
            with engine.open_parquet(s) as f:
                self.rows.append(f.metadata.num_rows)
        self.shape = (sum(self.rows), num_perm)
        self.names = perm_columns(num_perm)
        self._held: Optional[list] = None

    @contextlib.contextmanager
    def held(self):
        """Every file kept open inside: serial `columns` calls of one thread (a fresh `pq.ParquetFile`
        per call costs about as much as reading a band's columns)."""
        with contextlib.ExitStack() as stack:
            self._held = [stack.enter_context(engine.open_parquet(s)) for s in self.sources]
            try:
                yield self
            finally:
                self._held = None

    def _files(self):
        if self._held is not None:
            yield from self._held
            return
        for s in self.sources:
            with engine.open_parquet(s) as f:
                yield f

    def read(self, columns: list[str]) -> pa.Table:
        """The given columns of every source, concatenated (one chunk per row group)."""
        parts = []
        for s in self.sources:
            with engine.open_parquet(s) as f:
                parts.append(f.read(columns=columns, use_threads=False))
        return pa.concat_tables(parts) if parts else pa.table({c: [] for c in columns})

    def columns(self, start: int, stop: int) -> np.ndarray:
        """Read a row group at a time: Arrow holds one group's columns, never a column of every document
        (band tasks run on worker threads, whose allocator pools would keep those pages)."""
        out = np.empty((self.shape[0], stop - start), np.uint32)
        at = 0
        for f in self._files():
            for g in range(f.num_row_groups):
                t = f.read_row_group(g, columns=self.names[start:stop], use_threads=False)
                for j, col in enumerate(t.columns):
                    out[at: at + t.num_rows, j] = col.to_numpy()
                at += t.num_rows
        return out


class SpilledSets:
    """Shingle sets of many documents in a file (uint64 values, set after set), offsets in memory (8 B each).

    `jaccard` loads only the sets of a bounded chunk of pairs at a time, so verification's memory
    does not grow with the number of candidate documents (the file does). With a parallel `eng`
    the chunks are compared as tasks on it, each 1/window of the chunk (the same bound in flight).
    """

    def __init__(self, path: str, offsets: np.ndarray, eng: Optional[engine.Engine] = None):
        self.path, self.offsets, self.eng = path, offsets, eng or engine.Engine(num_cpus=1)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _load(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sizes = self.offsets[docs + 1] - self.offsets[docs]
        vals = np.empty(int(sizes.sum()), np.uint64)
        at = 0
        with open(self.path, "rb") as f:
            for d, k in zip(docs.tolist(), sizes.tolist()):
                f.seek(int(self.offsets[d]) * 8)
                vals[at: at + k] = np.fromfile(f, np.uint64, count=k)
                at += k
        return vals, np.r_[0, np.cumsum(sizes)].astype(np.int64)

    def jaccard(self, a: np.ndarray, b: np.ndarray, chunk: int = VERIFY_VALUES) -> np.ndarray:
        """Exact Jaccard of the sets a[i], b[i] (positions into the stored documents), as lsh.set_jaccard."""
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        if self.eng.kind == "ray" or self.eng.num_cpus > 1:
            chunk = max(chunk // self.eng.window, 1)
        work = np.cumsum(np.diff(self.offsets)[a] + np.diff(self.offsets)[b])

        def parts():
            s = 0
            while s < len(a):
                e = max(int(np.searchsorted(work, (work[s - 1] if s else 0) + chunk, side="right")), s + 1)
                docs = np.unique(np.concatenate([a[s:e], b[s:e]]))
                yield (*self._load(docs), np.searchsorted(docs, a[s:e]), np.searchsorted(docs, b[s:e]))
                s = e

        return np.concatenate([np.zeros(0, np.float64), *engine.map_chunks(_jaccard_task, parts(), self.eng)])


def _jaccard_task(chunk: tuple) -> np.ndarray:
    return set_jaccard(*chunk)


class ScratchSets:
    """Shingle sets in scratch parts (`partitioned.Scratch`: the storage root, so a task on any node reads
    them), one part per text task, written by that task; held here: a part number and offset per document.

    `jaccard` sends each task only where its chunk's sets lie (part, offset, size per document): the task
    reads them itself (`_scratch_jaccard_task`), so no set passes through this process."""

    def __init__(self, sc: Any, names: list[str], sizes: list[np.ndarray],
                 eng: Optional[engine.Engine] = None):
        self.sc, self.names, self.eng = sc, names, eng or engine.Engine(num_cpus=1)
        self.part = np.repeat(np.arange(len(sizes), dtype=np.int32), [len(x) for x in sizes])
        self.sizes = np.concatenate([np.zeros(0, np.int64), *sizes]).astype(np.int64)
        starts = [np.r_[0, np.cumsum(x)[:-1]].astype(np.int64) for x in sizes if len(x)]
        self.start = np.concatenate([np.zeros(0, np.int64), *starts])  # offset within its part

    def __len__(self) -> int:
        return len(self.sizes)

    def jaccard(self, a: np.ndarray, b: np.ndarray, chunk: int = VERIFY_VALUES) -> np.ndarray:
        """Exact Jaccard of the sets a[i], b[i] (positions into the stored documents), as lsh.set_jaccard."""
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        if self.eng.kind == "ray" or self.eng.num_cpus > 1:
            chunk = max(chunk // self.eng.window, 1)
        work = np.cumsum(self.sizes[a] + self.sizes[b])

        def chunks():
            s = 0
            while s < len(a):
                e = max(int(np.searchsorted(work, (work[s - 1] if s else 0) + chunk, side="right")), s + 1)
                docs = np.unique(np.concatenate([a[s:e], b[s:e]]))
                where = [(self.names[p], self.start[docs][self.part[docs] == p], self.sizes[docs][self.part[docs] == p])
                         for p in np.unique(self.part[docs]).tolist()]
                yield self.sc, where, np.searchsorted(docs, a[s:e]), np.searchsorted(docs, b[s:e])
                s = e

        return np.concatenate([np.zeros(0, np.float64), *engine.map_chunks(_scratch_jaccard_task, chunks(), self.eng)])


def _scratch_jaccard_task(chunk: tuple) -> np.ndarray:
    """set_jaccard of one chunk of pairs, its documents' sets read from the scratch parts (pure): documents are
    numbered in (part, offset) order, which is their ascending order (parts follow the input indices)."""
    sc, where, ia, ib = chunk
    vals = [sc.segments(name, st, st + sz).view(np.uint64) for name, st, sz in where]
    sizes = np.concatenate([np.zeros(0, np.int64), *(sz for _, _, sz in where)])
    return set_jaccard(np.concatenate([np.zeros(0, np.uint64), *vals]), np.r_[0, np.cumsum(sizes)].astype(np.int64),
                       ia, ib)


@dataclass(frozen=True)
class _ShinglePart:
    """`_shingle_part` over (part name, task) pairs: a picklable task function for Ray."""

    sc: Any

    def __call__(self, named: tuple) -> np.ndarray:
        return _shingle_part(self.sc, *named)


def _shingle_part(sc: Any, name: str, task: "ShingleTask") -> np.ndarray:
    """`shingle_task`, its values written to the scratch part `name` by the task; returns the set sizes."""
    vals, sizes = shingle_task(task)
    sc.put(name, vals.view(np.int64))
    return sizes


@dataclass(frozen=True)
class ShingleTask:
    """A map task of the verification's text pass: the wanted rows of one row group of one raw file."""

    path: Any  # a path or an `engine.FileAt` (any worker opens its own)
    group: int
    rows: tuple  # ascending rows within the group
    shingle: int
    batch_rows: int


def shingle_task(task: ShingleTask) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 shingle values set after set, set sizes) of the task's rows, in row order (pure).

    The group's text is read in batches of `batch_rows` rows, so memory is one batch plus its
    compressed column chunk and the sets."""
    rows, vals, sizes = np.asarray(task.rows, np.int64), [np.zeros(0, np.uint64)], [np.zeros(0, np.int64)]
    with engine.open_parquet(task.path) as f:
        for texts in f.iter_batches(task.batch_rows, [task.group], ["text"], use_threads=False):
            mine = rows[(rows >= 0) & (rows < texts.num_rows)]
            rows -= texts.num_rows
            if len(mine):
                gv, off = minhash.shingle_sets(texts.column(0).take(pa.array(mine)), task.shingle)
                vals.append(gv.astype(np.uint64))
                sizes.append(np.diff(off))
    pa.default_memory_pool().release_unused()
    return np.concatenate(vals), np.concatenate(sizes)


def shingle_tasks(sources: Mapping[str, str], first_row: Mapping[str, int], shingle: int, need: np.ndarray,
                  batch_rows: int) -> Iterator[ShingleTask]:
    """One `ShingleTask` per row group holding a wanted input index, in input-index order."""
    bounds = sorted((first_row[name], name) for name in first_row)
    for k, (start, name) in enumerate(bounds):
        stop = bounds[k + 1][0] if k + 1 < len(bounds) else np.iinfo(np.int64).max
        want = need[(need >= start) & (need < stop)] - start
        if not len(want):
            continue
        with engine.open_parquet(sources[name]) as f:
            ends = np.cumsum([f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)])
        for g in np.unique(np.searchsorted(ends, want, side="right")).tolist():
            row0 = int(ends[g - 1]) if g else 0
            rows = want[(want >= row0) & (want < ends[g])] - row0
            yield ShingleTask(sources[name], g, tuple(rows.tolist()), shingle, batch_rows)


def shingle_reader(sources: Mapping[str, str], first_row: Mapping[str, int], shingle: int, spill: str,
                   batch_rows: int = 8192, eng: Optional[engine.Engine] = None, scratch=None):
    """`shingle_sets` for lsh.dedup (and the split check): a pass reading the text of the wanted documents
    only, their sets written to a file in the folder `spill` (a `SpilledSets`). `sources` values are
    paths or `engine.FileAt`s (an s3:// object is read by range GETs of the row groups needed).

    Input index = first_row[source] + row in that source's parquet (sources in sorted order, as the
    signature files are concatenated), so ascending indices come back in ascending order. Text is
    read from the row groups holding a wanted row only, one `shingle_task` per row group on `eng`
    (in order, whatever the worker count; default: this thread), in batches of at most `batch_rows`
    and TEXT_ROWS rows (not a row group's whole text column at once).

    With `scratch` (a `partitioned.Scratch`), each task writes its sets to a part there and the reader returns
    `ScratchSets`: neither the sets' loading nor the comparisons pass through this process (issue 29).
    """
    eng = eng or engine.Engine(num_cpus=1)

    def read_parts(need: np.ndarray) -> ScratchSets:
        load = len(os.listdir(spill))
        os.mkdir(os.path.join(spill, f"load-{load}"))  # numbers the loads (the parts live in the scratch)
        tasks = list(shingle_tasks(sources, first_row, shingle, np.asarray(need, np.int64),
                                   min(batch_rows, TEXT_ROWS)))
        names = [f"shingles-{load}-{i}" for i in range(len(tasks))]
        sizes = list(engine.map_chunks(_ShinglePart(scratch), list(zip(names, tasks)), eng))
        return ScratchSets(scratch, names, sizes, eng)

    if scratch is not None:
        return read_parts

    def read(need: np.ndarray) -> SpilledSets:
        sizes = [np.zeros(0, np.int64)]
        path = os.path.join(spill, f"shingles-{len(os.listdir(spill))}.u64")
        tasks = shingle_tasks(sources, first_row, shingle, np.asarray(need, np.int64), min(batch_rows, TEXT_ROWS))
        with open(path, "wb") as out:
            for gv, size in engine.map_chunks(shingle_task, tasks, eng):
                gv.tofile(out)
                sizes.append(size)
        return SpilledSets(path, np.r_[0, np.cumsum(np.concatenate(sizes))].astype(np.int64), eng)

    return read
