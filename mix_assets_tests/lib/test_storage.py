import subprocess
import sys
import textwrap

import pytest

from mix_assets.lib.storage import Storage, atomic_path, split_s3_url

from ..conftest import REPO


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
        from mix_assets.lib.storage import atomic_path
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
