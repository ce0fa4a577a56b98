"""stages/dedup/docparts.py: dedup_keys' per-document reduce as tasks writes the bytes of the one-process reduce
(oracles/dedup_reduce_reference.py, `lsh.dedup` deciding) for any partition and worker count, and the step's
process sends no task a per-document array."""

from __future__ import annotations

import collections
import functools
import hashlib
import pickle
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.core import engine, tables
from mix_assets.core.storage import Storage
from mix_assets.stages.dedup import dedup as lib
from mix_assets.stages.dedup import docparts
from mix_assets_tests.oracles import dedup_reduce_reference as ref

ENGINES = [engine.Engine(num_cpus=1, chunk_rows=64), engine.Engine(num_cpus=2, chunk_rows=64)]
SOURCES = ("a", "b", "c")
PRIORITY = {"a": 0, "b": 2, "c": 1}


def _corpus(folder, seed: int = 7):
    """Raw files with exact copies across sources, near copies of other lengths, chains, wordless documents
    (some repeated), interleaved doc_ids; and the rejected ids (some of them survivors otherwise)."""
    rng = random.Random(seed)
    vocab = [f"w{k}" for k in range(4000)]
    docs = {s: [] for s in SOURCES}

    def add(text: str) -> str:
        s = rng.choice(SOURCES)
        doc = f"{rng.getrandbits(36):09x}-{s}"
        docs[s].append((doc, text))
        return doc

    rejected = []
    for k in range(260):
        words = [rng.choice(vocab) for _ in range(rng.randrange(30, 160))]
        first = add(" ".join(words))
        if k % 5 == 0:
            add(" ".join(words))  # an exact copy
        if k % 4 == 0:  # near copies, one longer, a link or two further
            for _ in range(rng.randrange(1, 4)):
                at = rng.randrange(0, len(words) - 2)
                words[at] = rng.choice(vocab)
                if rng.random() < 0.5:
                    words.append(rng.choice(vocab))
                d = add(" ".join(words))
                if rng.random() < 0.3:
                    rejected.append(d)
        if k % 9 == 0:
            rejected.append(first)
    for _ in range(6):
        add("")  # wordless: keyed on their raw text, exact copies of each other
    add("  ")
    paths = {}
    for s, rows in docs.items():
        paths[s] = str(folder / f"{s}.parquet")
        pq.write_table(pa.table({"doc_id": [d for d, _ in rows], "text": [t for _, t in rows],
                                 "n_chars": [len(t) for _, t in rows]}), paths[s], row_group_size=40)
    return paths, pa.array(sorted(rejected), pa.string())


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("docparts")
    paths, rejected = _corpus(folder)
    storage = Storage(str(folder / "storage"))
    lib.sign_sources(storage, paths, {s: f"v-{s}" for s in SOURCES}, lib.DedupParams(), engine.Engine(num_cpus=1))
    table, stats = ref.reduce_signatures(storage, paths, PRIORITY, lib.DedupParams(), rejected, reuse_pairs=False)
    key = "want/dedup_keys.parquet"
    tables.write_parquet(storage, key, table)
    return storage, paths, rejected, storage.read_bytes(key), stats


def _written(storage, paths, rejected, partitions: int, eng) -> tuple[bytes, dict]:
    key = f"got/{partitions}-{eng.num_cpus}.parquet"
    stats = lib.reduce_to(storage, key, paths, PRIORITY, lib.DedupParams(partitions=partitions), rejected, eng,
                          reuse_pairs=False)
    return storage.read_bytes(key), stats


def test_the_corpus_has_every_kind_of_cluster(signed):
    storage, *_ = signed
    t = pq.read_table(storage.source("want/dedup_keys.parquet"))
    reasons = t.column("reason").to_pylist()
    assert reasons.count("exact_dup") >= 50 and reasons.count("near_dup") >= 50
    assert max(t.column("cluster_size").to_pylist()) >= 4


@pytest.mark.parametrize("partitions", [1, 2, 8])
@pytest.mark.parametrize("workers", [0, 1])
def test_bytes_and_stats_are_the_one_process_reduces(signed, partitions, workers):
    storage, paths, rejected, want, want_stats = signed
    got, stats = _written(storage, paths, rejected, partitions, ENGINES[workers])
    assert got == want
    kept = stats.pop("kept_cluster_sizes")
    assert stats == dict(want_stats, partitions=partitions)
    t = pq.read_table(storage.source("want/dedup_keys.parquet")).filter(pa.compute.field("keep"))
    assert kept == dict(sorted(collections.Counter(t.column("cluster_size").to_pylist()).items()))


@pytest.mark.parametrize("partitions", [1, 8])
def test_the_chunk_size_of_the_sample_and_scatter_tasks_does_not_change_the_bytes(signed, monkeypatch, partitions):
    """docparts.CHUNK_ROWS only sets how many sample / scatter tasks there are (here 64-row chunks: several per
    source; the default 64 Ki is one per source here)."""
    storage, paths, rejected, want, _ = signed
    calls = []
    plain = docparts.scatter_task
    monkeypatch.setattr(docparts, "scatter_task", lambda st, cuts, chunk: calls.append(chunk) or plain(st, cuts, chunk))
    monkeypatch.setattr(docparts, "CHUNK_ROWS", 1)
    assert _written(storage, paths, rejected, partitions, ENGINES[1])[0] == want
    assert len(calls) > 2 * len(SOURCES)


def test_splitters_only_balance_the_ranges(signed, monkeypatch):
    """Any sorted splitters (here: every document in the last range but a few) give the same bytes."""
    storage, paths, rejected, want, _ = signed
    monkeypatch.setattr(docparts, "splitters", lambda samples, p: ("0",) * (p - 2) + ("1",))
    assert _written(storage, paths, rejected, 8, ENGINES[1])[0] == want


def test_ranges_out_of_order_are_refused(signed, monkeypatch):
    """Rows scattered by doc_id hash, not range, would write the ranges out of doc_id order: refused, and
    without that check the bytes differ (the identity test above can fail)."""
    import zlib

    storage, paths, rejected, want, _ = signed
    monkeypatch.setattr(docparts, "range_of", lambda doc, cuts: np.fromiter(
        (zlib.crc32(d.encode()) % (len(cuts) + 1) for d in doc.to_pylist()), np.int64, len(doc)))
    with pytest.raises(RuntimeError, match="ranges out of order"):
        _written(storage, paths, rejected, 8, ENGINES[0])
    monkeypatch.setattr(docparts, "check_order", lambda ranges: None)
    assert _written(storage, paths, rejected, 8, ENGINES[0])[0] != want


def test_reduce_signatures_reads_back_the_written_table(signed):
    storage, paths, rejected, want, _ = signed
    table, _ = lib.reduce_signatures(storage, paths, PRIORITY, lib.DedupParams(partitions=2), rejected,
                                     ENGINES[1], reuse_pairs=False)
    tables.write_parquet(storage, "got/back.parquet", table)
    assert storage.read_bytes("got/back.parquet") == want


def test_repeated_doc_ids_are_refused_naming_them(tmp_path):
    storage = Storage(str(tmp_path / "s"))
    paths = {}
    for s, ids in (("a", ["x1", "x2", "x3"]), ("b", ["x2", "y", "x3"])):
        paths[s] = str(tmp_path / f"{s}.parquet")
        pq.write_table(pa.table({"doc_id": ids, "text": [f"t {d} {s}" for d in ids], "n_chars": [5] * 3}), paths[s])
    lib.sign_sources(storage, paths, {}, lib.DedupParams(), engine.Engine(num_cpus=1))
    for p in (1, 4):
        with pytest.raises(ValueError, match=r"doc_id must be unique; repeated: \['x2', 'x3'\]"):
            lib.reduce_to(storage, "k.parquet", paths, {}, lib.DedupParams(partitions=p), reuse_pairs=False)


def test_an_empty_corpus_writes_an_empty_table(tmp_path):
    storage = Storage(str(tmp_path / "s"))
    path = str(tmp_path / "a.parquet")
    pq.write_table(pa.table({"doc_id": pa.array([], pa.string()), "text": pa.array([], pa.string()),
                             "n_chars": pa.array([], pa.int64())}), path)
    lib.sign_sources(storage, {"a": path}, {}, lib.DedupParams(), engine.Engine(num_cpus=1))
    table, _ = ref.reduce_signatures(storage, {"a": path}, {}, lib.DedupParams(), reuse_pairs=False)
    tables.write_parquet(storage, "want.parquet", table)
    for p in (1, 3):
        st = lib.reduce_to(storage, "k.parquet", {"a": path}, {}, lib.DedupParams(partitions=p), reuse_pairs=False)
        assert st["documents"] == 0 and storage.read_bytes("k.parquet") == storage.read_bytes("want.parquet")


def test_row_groups_cut_batches_at_exact_sizes():
    batches = [pa.record_batch([pa.array(range(a, b))], ["x"]) for a, b in ((0, 5), (5, 5), (5, 23), (23, 24))]
    got = list(docparts.row_groups(batches, 10, batches[0].schema))
    assert [t.num_rows for t in got] == [10, 10, 4]
    assert pa.concat_tables(got).column("x").to_pylist() == list(range(24))
    assert [t.num_rows for t in docparts.row_groups(batches[:3], 23, batches[0].schema)] == [23]
    assert [t.num_rows for t in docparts.row_groups([], 23, batches[0].schema)] == [0]


def test_tasks_get_no_per_document_array(signed, monkeypatch):
    """What the driver ships with each of docparts' tasks (the pickled function and chunk) does not grow with the
    documents (the verification's tasks get candidate pairs: O(pairs), tested in test_partitioned)."""
    storage, paths, rejected, _, _ = signed
    sizes = []
    plain = engine.map_chunks

    def spy(fn, chunks, e):
        chunks = list(chunks)
        if isinstance(fn, functools.partial) and fn.func.__module__ == docparts.__name__:
            sizes.extend(len(pickle.dumps((fn, c))) for c in chunks)
        return plain(fn, chunks, e)

    monkeypatch.setattr(engine, "map_chunks", spy)
    _written(storage, paths, None, 4, ENGINES[0])
    assert sizes and max(sizes) < 8 * 1024  # ~1,000 documents: 8 B each would be 8 KB


# -- clusters_consistent: the check as tasks ---------------------------------------------------------------
def _consistent(storage, table: pa.Table, partitions: int, eng) -> bool:
    tables.write_parquet(storage, "check/keys.parquet", table)
    return lib.cluster_problems(storage, "check/keys.parquet", eng, partitions) == [] and \
        docparts.clusters_consistent(tables.file_at(storage, "check/keys.parquet"),
                                     _scratch(storage), partitions, eng, 37)


def _scratch(storage):
    from mix_assets.stages.dedup import partitioned

    return partitioned.Scratch(storage.root, None, "check-parts")


@pytest.mark.parametrize("hex_keys", [False, True], ids=["short-keys", "sha256-keys"])
@pytest.mark.parametrize("seed", range(6))
def test_the_check_as_tasks_passes_exactly_the_tables_check_clusters_passes(tmp_path, seed, hex_keys):
    """Each corruption of a consistent table (one at a time, as in test_dedup): the tasks find it consistent
    iff `check_clusters` finds no problem (a False there only costs the full check; a True must be right)."""
    from mix_assets_tests.stages.dedup.test_dedup import _consistent_keys

    storage = Storage(str(tmp_path))
    rng = random.Random(seed)
    base = _consistent_keys(rng, 80)
    if hex_keys:
        for r in base:
            r["exact_key"] = hashlib.sha256(r["exact_key"].encode()).hexdigest()
    base.sort(key=lambda r: r["doc_id"])
    ok = pa.Table.from_pylist(base, schema=lib.DEDUP_SCHEMA)
    assert _consistent(storage, ok, 3, ENGINES[seed % 2])
    seen = set()
    for trial in range(12):
        rows = [dict(r) for r in base]
        r = rng.choice(rows)
        what = trial % 7
        if what == 0:
            r["keep"] = not r["keep"]
        elif what == 1:
            r["cluster_size"] += rng.choice([-1, 1])
        elif what == 2:
            r["reason"] = rng.choice([None, "exact_dup", "near_dup", "other"])
        elif what == 3:
            r["cluster_id"] = rng.choice(rows)["doc_id"]
        elif what == 4:
            r["exact_key"] = rng.choice(rows)["exact_key"]
        elif what == 5:
            r["doc_id"] = rng.choice(rows)["doc_id"]
        else:
            rows.reverse()  # ids out of order: left to check_clusters
        t = pa.Table.from_pylist(rows, schema=lib.DEDUP_SCHEMA)
        want = lib.check_clusters(t) == []
        tables.write_parquet(storage, "check/keys.parquet", t)
        got = docparts.clusters_consistent(tables.file_at(storage, "check/keys.parquet"), _scratch(storage),
                                           rng.choice([1, 3, 8]), ENGINES[trial % 2], rng.choice([16, 37, 1000]))
        assert got == want or (not got and want and what == 6), (what, got, want)
        assert lib.cluster_problems(storage, "check/keys.parquet", ENGINES[0], 4) == lib.check_clusters(t)
        seen.add(want)
    assert False in seen


def test_the_checks_partitions_hold_about_rows_rows_whatever_dedup_partitions(tmp_path, monkeypatch):
    """At 1 partition (dedup.partitions) the check still cuts a table of n rows into ceil(n / 37) hash partitions of
    ~37 rows (issue 29: one task held the whole table), with the same answers."""
    from mix_assets_tests.stages.dedup.test_dedup import _consistent_keys

    assert docparts.check_partitions(400, 1, 37) == 11 and docparts.check_partitions(400, 16, 37) == 16
    assert docparts.check_partitions(0, 1, 37) == 1 and docparts.check_partitions(37, 1, 37) == 1
    storage = Storage(str(tmp_path))
    base = sorted(_consistent_keys(random.Random(7), 400), key=lambda r: r["doc_id"])
    ok = pa.Table.from_pylist(base, schema=lib.DEDUP_SCHEMA)
    held: list[int] = []
    plain = docparts._concat

    def spy(batches, schema):
        t = plain(batches, schema)
        if schema == docparts._BY_CLUSTER:
            held.append(t.num_rows)
        return t

    monkeypatch.setattr(docparts, "_concat", spy)
    tables.write_parquet(storage, "check/keys.parquet", ok)
    assert docparts.clusters_consistent(tables.file_at(storage, "check/keys.parquet"), _scratch(storage), 1,
                                        ENGINES[1], 37)
    n = ok.num_rows
    assert n > 500 and len(held) == -(-n // 37) and sum(held) == n and max(held) <= 3 * 37, held
    bad = ok.set_column(ok.schema.get_field_index("keep"), "keep", pa.array([not ok.column("keep")[0].as_py()]
                                                                          + ok.column("keep").to_pylist()[1:]))
    tables.write_parquet(storage, "check/keys.parquet", bad)
    assert not docparts.clusters_consistent(tables.file_at(storage, "check/keys.parquet"), _scratch(storage), 1,
                                            ENGINES[0], 37)


def test_the_check_as_tasks_reads_the_written_file(signed):
    storage, paths, rejected, want, _ = signed
    for p in (1, 4):
        assert lib.cluster_problems(storage, "want/dedup_keys.parquet", ENGINES[1], p) == []


def test_row_groups_made_of_several_batches_write_the_same_bytes(signed, monkeypatch):
    """Row groups of 50 rows built from the ranges' 37-row batches (chunked, across ranges): write_parquet's bytes."""
    storage, paths, rejected, _, _ = signed
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 50)
    monkeypatch.setattr(docparts, "OUT_BATCH", 37)
    # a dictionary page limit the ids and keys overflow: the writer falls back to plain encoding at a point that
    # depends on how the row group's columns are chunked (measured: chunked groups wrote other bytes at 100 MB)
    monkeypatch.setattr(tables, "WRITER_OPTIONS", dict(tables.WRITER_OPTIONS, dictionary_pagesize_limit=300))
    table, _ = ref.reduce_signatures(storage, paths, PRIORITY, lib.DedupParams(), rejected, reuse_pairs=False)
    tables.write_parquet(storage, "want/small-groups.parquet", table)
    assert pq.ParquetFile(storage.source("want/small-groups.parquet")).metadata.num_row_groups > 5
    for p in (1, 8):
        got, _ = _written(storage, paths, rejected, p, ENGINES[1])
        assert got == storage.read_bytes("want/small-groups.parquet")
