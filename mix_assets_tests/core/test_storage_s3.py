"""`Storage` on an s3:// root, against the real SeaweedFS server of `mix_assets_tests/support/s3server.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from mix_assets.core.storage import Storage
from mix_assets.core.transport import split_s3_url
from mix_assets_tests.support.s3server import WRITER

pytestmark = pytest.mark.s3


@pytest.fixture
def s3_storage(seaweedfs, monkeypatch, tmp_path) -> Storage:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", WRITER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRITER[1])
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return Storage(seaweedfs.url("storage"), s3_endpoint_url=seaweedfs.endpoint, cache_dir=str(tmp_path / "cache"))


def _objects(seaweedfs, root: str) -> list[str]:
    bucket, prefix = split_s3_url(root)
    got = seaweedfs.client("writer").list_objects_v2(Bucket=bucket, Prefix=prefix + "/")
    return sorted(o["Key"].removeprefix(prefix + "/") for o in got.get("Contents", []))


def test_write_read_list_exists(s3_storage, seaweedfs):
    st = s3_storage
    assert st.is_s3 and st.list("") == []
    st.write_text("a/b.json", "{}")
    st.write_bytes("a/c/d.bin", b"\x00\x01")
    st.write_bytes("ab/e.bin", b"e")  # shares the characters "a" with the prefix "a/", not the folder
    assert st.read_text("a/b.json") == "{}" and st.read_bytes("a/c/d.bin") == b"\x00\x01"
    assert st.list("a") == ["a/b.json", "a/c/d.bin"]
    assert st.list("a/") == ["a/b.json", "a/c/d.bin"]
    assert st.list("") == ["a/b.json", "a/c/d.bin", "ab/e.bin"]
    assert st.exists("a/c/d.bin") and not st.exists("a/zzz") and not st.exists("a")
    # the objects sit under the root's prefix in the bucket, nowhere else
    assert _objects(seaweedfs, st.root) == ["a/b.json", "a/c/d.bin", "ab/e.bin"]
    assert st.uri("a/b.json") == f"{st.root}/a/b.json"


def test_local_path_downloads_the_object(s3_storage):
    st = s3_storage
    st.write_bytes("raw/x/documents.parquet", b"v1")
    p = st.local_path("raw/x/documents.parquet")
    assert open(p, "rb").read() == b"v1" and p.startswith(st.cache_dir)
    st.write_bytes("raw/x/documents.parquet", b"v2")  # a rewrite is seen, never a stale cached copy
    assert open(st.local_path("raw/x/documents.parquet"), "rb").read() == b"v2"
    with pytest.raises(FileNotFoundError, match="was the upstream asset materialised"):
        st.local_path("missing.parquet")


def test_delete_and_delete_prefix(s3_storage):
    st = s3_storage
    for k in ("mix/train/a.bin", "mix/train/b.bin", "mix/manifest.json", "mixed/keep.bin", "mix/train.txt"):
        st.write_bytes(k, b"x")
    st.delete_prefix("mix/train")
    assert st.list("") == ["mix/manifest.json", "mix/train.txt", "mixed/keep.bin"]
    st.delete("mix/manifest.json")
    st.delete("mix/manifest.json")  # deleting an absent key is not an error
    assert st.list("") == ["mix/train.txt", "mixed/keep.bin"]


def test_failed_write_leaves_no_object(s3_storage, seaweedfs):
    st = s3_storage
    with pytest.raises(RuntimeError, match="boom"):
        with st.writing("mix/train/train-00000.bin") as tmp:
            open(tmp, "wb").write(b"partial")
            raise RuntimeError("boom")
    assert not st.exists("mix/train/train-00000.bin")
    assert _objects(seaweedfs, st.root) == []
    st.write_bytes("k.bin", b"old")
    with pytest.raises(RuntimeError):
        with st.writing("k.bin") as tmp:
            open(tmp, "wb").write(b"new, half written")
            raise RuntimeError("boom")
    assert st.read_bytes("k.bin") == b"old"  # the previous version is untouched
    assert list(Path(st.cache_dir).rglob("*.tmp")) == []  # the local staging file is gone too


def test_endpoint_from_environment(seaweedfs, monkeypatch, tmp_path):
    """With no endpoint in the config, boto3 takes AWS_ENDPOINT_URL."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", WRITER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRITER[1])
    monkeypatch.setenv("AWS_ENDPOINT_URL", seaweedfs.endpoint)
    st = Storage(seaweedfs.url("env"), cache_dir=str(tmp_path / "cache"))
    st.write_text("x.json", "1")
    assert st.read_text("x.json") == "1" and st.list("") == ["x.json"]


def _get_counter(st: Storage) -> list[int]:
    """Bytes of every GetObject the storage's client makes, in order."""
    seen: list[int] = []
    st.location.client.meta.events.register("after-call.s3.GetObject",
                                            lambda parsed, **_: seen.append(parsed.get("ContentLength", 0)))
    return seen


def test_parquet_is_read_in_place_by_row_group_and_column(s3_storage, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    st = s3_storage
    n = 40_000
    table = pa.table({"doc_id": [f"d{i:06d}" for i in range(n)], "text": [f"{i:06d}" * 50 for i in range(n)]})
    with st.writing("raw/big/documents.parquet") as tmp:
        pq.write_table(table, tmp, row_group_size=5_000, compression="none")
    size = st.location.stat("raw/big/documents.parquet")[0]
    gets = _get_counter(st)
    pf = pq.ParquetFile(st.source("raw/big/documents.parquet"))
    assert pf.metadata.num_row_groups == 8 and len(gets) == 1  # the tail GET holds the footer
    ids = pq.read_table(st.source("raw/big/documents.parquet"), columns=["doc_id"]).column(0).to_pylist()
    assert ids == table.column("doc_id").to_pylist()
    one = pf.read_row_group(3, columns=["text"]).column(0).to_pylist()
    assert one == table.column("text").to_pylist()[15_000:20_000]
    assert sum(gets) < size / 2, (sum(gets), size)  # never the whole object, let alone several times
    # a small object arrives whole in the one GET that opens it
    st.write_bytes("small.bin", b"0123456789")
    gets.clear()
    with st.open("small.bin") as f:
        assert f.read() == b"0123456789" and f.seek(3) == 3 and f.read(4) == b"3456"
    assert gets == [10]
    st.write_bytes("empty.bin", b"")
    assert st.open("empty.bin").read() == b""
    with pytest.raises(FileNotFoundError, match="was the upstream asset materialised"):
        st.open("absent.parquet")


def test_sha256_comes_from_the_metadata_written_with_the_object(s3_storage, seaweedfs):
    st = s3_storage
    st.write_bytes("a.bin", b"abc")
    gets = _get_counter(st)
    assert st.sha256("a.bin") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" and gets == []
    bucket, prefix = split_s3_url(st.root)
    seaweedfs.client("writer").put_object(Bucket=bucket, Key=f"{prefix}/b.bin", Body=b"abc")  # no metadata
    assert st.sha256("b.bin") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    with pytest.raises(FileNotFoundError):
        st.sha256("c.bin")
