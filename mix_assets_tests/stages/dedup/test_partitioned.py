"""stages/dedup/partitioned.py: the reduce's candidate pairs, components and keep rule in partitions give the
same clusters, and dedup_keys the same bytes, whatever the partition count and the worker count."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from mix_assets.core import engine
from mix_assets.stages.dedup import dedup as lib
from mix_assets.stages.dedup import lsh
from mix_assets.stages.dedup import partitioned as part
from mix_assets_tests.support import chain_corpus

ENGINES = [engine.Engine(num_cpus=1), engine.Engine(num_cpus=2)]


def _labels(sc, label_parts, n: int, partitions: int) -> np.ndarray:
    got = np.arange(n)
    for q in range(partitions):
        label, node, _ = part._read_rows(sc, label_parts, q, 3)
        got[node] = label
    return got


@pytest.mark.parametrize("seed", range(12))
def test_components_label_each_node_with_its_components_smallest_node(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    if seed % 3 == 0:  # one long chain in a random order: the most rounds
        perm = rng.permutation(n)
        u, v = perm[:-1], perm[1:]
    else:
        m = int(rng.integers(0, 2 * n))
        u, v = rng.integers(0, n, m), rng.integers(0, n, m)
    _, comp = connected_components(coo_matrix((np.ones(len(u)), (u, v)), shape=(n, n)), directed=False)
    smallest = np.full(comp.max() + 1, n)
    np.minimum.at(smallest, comp, np.arange(n))
    rank = rng.permutation(n)  # keep rank: 0 = best
    best = np.full(comp.max() + 1, n)
    np.minimum.at(best, comp, rank)
    survivor = np.argsort(rank)[best[comp]]
    sizes = np.bincount(comp)
    for partitions in (1, 2, 8):
        for eng in ENGINES:
            with part.scratch() as sc:
                labels, _ = part.components(u, v, partitions, eng, sc, part.put_ranks(sc, rank, partitions))
                assert (_labels(sc, labels, n, partitions) == smallest[comp]).all()
                kept, size, st = part.survivors(labels, n, partitions, eng, sc)
            assert (kept == survivor).all() and (size == sizes[comp]).all()
            assert st == {"clusters": len(sizes), "multi_member_clusters": int((sizes > 1).sum()),
                          "largest_cluster": int(sizes.max())}


def test_candidate_pairs_do_not_depend_on_partitions_or_workers():
    rng = np.random.default_rng(3)
    sig = rng.integers(0, 4, size=(600, 32), dtype=np.uint32)  # few values: many shared bands
    rows = np.sort(rng.choice(600, 450, replace=False))
    want = lsh.candidate_pairs(sig, rows, 16, 2)
    assert len(want[0]) > 1000
    for partitions in (2, 8, 40):  # 40 > 16 bands: buckets sliced by key hash too
        for eng in ENGINES:
            got = lsh.candidate_pairs(sig, rows, 16, 2, eng=eng, partitions=partitions)
            assert all((g == w).all() for g, w in zip(got, want))


def dedup_bytes(paths, eng, partitions: int) -> bytes:
    table, st = lib.dedup_keys_table(paths, {"a": 2, "b": 1, "c": 0}, lib.DedupParams(partitions=partitions), eng)
    assert st["partitions"] == partitions
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def chain_cluster(data: bytes) -> pa.Table:
    t = pq.read_table(io.BytesIO(data))
    return t.filter(pa.compute.starts_with(t.column("doc_id"), "chain-"))


def test_dedup_keys_bytes_identical_for_any_partition_and_worker_count(tmp_path):
    paths = chain_corpus.write(tmp_path)
    want = dedup_bytes(paths, ENGINES[0], 1)
    chain = chain_cluster(want)
    # the chain is one cluster whose members sit in several partitions, joined through its links only
    assert chain.num_rows == chain_corpus.CHAIN and set(chain.column("cluster_size").to_pylist()) == {chain.num_rows}
    assert len(set(chain.column("cluster_id").to_pylist())) == 1
    ids = pa.array(sorted(chain.column("doc_id").to_pylist()))
    idx = np.asarray(pa.compute.index_in(ids, value_set=pq.read_table(io.BytesIO(want)).column("doc_id")))
    assert len(set(part.node_part(idx, 8).tolist())) > 3
    assert pq.read_table(io.BytesIO(want)).column("reason").to_pylist().count("exact_dup") >= 14
    for partitions in (1, 2, 8):
        for eng in ENGINES:
            assert dedup_bytes(paths, eng, partitions) == want, (partitions, eng.num_cpus)


def test_chain_ends_are_below_the_threshold():
    import random

    from mix_assets.stages.dedup import minhash

    texts = chain_corpus.chain_texts(random.Random(1))
    values, offsets = minhash.shingle_sets(pa.array(texts), 5)
    j = lsh.set_jaccard(values, offsets, np.array([0, 0]), np.array([1, len(texts) - 1]))
    assert j[0] >= 0.8 > j[1]


def test_partitions_must_be_positive():
    with pytest.raises(ValueError, match="partitions is 0"):
        lsh.dedup(["a"], ["k"], np.zeros((1, 8), np.uint32), np.ones(1), np.ones(1), np.ones(1), 2, 4, 0.8,
                  partitions=0)


def test_keep_ranks_are_read_by_partition_only(tmp_path):
    """Each label task reads its own node partition's keep ranks; no survivor task is sent the rank array."""
    import functools
    import pickle
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Logged(part.Scratch):
        def segment(self, name, start, stop):
            with open(f"{self.root}/reads.log", "a") as f:
                f.write(f"{name} {start} {stop}\n")
            return super().segment(name, start, stop)

    rng = np.random.default_rng(5)
    n, partitions = 2000, 8
    u, v = rng.integers(0, n, 600), rng.integers(0, n, 600)
    sc = Logged(str(tmp_path), None, "parts")
    ranks = part.put_ranks(sc, rng.permutation(n), partitions)
    labels, _ = part.components(u, v, partitions, engine.Engine(num_cpus=1), sc, ranks)
    off = ranks[1]
    reads = [line.split() for line in (tmp_path / "reads.log").read_text().splitlines() if line.startswith("ranks")]
    got = sorted((int(a), int(b)) for _, a, b in reads)
    segments = [(off[q], off[q + 1]) for q in range(partitions)]
    assert len(got) == partitions and got == sorted(segments)  # one task per partition, its own segment each
    plain = part.Scratch(str(tmp_path), None, "parts")
    assert len(pickle.dumps(functools.partial(part.survivor_task, plain, labels))) < n  # no per-document array


def test_scratch_sets_tasks_read_their_own_sets(tmp_path):
    """Verification's shingle sets go from the text tasks to scratch parts and from there to the comparing
    tasks: the same Jaccards as in memory, and what this process sends a task holds no set value."""
    from mix_assets.stages.dedup import signatures as sig

    rng = np.random.default_rng(9)
    sets = [np.unique(rng.integers(0, 60, rng.integers(0, 40))).astype(np.uint64) for _ in range(300)]
    sizes = np.array([len(x) for x in sets])
    values, offsets = np.concatenate(sets), np.r_[0, np.cumsum(sizes)]
    a, b = rng.integers(0, 300, 5000), rng.integers(0, 300, 5000)
    want = lsh.set_jaccard(values, offsets, a, b)
    sc = part.Scratch(str(tmp_path), None, "parts")
    cuts = [0, 17, 140, 300]  # three text tasks' parts
    names = [f"p{k}" for k in range(3)]
    for k, name in enumerate(names):
        sc.put(name, np.concatenate([np.zeros(0, np.uint64), *sets[cuts[k]:cuts[k + 1]]]).view(np.int64))
    sent = []
    plain = engine.map_chunks

    def spy(fn, chunks, e):
        chunks = list(chunks)
        sent.extend(chunks)
        return plain(fn, chunks, e)

    engine.map_chunks = spy
    try:
        for eng in ENGINES:
            store = sig.ScratchSets(sc, names, [sizes[cuts[k]:cuts[k + 1]] for k in range(3)], eng)
            assert len(store) == 300
            assert (store.jaccard(a, b, chunk=500) == want).all()
    finally:
        engine.map_chunks = plain
    assert len(sent) > 10 and all(x.dtype != np.uint64 for c in sent for _, st, sz in c[1] for x in (st, sz))
