"""gc (mix_assets/gc.py) and the object store (core/objects.py) on a local root and on S3 (SeaweedFS).

The demo-level test (a rebuild after gc, the CLI's --dry-run) is in stages/test_reuse.py; here a root is
laid out by hand: which keyed records and blobs go, which stay, and why.
"""

from __future__ import annotations

import json
import os

import pytest

from mix_assets import gc
from mix_assets.core import lineage, objects
from mix_assets.core.storage import Storage
from mix_assets.core.transport import IntegrityError
from mix_assets_tests.support.s3server import WRITER

OLD = "2020-01-01T00:00:00Z"


def _artifact(st: Storage, asset: str, body: bytes, created: str | None = None, current: bool = False
              ) -> tuple[str, str]:
    """A working file of `asset`, filed as a blob with its keyed record (`current`: and its lineage
    record); (key, blob sha256)."""
    path = f"work/{asset}/{body.decode()}.bin"
    st.write_bytes(path, body)
    sha = st.sha256(path)
    key = f"{asset}-{body.decode()}".encode().hex().ljust(64, "0")[:64]
    if current:
        key = lineage.write_record(st, asset, {path: sha}, {}, "c", input_keys={})["key"]
    objects.stash(st, asset, key, {path: sha}, input_keys={}, code_version="c", run_id="r", dagster=None)
    if created:  # backdate it
        rec = json.loads(st.read_text(objects.keyed_key(asset, key)))
        st.write_text(objects.keyed_key(asset, key), json.dumps({**rec, "created": created}))
    return key, sha


def _layout(st: Storage) -> dict:
    cur, cur_sha = _artifact(st, "a", b"current", OLD, current=True)
    old, old_sha = _artifact(st, "a", b"old", OLD)
    pub, pub_sha = _artifact(st, "b", b"published", OLD)
    st.write_text("publish/published_revision.json",
                  json.dumps({"revision": "rev-x", "input_keys": {"artifacts": {"b": pub}}}))
    new, new_sha = _artifact(st, "a", b"new")
    return {"current": cur, "old": old, "pub": pub, "new": new, "old_sha": old_sha, "keep_shas":
            {cur_sha, pub_sha, new_sha}}


def _check(st: Storage, backdate_blobs) -> None:
    ids = _layout(st)
    backdate_blobs()
    p = gc.plan(st, keep_days=7)
    assert set(p.remove_records) == {objects.keyed_key("a", ids["old"])}
    assert set(p.remove_blobs) == {objects.object_key(ids["old_sha"])}
    assert p.keep_records[objects.keyed_key("a", ids["current"])] == "current lineage record"
    assert p.keep_records[objects.keyed_key("b", ids["pub"])] == "published rev-x"
    assert p.keep_records[objects.keyed_key("a", ids["new"])].startswith("created within")
    gc.apply(st, p)
    assert not st.exists(objects.keyed_key("a", ids["old"])) and not st.exists(objects.object_key(ids["old_sha"]))
    assert all(objects.blob_problem(st, sha) is None for sha in ids["keep_shas"])
    assert gc.plan(st, keep_days=7).remove_records == {}  # nothing more to collect
    # everything unreferenced goes at --keep-days 0 but what records and the publication name
    p0 = gc.plan(st, keep_days=0)
    assert set(p0.remove_records) == {objects.keyed_key("a", ids["new"])}


def test_gc_on_a_local_root(tmp_path):
    st = Storage(str(tmp_path / "root"))

    def backdate():
        for k in st.list(objects.OBJECTS):
            os.utime(tmp_path / "root" / k, (0, 0))

    _check(st, backdate)


@pytest.mark.s3
def test_gc_and_the_object_store_on_s3(seaweedfs, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", WRITER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRITER[1])
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    st = Storage(seaweedfs.url("gc"), s3_endpoint_url=seaweedfs.endpoint, cache_dir=str(tmp_path / "cache"))
    _check(st, lambda: None)
    # restore: a server-side copy of exactly the blob's bytes; a blob overwritten in the store is refused
    st.write_bytes("mix/x.bin", b"shard bytes")
    sha = st.sha256("mix/x.bin")
    assert objects.put_object(st, "mix/x.bin", sha) and not objects.put_object(st, "mix/x.bin", sha)
    objects.restore_object(st, sha, "mix/y.bin")
    assert st.read_bytes("mix/y.bin") == b"shard bytes" and st.sha256("mix/y.bin") == sha
    st.location.client.put_object(Bucket=st.location.bucket, Key=st.location.key(objects.object_key(sha)),
                                  Body=b"other bytes", Metadata={"sha256": sha})  # lies about its hash
    assert "not its name" in objects.blob_problem(st, sha)
    with pytest.raises(IntegrityError):
        objects.restore_object(st, sha, "mix/z.bin")
    assert not st.exists("mix/z.bin")
