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
3. The keep rule (`survivors`): one task per partition of the label's hash, choosing each cluster's member
   of smallest keep rank (`lsh._keep_rank`) and counting members; a document in no edge is its own cluster.

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

    def clear(self) -> None:
        self.storage().delete_prefix(self.prefix)


@contextmanager
def scratch(storage: Optional[Storage] = None) -> Iterator[Scratch]:
    """A fresh scratch folder of `storage` (a temporary local folder without one), deleted on exit."""
    if storage is None:
        with tempfile.TemporaryDirectory(prefix="dedup-reduce-") as tmp:
            yield Scratch(tmp, None, "parts")
        return
    s = Scratch(storage.root, storage.s3_endpoint_url, layout.REDUCE_SCRATCH.format(stage="dedup_keys",
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
    part = node_part(first, partitions)
    o = np.lexsort((second, first, part))
    part, first, second = part[o], first[o], second[o]
    new = np.r_[True, (first[1:] != first[:-1]) | (second[1:] != second[:-1])] if len(first) else np.zeros(0, bool)
    part, first, second = part[new], first[new], second[new]
    sc.put(name, np.column_stack([first, second]).ravel())
    return (2 * np.searchsorted(part, np.arange(partitions + 1))).tolist()


def _read_partition(sc: Scratch, parts: list[tuple[str, list[int]]], q: int) -> tuple[np.ndarray, np.ndarray]:
    """Partition q's directed pairs from every (part name, offsets), each once, sorted by (first, second)."""
    got = [sc.segment(name, off[q], off[q + 1]) for name, off in parts]
    flat = np.concatenate([np.zeros(0, np.int64), *got]).reshape(-1, 2)
    if not len(flat):
        return flat[:, 0], flat[:, 1]
    o = np.lexsort((flat[:, 1], flat[:, 0]))
    flat = flat[o]
    new = np.r_[True, (flat[1:, 0] != flat[:-1, 0]) | (flat[1:, 1] != flat[:-1, 1])]
    return flat[new, 0].copy(), flat[new, 1].copy()


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


def label_task(sc: Scratch, parts: list[tuple[str, list[int]]], partitions: int, q: int) -> tuple[str, list[int]]:
    """(label, node) of every node of partition q with an edge, the label its smallest neighbour or itself,
    written partitioned by label (pure)."""
    x, y = _read_partition(sc, parts, q)
    start = np.flatnonzero(np.r_[True, x[1:] != x[:-1]]) if len(x) else np.zeros(0, np.int64)
    node = x[start]
    out = f"labels-{q}"
    return out, _put_pairs(sc, out, np.minimum(node, y[start]), node, partitions)


def components(u: np.ndarray, v: np.ndarray, partitions: int, eng: engine.Engine, sc: Scratch
               ) -> tuple[list[tuple[str, list[int]]], int]:
    """Label parts (label, node) of every node in an edge of (u, v), the label the smallest node of its
    component, partitioned by label; and the number of (large, small) rounds run."""
    u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
    keep = u != v
    parts = [("edges", _put_pairs(sc, "edges", np.concatenate([u[keep], v[keep]]),
                                  np.concatenate([v[keep], u[keep]]), partitions))]
    before = None
    for k in range(MAX_ROUNDS):
        got = list(engine.map_chunks(functools.partial(star_task, sc, parts, "large", f"large{k}", partitions),
                                     range(partitions), eng))
        digests = [d for _, d in got]
        if digests == before:
            return list(engine.map_chunks(functools.partial(label_task, sc, parts, partitions),
                                          range(partitions), eng)), k
        parts = [p for p, _ in got]
        got = list(engine.map_chunks(functools.partial(star_task, sc, parts, "small", f"small{k}", partitions),
                                     range(partitions), eng))
        parts, before = [p for p, _ in got], digests
    raise RuntimeError(f"dedup: connected components did not converge in {MAX_ROUNDS} rounds")


# -- 3. the keep rule -----------------------------------------------------------------------------
def survivor_task(sc: Scratch, parts: list[tuple[str, list[int]]], rank: np.ndarray, q: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(node, its cluster's survivor, cluster size) of every node whose label is in partition q (pure)."""
    label, node = _read_partition(sc, parts, q)
    if not len(node):
        return node, node, node
    start = np.flatnonzero(np.r_[True, label[1:] != label[:-1]])
    size = np.diff(np.r_[start, len(label)])
    best = np.minimum.reduceat(rank[node], start)
    group = np.repeat(np.arange(len(start)), size)
    winner = np.full(len(start), -1, np.int64)
    hit = rank[node] == best[group]
    winner[group[hit]] = node[hit]  # ranks are distinct: one member per cluster
    return node, winner[group], size[group]


def survivors(label_parts: list[tuple[str, list[int]]], rank: np.ndarray, partitions: int, eng: engine.Engine,
              sc: Scratch) -> tuple[np.ndarray, np.ndarray, dict]:
    """(survivor, cluster size) of every node (index into `rank`, the keep rank, 0 = best), and cluster counts."""
    n = len(rank)
    kept, size = np.arange(n, dtype=np.int64), np.ones(n, np.int64)
    multi, largest, members = 0, 1 if n else 0, 0
    for node, win, sz in engine.map_chunks(functools.partial(survivor_task, sc, label_parts, rank),
                                           range(partitions), eng):
        kept[node], size[node] = win, sz
        members += len(node)
        if len(node):
            multi += int(np.count_nonzero(node == win))
            largest = max(largest, int(sz.max()))
    return kept, size, {"clusters": n - members + multi, "multi_member_clusters": multi, "largest_cluster": largest}
