import subprocess
import sys
import textwrap

import pytest

from mix_assets.core.storage import Storage
from mix_assets.core.transport import atomic_path, split_s3_url

from mix_assets_tests.conftest import REPO


def test_write_read_list_local(tmp_path):
    st = Storage(str(tmp_path / "root"))
    st.write_text("a/b.json", "{}")
    st.write_bytes("a/c/d.bin", b"\x00\x01")
    assert st.read_text("a/b.json") == "{}"
    assert st.list("a") == ["a/b.json", "a/c/d.bin"]
    assert st.exists("a/c/d.bin") and not st.exists("a/zzz")
    assert st.local_path("a/b.json").endswith("root/a/b.json")
    with pytest.raises(FileNotFoundError, match="was the upstream asset materialised"):
        st.local_path("missing.parquet")


def test_failed_write_leaves_nothing(tmp_path):
    target = tmp_path / "x" / "file.bin"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            open(tmp, "wb").write(b"partial")
            raise RuntimeError("boom")
    assert not target.exists()
    assert list(target.parent.iterdir()) == []


def test_killed_writer_never_leaves_a_complete_looking_file(tmp_path):
    # A process killed mid-write (no cleanup at all) leaves at most a hidden .tmp file, never the target.
    target = tmp_path / "shard.bin"
    code = textwrap.dedent(f"""
        import os
        from mix_assets.core.transport import atomic_path
        with atomic_path({str(target)!r}) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"x" * 1000)
                f.flush()
                os._exit(9)
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path.parent), env={"PYTHONPATH": str(REPO)})
    assert r.returncode == 9
    assert not target.exists()
    assert all(p.name.startswith(".shard.bin.") for p in tmp_path.iterdir())
    assert Storage(str(tmp_path)).list("") == []  # listings skip the hidden leftovers


def test_split_s3_url():
    assert split_s3_url("s3://bucket/a/b/") == ("bucket", "a/b")
    assert split_s3_url("s3://bucket") == ("bucket", "")
    with pytest.raises(ValueError, match="needs a bucket"):
        split_s3_url("s3:///x")


def test_a_symlink_out_of_a_local_root_is_refused_for_writes_and_deletes(tmp_path):
    from mix_assets.core.storage import StorageLinkError

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "mix").mkdir(parents=True)
    (outside / "train").mkdir(parents=True)
    (outside / "train" / "old.bin").write_bytes(b"old")
    link = root / "mix" / "train"
    link.symlink_to(outside / "train", target_is_directory=True)
    st = Storage(str(root))
    named = rf"{link} is a symlink to {outside / 'train'}, outside the storage root {root}"
    with pytest.raises(StorageLinkError, match=named):  # before: rmtree refused the link, ignored, nothing said
        st.delete_prefix("mix/train/")
    for write in (lambda: st.write_bytes("mix/train/train-00000.bin", b"new"),  # before: written to outside/
                  lambda: st.delete("mix/train/old.bin")):
        with pytest.raises(StorageLinkError, match=named):
            write()
    assert sorted(p.name for p in (outside / "train").iterdir()) == ["old.bin"]
    with pytest.raises(StorageLinkError, match=r"key '../outside/x' resolves to .*outside the storage root"):
        st.write_bytes("../outside/x", b"")
    assert st.read_bytes("mix/train/old.bin") == b"old"  # reads may go through a link (bench/shards_audit.py)
    # links that stay inside the root, and a root that is itself a link, are fine
    (root / "mix" / "val").mkdir()
    (root / "mix" / "v").symlink_to(root / "mix" / "val", target_is_directory=True)
    st.write_bytes("mix/v/a.bin", b"a")
    (tmp_path / "alias").symlink_to(root, target_is_directory=True)
    via = Storage(str(tmp_path / "alias"))
    via.write_bytes("mix/review/x.json", b"{}")
    via.delete_prefix("mix/review/")
    assert not (root / "mix" / "review").exists() and (root / "mix" / "val" / "a.bin").read_bytes() == b"a"


def _counting_hashes(monkeypatch):
    from mix_assets.core import transport

    calls = []
    real = transport.sha256_file
    monkeypatch.setattr(transport, "sha256_file", lambda p: calls.append(str(p)) or real(p))
    monkeypatch.setattr(transport, "_HASHED", {})
    return calls


def test_a_local_sha256_is_remembered_until_the_file_changes(tmp_path, monkeypatch):
    """Storage.sha256 of an unchanged local file is hashed once per process; a rewrite (a new inode) or a
    write in place (same size, same inode: ctime moves) is hashed again and gives the new bytes' hash."""
    import hashlib
    import os

    from mix_assets.core import transport

    calls = _counting_hashes(monkeypatch)
    monkeypatch.setattr(transport, "RACY_NS", 0)
    st = Storage(str(tmp_path / "root"))
    st.write_bytes("a.bin", b"one")
    assert st.sha256("a.bin") == st.sha256("a.bin") == hashlib.sha256(b"one").hexdigest()
    assert len(calls) == 1
    st.write_bytes("a.bin", b"two")  # write-temp-rename: another inode
    assert st.sha256("a.bin") == hashlib.sha256(b"two").hexdigest() and len(calls) == 2
    path = st.local_path("a.bin")
    before = os.stat(path)
    with open(path, "r+b") as f:  # in place, same size; mtime put back as it was: only ctime moves
        f.write(b"six")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_ino == before.st_ino and os.stat(path).st_ctime_ns != before.st_ctime_ns
    assert st.sha256("a.bin") == hashlib.sha256(b"six").hexdigest() and len(calls) == 3
    # what checks bytes (digest: the manifest checker's and the object store's) hashes them every time
    assert st.location.digest("a.bin") == (3, hashlib.sha256(b"six").hexdigest()) and len(calls) == 4


def test_a_file_changed_within_the_racy_window_is_hashed_again(tmp_path, monkeypatch):
    """A file hashed within RACY_NS of its last change is not remembered: a change in the same clock tick
    would not move its timestamps."""
    from mix_assets.core import transport

    calls = _counting_hashes(monkeypatch)
    monkeypatch.setattr(transport, "RACY_NS", 10**18)
    monkeypatch.setattr(transport, "RACY_COARSE_NS", 10**18)
    st = Storage(str(tmp_path / "root"))
    st.write_bytes("a.bin", b"one")
    st.sha256("a.bin")
    st.sha256("a.bin")
    assert len(calls) == 2
