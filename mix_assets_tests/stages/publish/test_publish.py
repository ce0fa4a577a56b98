"""Publishing and verifying a revision: local directory, SeaweedFS S3, and the hub (offline, fake HTTP)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mix_assets.stages.publish import publish as pub
from mix_assets.format.paths import UnsafePathError
from mix_assets_tests.support.synthetic_mix import build_synthetic_mix


class Killed(RuntimeError):
    pass


def kill_after(monkeypatch, target, n: int):
    """Make the target's (n+1)-th file upload raise, as if the process died mid-publish."""
    calls = {"n": 0}
    real = target.put_file

    def put_file(key, local, sha256):
        if calls["n"] >= n:
            raise Killed(f"killed before uploading {key}")
        calls["n"] += 1
        real(key, local, sha256)

    monkeypatch.setattr(target, "put_file", put_file)
    return lambda: monkeypatch.setattr(target, "put_file", real)


def flip_byte(data: bytes, at: int = 3) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


def _manifest(mix: Path) -> dict:
    return json.loads((mix / "manifest.json").read_text())


# -- pure parts --------------------------------------------------------------------------------


def test_revision_id_and_card_are_pure_functions_of_the_manifest(synthetic_mix):
    m = _manifest(synthetic_mix)
    assert pub.revision_id(m["fingerprint"]) == "rev-" + m["fingerprint"][:16]
    assert pub.dataset_card(m) == pub.dataset_card(json.loads(json.dumps(m)))
    card = pub.dataset_card(m)
    assert m["fingerprint"] in card and "| train | 12 | 192 | 3 |" in card
    with pytest.raises(pub.PublishError, match="not a lowercase hex"):
        pub.revision_id("XYZ")


def test_local_mix_that_disagrees_with_its_manifest_is_not_published(synthetic_mix, tmp_path):
    shard = synthetic_mix / "train" / "train-00001.bin"
    shard.write_bytes(flip_byte(shard.read_bytes()))
    with pytest.raises(pub.PublishError, match="train/train-00001.bin: sha256 differs"):
        pub.publish(synthetic_mix, pub.LocalTarget(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


# -- local target -------------------------------------------------------------------------------


def test_local_publish_verify_republish_and_tamper(synthetic_mix, tmp_path):
    target = pub.LocalTarget(tmp_path / "published")
    m = _manifest(synthetic_mix)
    lines: list[str] = []
    res = pub.publish(synthetic_mix, target, log=lines.append)
    rev = pub.revision_id(m["fingerprint"])
    assert res.created and res.revision == rev and res.location == str(tmp_path / "published" / rev)
    assert res.files == len(m["files"]) + 2 == res.uploaded_files
    assert pub.read_latest(target) == rev
    # the log states the numbers the asset's metadata shows (card and manifest included)
    assert lines[-1] == (f"published {res.location}: {res.uploaded_files:,} of {res.files:,} files uploaded "
                         f"({res.uploaded_bytes:,} of {res.bytes:,} bytes)"), lines

    v = pub.verify(target, rev, synthetic_mix)
    assert v.passed, v.problems
    assert v.files_verified == res.files and v.bytes_verified == res.bytes
    assert v.samples_compared >= 4  # first and last of train and val at least
    assert v.samples_total == sum(s["samples"] for s in m["splits"].values())

    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "published").rglob("*")}
    again = pub.publish(synthetic_mix, target)
    assert (again.created, again.uploaded_files, again.revision) == (False, 0, rev)
    assert mtimes == {p: p.stat().st_mtime_ns for p in (tmp_path / "published").rglob("*")}

    victim = tmp_path / "published" / rev / "val" / "val-00000.bin"
    victim.write_bytes(flip_byte(victim.read_bytes()))
    bad = pub.verify(target, rev, synthetic_mix)
    assert not bad.passed
    assert len(bad.problems) == 1 and bad.problems[0].startswith(str(victim) + ":")


def test_local_different_content_under_an_existing_revision_is_refused(synthetic_mix, tmp_path):
    target = pub.LocalTarget(tmp_path / "published")
    pub.publish(synthetic_mix, target)
    m = _manifest(synthetic_mix)
    m["seed"] = 99  # same files, same fingerprint, different manifest
    (synthetic_mix / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(pub.RevisionConflict, match="fields differ: seed"):
        pub.publish(synthetic_mix, target)


def test_local_publish_killed_midway_leaves_no_revision_and_a_retry_completes(synthetic_mix, tmp_path,
                                                                               monkeypatch):
    target = pub.LocalTarget(tmp_path / "published")
    m = _manifest(synthetic_mix)
    rev = pub.revision_id(m["fingerprint"])
    restore = kill_after(monkeypatch, target, 3)
    with pytest.raises(Killed):
        pub.publish(synthetic_mix, target)
    assert len(list((tmp_path / "published" / rev).rglob("*.bin"))) == 3  # files landed, no manifest
    assert pub.read_latest(target) is None
    v = pub.verify(target, rev, synthetic_mix)
    where = tmp_path / "published" / rev
    assert v.problems == [f"{where / 'manifest.json'}: missing, so {where} is not a revision"]
    restore()
    res = pub.publish(synthetic_mix, target)
    assert res.created and res.uploaded_files == len(m["files"]) - 3 + 2  # resumed: 3 files kept
    assert pub.verify(target, rev, synthetic_mix).passed
    assert pub.read_latest(target) == rev


def test_local_two_revisions_coexist_and_latest_moves(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ma, mb = build_synthetic_mix(a, seed=1), build_synthetic_mix(b, seed=2)
    target = pub.LocalTarget(tmp_path / "published")
    ra, rb = pub.publish(a, target).revision, pub.publish(b, target).revision
    assert ra != rb and pub.read_latest(target) == rb
    assert pub.verify(target, ra, a).passed and pub.verify(target, rb, b).passed
    mismatch = pub.verify(target, ra, b)
    assert not mismatch.passed and "differs from the local manifest" in mismatch.problems[0]
    assert ma["fingerprint"] != mb["fingerprint"]


def test_published_revision_passes_the_manifest_checker_with_hashes(synthetic_mix, tmp_path):
    """Before: `README.md: present ... but not listed in files` on every untouched published revision."""
    from mix_assets.format.checker import check_manifest

    target = pub.LocalTarget(tmp_path / "published")
    res = pub.publish(synthetic_mix, target)
    published = tmp_path / "published" / res.revision
    m = _manifest(published)
    assert check_manifest(m, published, verify_hashes=True) == []
    card = published / "README.md"
    card.write_text(card.read_text().replace("seed: 0", "seed: 1"))
    problems = check_manifest(m, published, strict=False)
    assert len(problems) == 1 and problems[0].startswith("README.md: present but not the dataset card"), problems


def test_verify_never_writes_outside_its_cache_for_a_hostile_remote_manifest(synthetic_mix, tmp_path):
    """Before: a remote `../../x` (or absolute) entry was read from beside the target and written beside the cache."""
    target = pub.LocalTarget(tmp_path / "published")
    rev = pub.publish(synthetic_mix, target).revision
    (tmp_path / "secret").write_bytes(b"outside the target")  # what published/<rev>/../../secret names
    absolute = tmp_path / "abs-dest"
    remote = _manifest(tmp_path / "published" / rev)
    remote["files"] += [{"path": "../../secret", "bytes": 18, "sha256": "0" * 64},
                        {"path": str(absolute), "bytes": 18, "sha256": "0" * 64}]
    (tmp_path / "published" / rev / "manifest.json").write_text(json.dumps(remote))
    cache = tmp_path / "v" / "cache"
    v = pub.verify(target, rev, synthetic_mix, cache_dir=str(cache))
    assert not (tmp_path / "v" / "secret").exists() and not absolute.exists()
    assert not v.passed
    assert any("'../../secret'" in p and "'..'" in p for p in v.problems), v.problems
    assert any(repr(str(absolute)) in p and "absolute path" in p for p in v.problems), v.problems
    assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == ["manifest.json"]
    with pytest.raises(UnsafePathError):
        target.read(f"{rev}/../../secret")


def test_a_local_mix_with_a_symlink_out_of_its_directory_is_not_published(synthetic_mix, tmp_path):
    victim = synthetic_mix / "review" / "contamination_report.json"
    outside = tmp_path / "report-elsewhere.json"
    outside.write_bytes(victim.read_bytes())
    victim.unlink()
    victim.symlink_to(outside)
    with pytest.raises(pub.PublishError, match="review/contamination_report.json.*outside"):
        pub.publish(synthetic_mix, pub.LocalTarget(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def _damage(target, rev: str, deleted: str, flipped: str) -> None:
    """Delete one object of a published revision and flip a byte of another, keeping its recorded sha256."""
    if isinstance(target, pub.LocalTarget):
        (target.root / rev / deleted).unlink()
        p = target.root / rev / flipped
        p.write_bytes(flip_byte(p.read_bytes()))
        (target.root / rev / "README.md").unlink()
        return
    c, b = target.client, target.loc.bucket
    c.delete_object(Bucket=b, Key=target.loc.key(f"{rev}/{deleted}"))
    key = target.loc.key(f"{rev}/{flipped}")
    head = c.head_object(Bucket=b, Key=key)
    body = c.get_object(Bucket=b, Key=key)["Body"].read()
    c.put_object(Bucket=b, Key=key, Body=flip_byte(body), Metadata=head["Metadata"])  # metadata says intact
    c.delete_object(Bucket=b, Key=target.loc.key(f"{rev}/README.md"))


def _republish_repairs(mix: Path, writer, reader) -> None:
    m = _manifest(mix)
    first = pub.publish(mix, writer)
    rev = first.revision
    deleted, flipped = m["files"][1], m["files"][-1]
    _damage(writer, rev, deleted["path"], flipped["path"])
    assert not pub.verify(reader, rev, mix).passed
    again = pub.publish(mix, writer)  # before: "already holds this content; nothing uploaded"
    assert (again.created, again.revision, again.uploaded_files) == (False, rev, 3)
    card = len(pub.dataset_card(m).encode())
    assert again.uploaded_bytes == deleted["bytes"] + flipped["bytes"] + card
    v = pub.verify(reader, rev, mix)
    assert v.passed, v.problems
    assert pub.read_latest(reader) == rev
    third = pub.publish(mix, writer)
    assert (third.created, third.uploaded_files) == (False, 0)


def test_local_republish_repairs_missing_and_damaged_objects(synthetic_mix, tmp_path):
    target = pub.LocalTarget(tmp_path / "published")
    _republish_repairs(synthetic_mix, target, target)


# -- S3 (SeaweedFS) -------------------------------------------------------------------------------


@pytest.mark.s3
def test_s3_publish_verify_readonly_and_tamper(synthetic_mix, seaweedfs):
    url = seaweedfs.url("publish")
    writer = pub.S3Target(url, seaweedfs.client("writer"))
    reader = pub.S3Target(url, seaweedfs.client("reader"))
    m = _manifest(synthetic_mix)
    res = pub.publish(synthetic_mix, writer)
    rev = pub.revision_id(m["fingerprint"])
    assert res.location == f"{url}/{rev}" and res.created

    v = pub.verify(reader, rev, synthetic_mix)
    assert v.passed, v.problems
    assert v.files_verified == len(m["files"]) + 2

    # the verifying identity really is read-only; anonymous access is refused outright
    with pytest.raises(Exception, match="AccessDenied"):
        reader.put_bytes(f"{rev}/intruder", b"x")
    anon = pub.verify(pub.S3Target(url, seaweedfs.client("anonymous")), rev, synthetic_mix)
    assert not anon.passed

    key = f"{writer.prefix}/{rev}/train/train-00002.bin"
    body = writer.client.get_object(Bucket=writer.bucket, Key=key)["Body"].read()
    writer.client.put_object(Bucket=writer.bucket, Key=key, Body=flip_byte(body, 10))
    bad = pub.verify(reader, rev, synthetic_mix)
    assert [p.split(": ")[0] for p in bad.problems] == [f"{url}/{rev}/train/train-00002.bin"]


@pytest.mark.s3
def test_s3_republish_is_a_noop_and_conflicts_are_refused(synthetic_mix, seaweedfs):
    url = seaweedfs.url("idem")
    target = pub.S3Target(url, seaweedfs.client("writer"))
    first = pub.publish(synthetic_mix, target)
    listing = target.client.list_objects_v2(Bucket=target.bucket, Prefix=target.prefix)["Contents"]
    again = pub.publish(synthetic_mix, target)
    assert (again.created, again.uploaded_files, again.revision) == (False, 0, first.revision)
    assert target.client.list_objects_v2(Bucket=target.bucket, Prefix=target.prefix)["Contents"] == listing

    m = _manifest(synthetic_mix)
    m["name"] = "other"
    (synthetic_mix / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(pub.RevisionConflict, match=f"{url}/{first.revision}/manifest.json"):
        pub.publish(synthetic_mix, target)
    # the conditional PUT itself refuses to replace a manifest, even without the read-before-write
    assert target.create_if_absent(f"{first.revision}/manifest.json", b"{}") is False


@pytest.mark.s3
def test_s3_publish_killed_mid_upload_leaves_no_revision_and_a_retry_completes(synthetic_mix, seaweedfs,
                                                                                monkeypatch):
    url = seaweedfs.url("killed")
    target = pub.S3Target(url, seaweedfs.client("writer"))
    reader = pub.S3Target(url, seaweedfs.client("reader"))
    m = _manifest(synthetic_mix)
    rev = pub.revision_id(m["fingerprint"])
    restore = kill_after(monkeypatch, target, 4)
    with pytest.raises(Killed):
        pub.publish(synthetic_mix, target)
    keys = [o["Key"] for o in target.client.list_objects_v2(Bucket=target.bucket,
                                                            Prefix=target.prefix)["Contents"]]
    assert len(keys) == 4 and not any(k.endswith(("manifest.json", "latest")) for k in keys)
    assert pub.read_latest(reader) is None
    assert "is not a revision" in pub.verify(reader, rev, synthetic_mix).problems[0]

    restore()
    res = pub.publish(synthetic_mix, target)
    assert res.uploaded_files == len(m["files"]) - 4 + 2
    assert pub.verify(reader, rev, synthetic_mix).passed
    assert pub.read_latest(reader) == rev


@pytest.mark.s3
def test_s3_republish_repairs_missing_and_damaged_objects(synthetic_mix, seaweedfs):
    url = seaweedfs.url("repair")
    _republish_repairs(synthetic_mix, pub.S3Target(url, seaweedfs.client("writer")),
                       pub.S3Target(url, seaweedfs.client("reader")))


# -- the hub (real huggingface_hub code, fake HTTP) -------------------------------------------------


def test_hub_publish_commit_tag_verify_and_republish(tmp_path, fake_hub):
    a, b = tmp_path / "a", tmp_path / "b"
    ma, mb = build_synthetic_mix(a, seed=1), build_synthetic_mix(b, seed=2, train_shards=(3, 3))
    target = pub.HubTarget("hf://datasets/org/mix", api=fake_hub.api())
    ra = pub.publish(a, target)
    repo = fake_hub.repos["org/mix"]
    assert ra.created and repo.tags["rev-" + ma["fingerprint"][:16]] == ra.revision == repo.branches["main"]
    assert ra.location == f"hf://datasets/org/mix@{ra.revision}"
    assert set(repo.commits[ra.revision]["tree"]) == {".gitattributes", *pub.published_paths(ma)}
    assert ("PUT", f"/lfs-upload/{ma['files'][0]['sha256']}") in fake_hub.requests  # shards went through LFS

    anonymous = pub.HubTarget("hf://datasets/org/mix", api=fake_hub.api(token=False))
    v = pub.verify(anonymous, ra.revision, a)
    assert v.passed, v.problems
    assert v.files_verified == len(ma["files"]) + 2

    n_commits = len(repo.commits)
    again = pub.publish(a, target)
    assert (again.created, again.revision, again.uploaded_files) == (False, ra.revision, 0)
    assert len(repo.commits) == n_commits

    rb = pub.publish(b, target)
    assert rb.revision != ra.revision and repo.branches["main"] == rb.revision
    # the new commit's tree is exactly revision b: a's third train shard was deleted from it
    assert set(repo.commits[rb.revision]["tree"]) == {".gitattributes", *pub.published_paths(mb)}
    assert pub.verify(anonymous, ra.revision, a).passed  # a stays readable at its commit
    assert pub.verify(anonymous, rb.revision, b).passed


def test_hub_revision_is_a_commit_a_later_deletion_on_main_does_not_touch(tmp_path, fake_hub):
    """The hub needs no repair: deleting a shard makes a new commit; the tagged revision still holds it."""
    from huggingface_hub import CommitOperationDelete

    mix = tmp_path / "mix"
    m = build_synthetic_mix(mix)
    target = pub.HubTarget("hf://datasets/org/mix", api=fake_hub.api())
    first = pub.publish(mix, target)
    target.api.create_commit("org/mix", [CommitOperationDelete(m["files"][0]["path"])], repo_type="dataset",
                             revision="main", commit_message="delete a shard")
    assert fake_hub.repos["org/mix"].branches["main"] != first.revision
    again = pub.publish(mix, target)
    assert (again.created, again.revision, again.uploaded_files) == (False, first.revision, 0)
    assert pub.verify(pub.HubTarget("hf://datasets/org/mix", api=fake_hub.api(token=False)), first.revision,
                      mix).passed


def test_hub_publish_killed_before_the_commit_leaves_no_revision(tmp_path, fake_hub):
    mix = tmp_path / "mix"
    m = build_synthetic_mix(mix)
    target = pub.HubTarget("hf://datasets/org/mix", api=fake_hub.api())
    fake_hub.fail_commit = True
    with pytest.raises(Exception, match="injected failure"):
        pub.publish(mix, target)
    repo = fake_hub.repos["org/mix"]
    assert len(repo.commits) == 1 and not repo.tags  # only the repo's initial commit
    assert len(fake_hub.lfs) > 0  # blobs were uploaded, but nothing references them

    fake_hub.fail_commit = False
    res = pub.publish(mix, target)
    assert res.created and pub.verify(target, res.revision, mix).passed
    assert repo.tags[pub.revision_id(m["fingerprint"])] == res.revision


def test_hub_tag_with_different_content_is_refused(tmp_path, fake_hub):
    a, b = tmp_path / "a", tmp_path / "b"
    build_synthetic_mix(a, seed=1)
    mb = build_synthetic_mix(b, seed=2)
    target = pub.HubTarget("hf://datasets/org/mix", api=fake_hub.api())
    ra = pub.publish(a, target)
    # someone tagged revision a with b's revision id
    fake_hub.repos["org/mix"].tags[pub.revision_id(mb["fingerprint"])] = ra.revision
    with pytest.raises(pub.RevisionConflict, match="already exists with different content"):
        pub.publish(b, target)


def test_make_target_parses_urls(tmp_path):
    assert isinstance(pub.make_target(str(tmp_path)), pub.LocalTarget)
    t = pub.make_target("s3://bucket/some/prefix", s3_endpoint_url="http://127.0.0.1:1")
    assert (t.bucket, t.prefix) == ("bucket", "some/prefix")
    h = pub.make_target("hf://datasets/org/name", hf_api=object())
    assert h.repo_id == "org/name"
    for bad in ["hf://org/name", "gs://bucket/x"]:
        with pytest.raises(pub.PublishError):
            pub.make_target(bad, hf_api=object())


# -- through the trainer's reader (mix_assets.reader lands from its own branch) ---------------------


@pytest.mark.s3
def test_published_revisions_read_through_the_reader_equal_the_local_shards(tmp_path, seaweedfs, fake_hub):
    reader = pytest.importorskip("mix_assets.reader")
    mix = tmp_path / "mix"
    m = build_synthetic_mix(mix, seed=5)
    n_splits = len(m["splits"])
    s3_url = seaweedfs.url("reader")
    targets = [
        (pub.LocalTarget(tmp_path / "published"), pub.LocalTarget(tmp_path / "published")),
        (pub.S3Target(s3_url, seaweedfs.client("writer")), pub.S3Target(s3_url, seaweedfs.client("reader"))),
        (pub.HubTarget("hf://datasets/org/mix", api=fake_hub.api()),
         pub.HubTarget("hf://datasets/org/mix", api=fake_hub.api(token=False))),
    ]
    for writer, read_only in targets:
        res = pub.publish(mix, writer)
        raw = pub.verify(read_only, res.revision, mix)
        full = pub.verify(read_only, res.revision, mix, open_reader=reader.open_mix)
        assert full.passed, (writer.url, full.problems)
        # first, last and random samples of each split, once more through the reader
        assert full.samples_compared > raw.samples_compared >= 2 * n_splits
        r = reader.open_mix(res.location, cache_dir=tmp_path / "trainer" / writer.url.replace("/", "_"),
                            **read_only.reader_kwargs())
        assert r.fingerprint == m["fingerprint"] and len(r) == m["splits"]["train"]["samples"]


# -- transport: server-side copy, chunked hub commits ------------------------------------------------


def _calls(client, op: str) -> list[dict]:
    seen: list[dict] = []
    client.meta.events.register(f"provide-client-params.s3.{op}", lambda params, **_: seen.append(params))
    return seen


@pytest.mark.s3
def test_s3_storage_to_s3_target_on_one_endpoint_copies_server_side(synthetic_mix, seaweedfs, monkeypatch, tmp_path):
    from mix_assets.core.storage import Storage
    from mix_assets_tests.support.s3server import WRITER

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", WRITER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRITER[1])
    st = Storage(seaweedfs.url("copy-root"), s3_endpoint_url=seaweedfs.endpoint, cache_dir=str(tmp_path / "c"))
    for p in sorted(synthetic_mix.rglob("*")):
        if p.is_file():
            st.write_bytes(f"mix/{p.relative_to(synthetic_mix).as_posix()}", p.read_bytes())
    m = _manifest(synthetic_mix)
    target = pub.S3Target(seaweedfs.url("copy-target"), seaweedfs.client("writer"))
    copies, puts, uploads = (_calls(target.client, op) for op in ("CopyObject", "PutObject", "CreateMultipartUpload"))
    res = pub.publish(st.sub("mix"), target)
    assert res.created and len(copies) == len(m["files"]) and not uploads
    assert sorted(c["Key"].rsplit("/", 1)[-1] for c in puts) == ["README.md", "latest", "manifest.json"]
    head = target.client.head_object(Bucket=target.bucket, Key=f"{target.prefix}/{res.revision}/{m['files'][0]['path']}")
    assert head["Metadata"]["sha256"] == m["files"][0]["sha256"]  # a copy records its sha256 like an upload
    reader = pub.S3Target(target.url, seaweedfs.client("reader"))
    from mix_assets.reader import open_mix

    v = pub.verify(reader, res.revision, st.sub("mix"), open_reader=open_mix)
    assert v.passed, v.problems
    # a local storage root (or another endpoint) cannot be copied server-side: the bytes are uploaded
    other = pub.S3Target(seaweedfs.url("copy-target-2"), seaweedfs.client("writer"))
    copies2 = _calls(other.client, "CopyObject")
    assert pub.publish(synthetic_mix, other).created and copies2 == []


def _commit_trees(repo) -> list[dict]:
    """The trees of main's commits, oldest first (the repo's initial commit excluded)."""
    chain, sha = [], repo.branches["main"]
    while repo.commits[sha]["parent"] is not None:
        chain.append(repo.commits[sha]["tree"])
        sha = repo.commits[sha]["parent"]
    return chain[::-1]


def test_hub_commits_in_chunks_and_only_the_last_holds_a_manifest(tmp_path, fake_hub, monkeypatch):
    monkeypatch.setattr(pub, "HUB_OPS_PER_COMMIT", 3)
    a, b = tmp_path / "a", tmp_path / "b"
    ma, mb = build_synthetic_mix(a, seed=1), build_synthetic_mix(b, seed=2, train_shards=(3, 3))
    target = pub.HubTarget("hf://datasets/org/mix", api=fake_hub.api())
    ra = pub.publish(a, target)
    repo = fake_hub.repos["org/mix"]
    trees = _commit_trees(repo)
    assert len(trees) == -(-len(ma["files"]) // 3) + 1  # ceil(files / 3) file commits, then the manifest's
    assert all(pub.MANIFEST not in t for t in trees[:-1]) and set(trees[-1]) == {".gitattributes",
                                                                                 *pub.published_paths(ma)}
    assert repo.tags[pub.revision_id(ma["fingerprint"])] == ra.revision == repo.branches["main"]

    # b: the first commit deletes a's manifest and card, so no later part reads as a revision of either
    rb = pub.publish(b, target)
    trees = _commit_trees(repo)[len(trees):]
    assert len(trees) > 2 and all(pub.MANIFEST not in t and pub.README not in t for t in trees[:-1])
    assert set(trees[-1]) == {".gitattributes", *pub.published_paths(mb)}
    anonymous = pub.HubTarget("hf://datasets/org/mix", api=fake_hub.api(token=False))
    assert pub.verify(anonymous, rb.revision, b).passed and pub.verify(anonymous, ra.revision, a).passed


def test_hub_publish_killed_between_chunks_is_not_a_revision_and_a_retry_completes(tmp_path, fake_hub,
                                                                                   monkeypatch):
    monkeypatch.setattr(pub, "HUB_OPS_PER_COMMIT", 2)
    mix = tmp_path / "mix"
    m = build_synthetic_mix(mix)
    target = pub.HubTarget("hf://datasets/org/mix", api=fake_hub.api())
    real, left = fake_hub._commit, {"commits": 2}

    def dies_after_two(*args):
        fake_hub.fail_commit = left["commits"] == 0
        left["commits"] = max(0, left["commits"] - 1)
        return real(*args)

    monkeypatch.setattr(fake_hub, "_commit", dies_after_two)
    with pytest.raises(Exception, match="injected failure"):
        pub.publish(mix, target)
    repo = fake_hub.repos["org/mix"]
    head = repo.branches["main"]
    assert not repo.tags and pub.MANIFEST not in repo.commits[head]["tree"] and len(_commit_trees(repo)) == 2
    assert "is not a revision" in pub.verify(target, head, mix).problems[0]

    monkeypatch.setattr(fake_hub, "_commit", real)
    fake_hub.fail_commit = False
    res = pub.publish(mix, target)
    assert res.created and pub.verify(target, res.revision, mix).passed
    assert repo.tags[pub.revision_id(m["fingerprint"])] == res.revision
