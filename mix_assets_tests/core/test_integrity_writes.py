"""Bytes are hashed while they are written and refused when they are not what the caller vouched for
(issue 25, 2.1): transport put_file/copy_from, and a publish whose mix is rewritten between check and copy."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from mix_assets.stages.publish import publish as pub
from mix_assets.core import transport
from mix_assets.core.transport import IntegrityError, LocalLocation, S3Location
from mix_assets_tests.support.synthetic_mix import build_synthetic_mix


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- transport -----------------------------------------------------------------------------------------


def test_local_put_file_refuses_bytes_that_are_not_the_expected_sha256(tmp_path):
    loc = LocalLocation(tmp_path / "root")
    src = tmp_path / "src.bin"
    src.write_bytes(b"the bytes of run B")
    loc.put_bytes("rev/train.bin", b"what was there")
    wrong = _sha(b"the bytes run A checked")
    with pytest.raises(IntegrityError) as e:
        loc.put_file("rev/train.bin", src, wrong)
    msg = str(e.value)
    # before: put_file ignored its sha256 and stored run B's bytes
    assert str(tmp_path / "root" / "rev/train.bin") in msg and wrong in msg and _sha(src.read_bytes()) in msg
    assert loc.read_bytes("rev/train.bin") == b"what was there"  # left as it was
    assert sorted(p.name for p in (tmp_path / "root" / "rev").iterdir()) == ["train.bin"]  # no temp file left
    assert loc.put_file("rev/new.bin", src, _sha(src.read_bytes())) == _sha(src.read_bytes())
    assert loc.read_bytes("rev/new.bin") == src.read_bytes()


@pytest.mark.s3
@pytest.mark.parametrize("multipart", [False, True])
def test_s3_put_file_refuses_a_wrong_sha256_and_stores_nothing(tmp_path, seaweedfs, monkeypatch, multipart):
    if multipart:  # the multipart path: parts hashed as read, completed only when the whole matches
        monkeypatch.setattr(transport, "SINGLE_PUT_MAX", 1 << 20, raising=False)
        monkeypatch.setattr(transport, "PART", 5 << 20, raising=False)
    client = seaweedfs.client("writer")
    loc = S3Location(seaweedfs.url("put-file"), client)
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom((11 << 20) if multipart else 4096))
    wrong = _sha(b"the manifest's bytes")
    with pytest.raises(IntegrityError) as e:
        loc.put_file("rev/train.bin", src, wrong)
    # before: uploaded, with the wrong sha256 stamped as its metadata
    assert loc.uri("rev/train.bin") in str(e.value) and wrong in str(e.value) and _sha(src.read_bytes()) in str(e.value)
    assert loc.stat("rev/train.bin") is None
    assert not client.list_multipart_uploads(Bucket=loc.bucket, Prefix=loc.prefix).get("Uploads")
    good = _sha(src.read_bytes())
    assert loc.put_file("rev/train.bin", src, good) == good
    assert loc.stat("rev/train.bin") == (src.stat().st_size, good) and loc.digest("rev/train.bin")[1] == good


@pytest.mark.s3
def test_s3_copy_from_refuses_a_source_rewritten_after_it_was_hashed(seaweedfs):
    client = seaweedfs.client("writer")
    src, dst = S3Location(seaweedfs.url("copy-src"), client), S3Location(seaweedfs.url("copy-dst"), client)
    src.put_bytes("mix/a.bin", b"run A's shard")
    checked = _sha(b"run A's shard")  # what the manifest lists and the publish's check hashed
    src.put_bytes("mix/a.bin", b"run B's shard")  # the other run rewrites it
    # the copy hashes the source itself: bytes that are not the manifest's are refused
    with pytest.raises(IntegrityError) as e:  # before: copied, with the manifest's sha256 stamped on B's bytes
        dst.copy_from(src, "mix/a.bin", "rev/a.bin", checked)
    assert checked in str(e.value) and _sha(b"run B's shard") in str(e.value)
    assert dst.stat("rev/a.bin") is None
    # a version pinned when the check hashed it (publish passes it on): a rewrite since is refused by the server
    src.put_bytes("mix/a.bin", b"run A's shard")
    pinned = src.digest_versioned("mix/a.bin")
    src.put_bytes("mix/a.bin", b"run B's shard")
    with pytest.raises(IntegrityError, match="changed after its bytes were checked"):
        dst.copy_from(src, "mix/a.bin", "rev/a.bin", pinned[1], pinned[2])
    assert dst.stat("rev/a.bin") is None
    assert dst.copy_from(src, "mix/a.bin", "rev/a.bin", _sha(b"run B's shard"))
    assert dst.read_bytes("rev/a.bin") == b"run B's shard"


# -- a publish whose mix is rewritten between its check and its copy --------------------------------


def _rewrite_after_check(monkeypatch, rewrite):
    """Run the real check_local_mix, then let "run B" rewrite the mix (what the issue's race does)."""
    real = pub.check_local_mix

    def check_then_rewrite(manifest, source, *versions):
        problems = real(manifest, source, *versions)
        rewrite()
        return problems

    monkeypatch.setattr(pub, "check_local_mix", check_then_rewrite)


def _other_run_bytes(tmp_path: Path, rel: str) -> bytes:
    return (tmp_path / "run-b" / rel).read_bytes() if (tmp_path / "run-b").exists() else (
        build_synthetic_mix(tmp_path / "run-b", seed=99) and (tmp_path / "run-b" / rel).read_bytes())


@pytest.mark.parametrize("kind", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_publish_refuses_a_mix_rewritten_after_its_check_and_latest_stays(tmp_path, monkeypatch, kind, request):
    if kind == "s3":
        seaweedfs = request.getfixturevalue("seaweedfs")
        target = pub.S3Target(seaweedfs.url("swap"), seaweedfs.client("writer"))
    else:
        target = pub.LocalTarget(tmp_path / "published")
    first = build_synthetic_mix(tmp_path / "first", seed=1)
    rev1 = pub.publish(tmp_path / "first", target).revision
    mix = tmp_path / "mix"
    m = build_synthetic_mix(mix, seed=2)
    rel = m["files"][1]["path"]
    b_bytes = _other_run_bytes(tmp_path, rel)
    _rewrite_after_check(monkeypatch, lambda: (mix / rel).write_bytes(b_bytes))
    with pytest.raises(pub.PublishError) as e:
        pub.publish(mix, target)
    rev2 = pub.revision_id(m["fingerprint"])
    msg = str(e.value)
    # before: "17 of 17 files uploaded", run B's bytes under rev2 and `latest` naming it
    assert f"{rev2}/{rel}" in msg and m["files"][1]["sha256"] in msg and _sha(b_bytes) in msg
    assert "`latest` was not moved" in msg
    assert pub.read_latest(target) == rev1 and first["fingerprint"] != m["fingerprint"]
    assert target.stat(f"{rev2}/{rel}") is None and target.stat(f"{rev2}/manifest.json") is None


@pytest.mark.s3
def test_server_side_copy_refuses_a_storage_root_rewritten_after_its_check(tmp_path, seaweedfs, monkeypatch):
    from mix_assets.core.storage import Storage
    from mix_assets_tests.support.s3server import WRITER

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", WRITER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRITER[1])
    st = Storage(seaweedfs.url("swap-root"), s3_endpoint_url=seaweedfs.endpoint, cache_dir=str(tmp_path / "c"))
    m = build_synthetic_mix(tmp_path / "mix", seed=3)
    for p in sorted((tmp_path / "mix").rglob("*")):
        if p.is_file():
            st.write_bytes(f"mix/{p.relative_to(tmp_path / 'mix').as_posix()}", p.read_bytes())
    rel = m["files"][0]["path"]
    b_bytes = _other_run_bytes(tmp_path, rel)
    _rewrite_after_check(monkeypatch, lambda: st.write_bytes(f"mix/{rel}", b_bytes))
    target = pub.S3Target(seaweedfs.url("swap-target"), seaweedfs.client("writer"))
    with pytest.raises(pub.PublishError, match="changed after its bytes were checked"):
        pub.publish(st.sub("mix"), target)
    rev = pub.revision_id(m["fingerprint"])
    # before: CopyObject copied run B's bytes and stamped the manifest's sha256 on them
    assert target.stat(f"{rev}/{rel}") is None and pub.read_latest(target) is None


def test_latest_moves_only_after_the_revision_at_the_target_verifies(tmp_path, monkeypatch):
    target = pub.LocalTarget(tmp_path / "published")
    build_synthetic_mix(tmp_path / "first", seed=1)
    rev1 = pub.publish(tmp_path / "first", target).revision
    m = build_synthetic_mix(tmp_path / "mix", seed=2)
    rev2 = pub.revision_id(m["fingerprint"])
    rel = m["files"][0]["path"]
    real = target.create_if_absent

    def damage_then_create(key, data):  # someone writes into the revision before its manifest lands
        (tmp_path / "published" / rev2 / rel).write_bytes(b"not the manifest's bytes")
        return real(key, data)

    monkeypatch.setattr(target, "create_if_absent", damage_then_create)
    with pytest.raises(pub.PublishError, match="does not verify, `latest` not moved") as e:
        pub.publish(tmp_path / "mix", target)
    assert f"{rev2}/{rel}" in str(e.value)
    assert pub.read_latest(target) == rev1  # before: `latest` named rev2 without any check
    monkeypatch.undo()
    # the caller that verifies itself: latest stays until it says so
    res = pub.publish(tmp_path / "mix", target, point_latest=False)  # repairs the damaged file
    assert res.revision == rev2 and pub.read_latest(target) == rev1
    assert pub.verify(target, rev2, tmp_path / "mix").passed
    target.point_latest(rev2, m["fingerprint"])
    assert pub.read_latest(target) == rev2
    assert json.loads((tmp_path / "published" / "latest").read_text())["revision"] == rev2
