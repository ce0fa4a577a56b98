"""Map chunks of an S3-stored mix name the object, not a local copy: Ray workers read their row
ranges from S3 through lib/transport (range GETs), and the contamination scan writes the bytes of
the same scan over a local copy of the mix (issue 13 §2, multi-node reads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mix_assets.lib import audit, layout, tables
from mix_assets.lib import engine as eng
from mix_assets.lib.storage import Storage
from mix_assets_tests.support import audit_fixtures as fx
from mix_assets_tests.support.ray_local import local_ray
from mix_assets_tests.support.s3server import WRITER

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
    audit.write_registry(storage, spec)


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
    audit.write_contamination_report(local, spec, eng.Engine(num_cpus=1))
    audit.write_contamination_report(remote, spec, RAY2)
    for k in (layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS):
        assert remote.read_bytes(k) == local.read_bytes(k), k
    # the raw documents were never downloaded into the step's cache: only ranges were read
    assert not [p for p in Path(tmp_path / "cache").rglob("*.parquet") if "/raw/" in p.as_posix()]
