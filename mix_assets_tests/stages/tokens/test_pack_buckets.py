"""token_shards' pass 2 sorted and packed one key-range bucket at a time (issue 29 §1, stages/tokens/shards.py).

The split's appearances are spilled by the top bits of their stream-order key and each bucket is sorted and
packed alone, so the step holds one bucket, not the split. The bytes must not depend on the bucket count, the
worker count or the stream docs' row groups: every shard, shard_stats.json and both stream_docs files are
compared with a one-bucket build and with the per-document reference (tokens_reference.py).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mix_assets.core import engine as eng
from mix_assets.core import layout, tables
from mix_assets.core.storage import Storage
from mix_assets.stages.manifest.builder import write_manifest
from mix_assets.stages.split.ranges import build_validation_split
from mix_assets.stages.tokens import shards
from mix_assets.stages.tokens.tokenizer import build_tokenizer
from mix_assets_tests.oracles.tokens_reference import as_built, reference_shards
from mix_assets_tests.support.tokens_fixtures import write_upstream
from mix_assets_tests.support.tokens_spec import tiny_spec

KW = dict(epochs={"a": 2.5, "b": 1.3}, packing={"separator": "<|endoftext|>"})
ONE_BUCKET = 1 << 40


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    root = tmp_path_factory.mktemp("pack_buckets")
    spec = tiny_spec(root, **KW)
    st = write_upstream(root, {s.name: 400 for s in spec.sources}, near_dups=10, masked=5)
    build_validation_split(st, [s.name for s in spec.sources], spec.seed, spec.split.val_fraction)
    build_tokenizer(st, spec)
    return root, spec, st


def _outputs(root: Path) -> dict[str, str]:
    files = [*sorted((root / layout.MIX_DIR).rglob("*.bin")), root / layout.SHARD_STATS,
             *sorted((root / layout.STREAM_DOCS.format(split="x")).parent.glob("*.parquet"))]
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _build(upstream, monkeypatch, bucket: int, workers: int, row_group: int = tables.ROW_GROUP_ROWS,
           gather: int = shards.GATHER_TOKENS):
    root, spec, st = upstream
    bits = []
    real = shards._bucket_bits
    monkeypatch.setattr(shards, "BUCKET_APPEARANCES", bucket)
    monkeypatch.setattr(shards, "GATHER_TOKENS", gather)
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", row_group)
    monkeypatch.setattr(shards, "_bucket_bits", lambda n: bits.append(real(n)) or bits[-1])
    st.delete_prefix(layout.TOKEN_CACHE_DIR)
    shards.build_token_shards(st, spec, eng=eng.Engine(num_cpus=workers, chunk_rows=90))
    monkeypatch.undo()
    return _outputs(root), bits


def test_same_bytes_for_any_bucket_count_and_worker_count(upstream, monkeypatch):
    """Against a one-bucket, one-worker build with the same stream docs row groups (their size is a
    constant of the file format, so the files differ between two sizes, not between bucket counts)."""
    want = {}
    for row_group in (tables.ROW_GROUP_ROWS, 50):
        want[row_group], bits = _build(upstream, monkeypatch, ONE_BUCKET, 1, row_group)
        assert set(bits) == {0} and len(want[row_group]) > 5
    for bucket, workers, row_group in [(ONE_BUCKET, 2, 50), (64, 1, 50), (7, 2, 50), (7, 1, tables.ROW_GROUP_ROWS),
                                       (1, 2, 50)]:
        got, bits = _build(upstream, monkeypatch, bucket, workers, row_group)
        assert bucket == ONE_BUCKET or bits[0] >= 1, (bucket, bits)  # several buckets in the train split
        assert got == want[row_group], (bucket, workers, row_group)


def test_same_bytes_for_any_gather_size(upstream, monkeypatch):
    """Pass 2 gathers the sorted appearances' ids GATHER_TOKENS at a time (Packer.feed_many): one appearance per
    gather, a few, or the whole bucket give the same files."""
    want, _ = _build(upstream, monkeypatch, 7, 1)
    for gather in (1, 37, 5000):
        got, _ = _build(upstream, monkeypatch, 7, 1, gather=gather)
        assert got == want, gather


def test_gather_slices_cover_every_appearance_once():
    takes = [5, 0, 3, 9, 1, 0, 0, 4]
    for limit in (1, 4, 8, 100):
        cuts = list(shards._gather_slices(takes, limit))
        assert [i for a, b in cuts for i in range(a, b)] == list(range(len(takes)))
        assert all(b > a and (b - a == 1 or sum(takes[a:b]) <= limit) for a, b in cuts), (limit, cuts)
    assert list(shards._gather_slices([], 4)) == []


def test_bucketed_shards_equal_the_per_document_reference(upstream, monkeypatch):
    root, spec, st = upstream
    _build(upstream, monkeypatch, 7, 2, 50)
    man = write_manifest(st, name=spec.name, seed=spec.seed, spec_dump=spec.model_dump(mode="json"))
    assert as_built(man) == reference_shards(st, spec)


def test_stream_docs_are_the_bytes_of_one_parquet_write(upstream, monkeypatch, tmp_path):
    """Row groups handed out bucket by bucket are cut where one write_table of the whole table cuts them."""
    root, spec, st = upstream
    _build(upstream, monkeypatch, 7, 2, 20)
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 20)
    for split in ("train", "val"):
        key = layout.STREAM_DOCS.format(split=split)
        t = pq.read_table(root / key)
        assert t.num_rows > 3 * 20
        other = Storage(str(tmp_path))
        tables.write_parquet(other, key, t.combine_chunks())
        assert (tmp_path / key).read_bytes() == (root / key).read_bytes(), split


def test_key_ties_are_broken_by_doc_id_whatever_the_buckets(upstream, monkeypatch):
    """Keys forced to collide (few distinct values, spread over the top bits): doc_id, then the sources'
    concatenation order, decide within the tie, in any bucket split."""
    real = shards.order_keys

    def colliding(seed, doc_ids, epochs, n):
        k = real(seed, doc_ids, epochs, n)
        return k & ((k.dtype.type(0xF) << k.dtype.type(60)) | k.dtype.type(1))

    monkeypatch.setattr(shards, "order_keys", colliding)
    want, _ = _build(upstream, monkeypatch, ONE_BUCKET, 1)
    monkeypatch.setattr(shards, "order_keys", colliding)
    got, bits = _build(upstream, monkeypatch, 7, 2)
    assert bits[0] >= 1
    assert got == want


@pytest.mark.parametrize("bucket", [ONE_BUCKET, 3])
def test_distinct_documents_are_counted_exactly_in_any_group_count(monkeypatch, bucket):
    import pyarrow as pa

    monkeypatch.setattr(shards, "BUCKET_APPEARANCES", bucket)
    arrays = [pa.array(["a-1", "a-2", "x", "y"]), pa.array(["x", "b-1", "", "é"]), pa.array([], pa.string()),
              pa.array(["y", "", "a-2", "z"])]
    assert shards._count_distinct(arrays) == len(set(sum((a.to_pylist() for a in arrays), []))) == 8
    assert shards._count_distinct([]) == 0


def test_writes_run_in_order_bounded_and_raise_their_error():
    import threading
    import time

    done, gate = [], threading.Event()
    with shards._Writes(depth=2) as w:
        w.submit(lambda: gate.wait(5) and done.append(0))
        w.submit(lambda: done.append(1))
        t = threading.Timer(0.2, gate.set)
        t.start()
        w.submit(lambda: done.append(2))  # a third pending write waits for the first
        assert done[:1] == [0]
        t.join()
    assert done == [0, 1, 2]
    with pytest.raises(OSError, match="disk full"):
        with shards._Writes() as w:
            w.submit(lambda: (_ for _ in ()).throw(OSError("disk full")))
            time.sleep(0.01)
    w = shards._Writes(depth=1)
    try:
        w.submit(lambda: (_ for _ in ()).throw(OSError("disk full")))
        with pytest.raises(OSError, match="disk full"):
            w.submit(lambda: None)  # collects the first write's error
    finally:
        w.pool.shutdown(wait=True)
