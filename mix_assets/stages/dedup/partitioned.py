"""dedup_keys' reduce in partitions: LSH candidate pairs, connected components and the keep rule as engine tasks.

Every task here is pure and writes or reads *parts* under a scratch folder of the storage root (`Scratch`,
layout.REDUCE_SCRATCH; local or S3, so a task on any worker reads what another wrote): a part is one file of
int64 pairs sorted by (partition, first, second), whose per-partition offsets the task returns. The driver
holds only those offsets (partitions x partitions integers per round) and digests; the pairs themselves go
from task to task through the parts. A node's partition is `node_part` (a multiplicative hash of its index),
so consecutive documents spread over the partitions.

1. Candidates (`candidate_codes`): one task per (band, bucket-hash slice), reading only its band's r
   signature columns and keeping the rows whose band key falls in its slice (ceil(partitions / bands) slices, so
   slices only when there are more partitions than bands). A bucket lies in one slice, and its pairs depend on
   its members only (`lsh._group_pairs`), so the union over tasks is the same set for any partition count. Then
   one task per node partition unions that partition's pairs from every band task (each pair once).
2. Components (`components`): alternating large-star / small-star rounds (Kiveris et al., SoCC 2014) over the
   edges, each round one task per node partition holding the edges of its nodes (both directions), until a
   (large, small) round leaves every partition's edges as they were. The fixed point is a star per component
   centred on its smallest node, so a component's label is its smallest index (the smallest doc_id: indices are
   canonical, sorted by doc_id), whatever the partitioning.
3. The keep rule (`survivors`): the keep ranks (`lsh._keep_rank`) are written as a part partitioned by node
   (`put_ranks`); the last components task of each node partition reads its nodes' ranks and emits (label, node,
   rank) partitioned by label; one task per label partition then chooses each cluster's member of smallest rank
   and counts members. No task is sent the whole rank array. A document in no edge is its own cluster.

Outputs are a function of the edge set alone, so the bytes do not depend on the partition or worker count.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from mix_assets.core import engine, layout
from mix_assets.core.storage import Storage

_H = np.uint64(0x9E3779B97F4A7C15)  # multiplicative hash of node indices (Fibonacci hashing)
# (large, small) rounds before giving up: a chain of 10^5 nodes takes 14 (in random order) to 18 (in order)
MAX_ROUNDS = 200


def node_part(x: np.ndarray, partitions: int) -> np.ndarray:
    """The partition (int64, 0 .. partitions-1) of every node index in `x`."""
    with np.errstate(over="ignore"):
        h = np.asarray(x, np.int64).astype(np.uint64) * _H
    return ((h >> np.uint64(32)) % np.uint64(partitions)).astype(np.int64)


@dataclass(frozen=True)
class Scratch:
    """A folder of parts under a storage root (local path or s3:// URL), picklable for Ray tasks."""

    root: str
    endpoint_url: Optional[str]
    prefix: str

    def storage(self) -> Storage:
        return Storage(self.root, self.endpoint_url)

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    def put(self, name: str, data: np.ndarray) -> None:
        with self.storage().writing(self.key(name)) as tmp:
            np.ascontiguousarray(data, np.int64).tofile(tmp)

    def segment(self, name: str, start: int, stop: int) -> np.ndarray:
        """int64 values start .. stop-1 of the part `name` (S3: one range GET)."""
        if stop <= start:
            return np.zeros(0, np.int64)
        with self.storage().open(self.key(name)) as f:
            f.seek(start * 8)
            return np.frombuffer(f.read((stop - start) * 8), np.int64).copy()

    def segments(self, name: str, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        """int64 values starts[i] .. stops[i]-1 of the part `name`, concatenated (the part opened once)."""
        out = np.empty(int(np.sum(np.asarray(stops) - np.asarray(starts))), np.int64)
        at = 0
        with self.storage().open(self.key(name)) as f:
            for a, b in zip(np.asarray(starts).tolist(), np.asarray(stops).tolist()):
                f.seek(a * 8)
                out[at: at + b - a] = np.frombuffer(f.read((b - a) * 8), np.int64)
                at += b - a
        return out

    def clear(self) -> None:
        self.storage().delete_prefix(self.prefix)


@contextmanager
def scratch(storage: Optional[Storage] = None, stage: str = "dedup_keys") -> Iterator[Scratch]:
    """A fresh scratch folder of `storage` for `stage` (a temporary local folder without one), deleted on exit."""
    if storage is None:
        with tempfile.TemporaryDirectory(prefix="dedup-reduce-") as tmp:
            yield Scratch(tmp, None, "parts")
        return
    s = Scratch(storage.root, storage.s3_endpoint_url, layout.REDUCE_SCRATCH.format(stage=stage,
                                                                                   run=uuid.uuid4().hex))
    try:
        yield s
    finally:
        s.clear()
        if not storage.is_s3:  # the empty folders above the run's (an S3 prefix has none)
            for up in (Path(storage.root) / s.prefix).parents[:2]:
                with contextlib.suppress(OSError):
                    up.rmdir()


def _put_pairs(sc: Scratch, name: str, first: np.ndarray, second: np.ndarray, partitions: int) -> list[int]:
    """Write directed pairs (first, second), each once, sorted by (node_part(first), first, second);
    returns the partitions' offsets (partitions + 1 values)."""
    return _put_rows(sc, name, [first, second], partitions)


def _put_rows(sc: Scratch, name: str, cols: list[np.ndarray], partitions: int,
              part: Optional[np.ndarray] = None) -> list[int]:
    """Write rows of int64 columns `cols`, each distinct row once, sorted by (partition, cols...), the partition
    `part` (one per row, 0 .. partitions-1) or node_part(cols[0]); returns the partitions' offsets in values
    (partitions + 1 values)."""
    cols = [np.asarray(c, np.int64) for c in cols]
    part = node_part(cols[0], partitions) if part is None else np.asarray(part, np.int64)
    o = np.lexsort((*cols[::-1], part))
    part, cols = part[o], [c[o] for c in cols]
    if len(part):
        new = np.r_[True, np.any([c[1:] != c[:-1] for c in cols], axis=0)]
        part, cols = part[new], [c[new] for c in cols]
    sc.put(name, np.column_stack(cols).ravel())
    return (len(cols) * np.searchsorted(part, np.arange(partitions + 1))).tolist()


def _read_partition(sc: Scratch, parts: list[tuple[str, list[int]]], q: int) -> tuple[np.ndarray, np.ndarray]:
    """Partition q's directed pairs from every (part name, offsets), each once, sorted by (first, second)."""
    return _read_rows(sc, parts, q, 2)


def _read_rows(sc: Scratch, parts: list[tuple[str, list[int]]], q: int, width: int) -> tuple[np.ndarray, ...]:
    """Partition q's rows of `width` int64 columns from every (part name, offsets), each once, sorted."""
    got = [sc.segment(name, off[q], off[q + 1]) for name, off in parts]
    flat = np.concatenate([np.zeros(0, np.int64), *got]).reshape(-1, width)
    if not len(flat):
        return tuple(flat[:, k] for k in range(width))
    flat = flat[np.lexsort(flat.T[::-1])]
    new = np.r_[True, (flat[1:] != flat[:-1]).any(axis=1)]
    return tuple(flat[new, k].copy() for k in range(width))


# -- 1. candidate pairs ----------------------------------------------------------------------------
@dataclass(frozen=True)
class BandTask:
    """Band `band`'s buckets whose key falls in slice `slice` of `slices`."""

    band: int
    slice: int
    slices: int


def band_task(band_pairs, partitions: int, sc: Scratch, task: BandTask) -> tuple[str, list[int]]:
    """One band's candidate pairs in the task's slice (`band_pairs(band, slice, slices)` -> (lo, hi), e.g.
    lsh.band_pairs with its signatures bound), written as a part partitioned by lo (pure); returns
    (part name, offsets)."""
    lo, hi = band_pairs(task.band, task.slice, task.slices)
    name = f"band-{task.band}-{task.slice}"
    return name, _put_pairs(sc, name, lo, hi, partitions)


def merge_task(sc: Scratch, parts: list[tuple[str, list[int]]], q: int) -> tuple[np.ndarray, np.ndarray]:
    """Partition q's candidate pairs from every band part, each once, sorted (pure)."""
    return _read_partition(sc, parts, q)


def candidate_partitions(band_pairs, b: int, eng: engine.Engine, partitions: int, sc: Scratch
                         ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Each node partition's unique candidate pairs (lo, hi), in partition order, from `band_pairs` over the
    b bands (see `band_task`)."""
    slices = -(-partitions // b)
    tasks = [BandTask(k, s, slices) for k in range(b) for s in range(slices)]
    parts = list(engine.map_chunks(functools.partial(band_task, band_pairs, partitions, sc), tasks, eng))
    return engine.map_chunks(functools.partial(merge_task, sc, parts), range(partitions), eng)


# -- 2. connected components --------------------------------------------------------------------------
def star_task(sc: Scratch, parts: list[tuple[str, list[int]]], kind: str, name: str, partitions: int,
              q: int) -> tuple[tuple[str, list[int]], str]:
    """One large- or small-star step over the nodes of partition q (pure): ((part name, offsets) of the
    emitted edges, both directions; sha256 of the partition's input edges)."""
    x, y = _read_partition(sc, parts, q)
    digest = hashlib.sha256(np.column_stack([x, y]).tobytes()).hexdigest()
    first = np.r_[True, x[1:] != x[:-1]] if len(x) else np.zeros(0, bool)
    start = np.flatnonzero(first)
    group = np.cumsum(first) - 1
    least = np.minimum(x[start], y[start])[group]  # min(x, its smallest neighbour): pairs are sorted by (x, y)
    if kind == "large":  # each larger neighbour to the least of the neighbourhood
        sel = y > x
        a, b = y[sel], least[sel]
    else:  # the smaller neighbours and x itself to the least of them
        sel = (y < x) & (y != least)
        a = np.concatenate([y[sel], x[start][least[start] != x[start]]])
        b = np.concatenate([least[sel], least[start][least[start] != x[start]]])
    out = f"{name}-{q}"
    return (out, _put_pairs(sc, out, np.concatenate([a, b]), np.concatenate([b, a]), partitions)), digest


@dataclass(frozen=True)
class Ranks:
    """Parts of rows (node, key columns...) partitioned by node (`width` int64 values a row): what a label task
    carries beside each node of partition q (e.g. the keep rule's sort keys, docparts.py)."""

    parts: tuple
    width: int


def label_task(sc: Scratch, parts: list[tuple[str, list[int]]], partitions: int, ranks, q: int
               ) -> tuple[str, list[int]]:
    """(label, node, keep rank) of every node of partition q with an edge, the label its smallest neighbour or
    itself, written partitioned by label (pure). `ranks`: the (node, rank) part (`put_ranks`), or `Ranks`
    (then (label, node, its key columns)), of which the task reads partition q only; None: rank 0."""
    x, y = _read_partition(sc, parts, q)
    start = np.flatnonzero(np.r_[True, x[1:] != x[:-1]]) if len(x) else np.zeros(0, np.int64)
    node = x[start]
    rk = ranks if isinstance(ranks, Ranks) or ranks is None else Ranks((ranks,), 2)
    carried = [np.zeros(len(node), np.int64) for _ in range(rk.width - 1 if rk is not None else 1)]
    if rk is not None and len(node):
        rn, *rest = _read_rows(sc, list(rk.parts), q, rk.width)  # sorted by node
        at = np.searchsorted(rn, node)
        if (at >= len(rn)).any() or (rn[np.minimum(at, len(rn) - 1)] != node).any():
            raise ValueError(f"dedup: partition {q}: a node in an edge has no keep rank")
        carried = [c[at] for c in rest]
    out = f"labels-{q}"
    return out, _put_rows(sc, out, [np.minimum(node, y[start]), node, *carried], partitions)


def put_ranks(sc: Scratch, rank: np.ndarray, partitions: int) -> tuple[str, list[int]]:
    """The keep ranks as a part of (node, rank) pairs partitioned by node: each label task reads its own."""
    return "ranks", _put_pairs(sc, "ranks", np.arange(len(rank), dtype=np.int64), rank, partitions)


def components(u: np.ndarray, v: np.ndarray, partitions: int, eng: engine.Engine, sc: Scratch, ranks=None,
               edge_parts: tuple = ()) -> tuple[list[tuple[str, list[int]]], int]:
    """Label parts (label, node, keep rank) of every node in an edge of (u, v), the label the smallest node of
    its component, partitioned by label; and the number of (large, small) rounds run. `ranks`: the keep ranks'
    part (`put_ranks`, or `Ranks`; None: every rank 0). `edge_parts`: more edges, parts written by tasks
    (both directions, no self-loop, `_put_pairs` by node partition)."""
    u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
    keep = u != v
    parts = [("edges", _put_pairs(sc, "edges", np.concatenate([u[keep], v[keep]]),
                                  np.concatenate([v[keep], u[keep]]), partitions)), *edge_parts]
    before = None
    for k in range(MAX_ROUNDS):
        got = list(engine.map_chunks(functools.partial(star_task, sc, parts, "large", f"large{k}", partitions),
                                     range(partitions), eng))
        digests = [d for _, d in got]
        if digests == before:
            return list(engine.map_chunks(functools.partial(label_task, sc, parts, partitions, ranks),
                                          range(partitions), eng)), k
        parts = [p for p, _ in got]
        got = list(engine.map_chunks(functools.partial(star_task, sc, parts, "small", f"small{k}", partitions),
                                     range(partitions), eng))
        parts, before = [p for p, _ in got], digests
    raise RuntimeError(f"dedup: connected components did not converge in {MAX_ROUNDS} rounds")


# -- 3. the keep rule -----------------------------------------------------------------------------
def survivor_task(sc: Scratch, parts: list[tuple[str, list[int]]], q: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(node, its cluster's survivor, cluster size) of every node whose label is in partition q (pure): the
    member of smallest keep rank, read with the labels (no rank of another partition's nodes is needed)."""
    label, node, rank = _read_rows(sc, parts, q, 3)
    if not len(node):
        return node, node, node
    start = np.flatnonzero(np.r_[True, label[1:] != label[:-1]])
    size = np.diff(np.r_[start, len(label)])
    best = np.minimum.reduceat(rank, start)
    group = np.repeat(np.arange(len(start)), size)
    winner = np.full(len(start), -1, np.int64)
    hit = rank == best[group]
    winner[group[hit]] = node[hit]  # ranks are distinct: one member per cluster
    return node, winner[group], size[group]


def survivors(label_parts: list[tuple[str, list[int]]], n: int, partitions: int, eng: engine.Engine,
              sc: Scratch) -> tuple[np.ndarray, np.ndarray, dict]:
    """(survivor, cluster size) of every node 0 .. n-1 (from `components` with the keep ranks' part), and
    cluster counts."""
    kept, size = np.arange(n, dtype=np.int64), np.ones(n, np.int64)
    multi, largest, members = 0, 1 if n else 0, 0
    for node, win, sz in engine.map_chunks(functools.partial(survivor_task, sc, label_parts),
                                           range(partitions), eng):
        kept[node], size[node] = win, sz
        members += len(node)
        if len(node):
            multi += int(np.count_nonzero(node == win))
            largest = max(largest, int(sz.max()))
    return kept, size, {"clusters": n - members + multi, "multi_member_clusters": multi, "largest_cluster": largest}
