"""Map chunks of an S3-stored mix name the object, not a local copy: Ray workers read their row
ranges from S3 through core/transport (range GETs), and the contamination scan, dedup_keys (with its
stored signatures), val_disjoint_from_train's near-dup scan and token_shards write the bytes of the
same stage over a local copy of the mix (issue 13 §2, multi-node reads)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.stages.audit import eval_scan
from mix_assets.stages.dedup import dedup
from mix_assets.core import layout, tables
from mix_assets.stages.tokens import shards
from mix_assets.stages.split import ranges as split_ranges
from mix_assets.stages.split import split
from mix_assets.core import engine as eng
from mix_assets.core.storage import Storage
from mix_assets_tests.support import audit_fixtures as fx
from mix_assets_tests.support.ray_local import local_ray
from mix_assets_tests.support.s3server import WRITER
from mix_assets_tests.support.tokens_fixtures import write_upstream
from mix_assets_tests.support.tokens_spec import tiny_spec

RAY2 = eng.Engine(kind="ray", num_cpus=2, chunk_rows=97)
CREDS = {"AWS_ACCESS_KEY_ID": WRITER[0], "AWS_SECRET_ACCESS_KEY": WRITER[1]}


@pytest.fixture(scope="module")
def s3_ray(seaweedfs):
    """A local Ray instance whose workers hold the S3 credentials in their environment (as a
    cluster's worker pods would), and the same credentials for the driver."""
    saved = {k: os.environ.get(k) for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", *CREDS)}
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
        os.environ.pop(k, None)
    os.environ.update(CREDS)
    try:
        with local_ray(RAY2, CREDS) as ray:
            yield ray
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def _mix(storage: Storage, spec) -> None:
    corpus = fx.make_corpus(n_web=300, n_books=500)  # planted eval copies in both sources
    for s in spec.sources:
        fx.write_docs(storage, s.name, corpus.docs[s.name])
    eval_scan.write_registry(storage, spec)


def _read_in_worker(rng: eng.RowRange) -> tuple[int, list[str]]:
    return os.getpid(), eng.read_rows(rng, ["doc_id"]).column("doc_id").to_pylist()


@pytest.mark.ray
def test_ray_workers_read_s3_chunks_and_the_scan_writes_the_local_bytes(s3_ray, seaweedfs, tmp_path):
    spec = fx.make_spec(tmp_path)
    local = Storage(root=str(tmp_path / "local"))
    remote = Storage(seaweedfs.url("engine-s3"), s3_endpoint_url=seaweedfs.endpoint, cache_dir=str(tmp_path / "cache"))
    _mix(local, spec)
    _mix(remote, spec)
    key = layout.RAW_DOCS.format(source="books")
    chunks = tables.row_ranges(remote, key, 97)
    assert all(c.path == remote.uri(key) and c.endpoint_url == seaweedfs.endpoint for c in chunks)
    got = list(eng.map_chunks(_read_in_worker, chunks, RAY2))
    assert [d for _, ids in got for d in ids] == [f"books-{i:04d}" for i in range(500)]
    assert os.getpid() not in {pid for pid, _ in got}  # read in the workers, from S3
    eval_scan.write_contamination_report(local, spec, eng.Engine(num_cpus=1))
    eval_scan.write_contamination_report(remote, spec, RAY2)
    for k in (layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS):
        assert remote.read_bytes(k) == local.read_bytes(k), k
    # the raw documents were never downloaded into the step's cache: only ranges were read
    assert not [p for p in Path(tmp_path / "cache").rglob("*.parquet") if "/raw/" in p.as_posix()]


def _raw_downloads(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*.parquet") if "/raw/" in p.as_posix()]


@pytest.fixture(scope="module")
def token_mix(tmp_path_factory):
    """A tokens-stage mix (raw a/b, split, tokenizer) on a local root; its raw files in 61-row row groups,
    so a chunk reads some of a file's row groups, not all."""
    root = tmp_path_factory.mktemp("s3_token_mix")
    spec = tiny_spec(root, epochs={"a": 2.5, "b": 1.3}, packing={"separator": "<|endoftext|>"})
    st = write_upstream(root, {s.name: 300 for s in spec.sources}, near_dups=10, masked=5)
    for s in spec.sources:
        path = st.local_path(layout.RAW_DOCS.format(source=s.name))
        pq.write_table(pq.read_table(path), path, row_group_size=61)
    split_ranges.build_validation_split(st, [s.name for s in spec.sources], spec.seed, spec.split.val_fraction)
    from mix_assets.stages.tokens.tokenizer import build_tokenizer

    build_tokenizer(st, spec)
    return root, spec, st


@pytest.mark.ray
def test_dedup_disjoint_scan_and_token_shards_on_s3_with_ray_write_the_local_bytes(s3_ray, seaweedfs, token_mix,
                                                                                   tmp_path):
    root, spec, local = token_mix
    remote = Storage(seaweedfs.upload_dir(root, "token-mix"), s3_endpoint_url=seaweedfs.endpoint,
                     cache_dir=str(tmp_path / "cache"))
    names = [s.name for s in spec.sources]
    prio, params = {n: 0 for n in names}, dedup.DedupParams()
    one = eng.Engine(num_cpus=1)
    # dedup_keys: the signing map on Ray workers reading the s3:// objects, signatures stored on S3
    want, _ = dedup.dedup_keys_table(tables.raw_files(local, names), prio, params, one, storage=local)
    got, _ = dedup.dedup_keys_table(tables.raw_files(remote, names), prio, params, RAY2, storage=remote)
    assert got.equals(want) and want.num_rows == 620
    # the reduce in 8 partitions: its tasks pass their parts through the S3 root, then the scratch goes
    got8, st8 = dedup.dedup_keys_table(tables.raw_files(remote, names), prio, dedup.DedupParams(partitions=8), RAY2,
                                       storage=remote)
    assert got8.equals(want) and st8["partitions"] == 8 and not remote.list("scratch")
    for n in names:
        assert remote.read_bytes(dedup.signatures_key(n)) == local.read_bytes(dedup.signatures_key(n)), n
    # val_disjoint_from_train's scan: each source's first 10 documents in val, their exact copies in train
    ids = want.column("doc_id").to_pylist()
    sp = pa.table({"doc_id": ids, "source": want.column("source"),
                   "split": ["val" if int(d.split("-")[1]) < 10 else "train" for d in ids]})
    scans = [split.cross_split_near_dups(sp, tables.raw_files(st, names), 0.8, signatures={
        n: st.source(dedup.signatures_key(n)) for n in names}) for st in (local, remote)]
    assert scans[1] == scans[0] and scans[0].val_docs_with_train_near_dup == 20
    # token_shards: the encode map on Ray workers, raw files and tokenizer.json read from S3
    res = shards.build_token_shards(local, spec, eng=one)
    shards.build_token_shards(remote, spec, eng=RAY2)
    keys = [layout.SHARD_STATS, *shards.shard_files(res.to_json())]
    assert len(keys) > 3
    for k in keys:
        assert remote.read_bytes(k) == local.read_bytes(k), k
    # again: every document's ids read from the token-id cache parts stored on S3 (range GETs), same bytes
    again = shards.build_token_shards(remote, spec, eng=RAY2)
    assert again.cache_docs and all(m == 0 < h for h, m in again.cache_docs.values())
    assert remote.list(layout.TOKEN_CACHE_DIR)
    for k in keys:
        assert remote.read_bytes(k) == local.read_bytes(k), k
    assert not _raw_downloads(tmp_path / "cache")  # only row-group ranges were read, never a whole raw file
