import os
import subprocess
import sys

from mix_assets.core import scratch


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_sweep_removes_only_entries_of_exited_processes_of_this_host(tmp_path):
    dead, live = _dead_pid(), os.getppid()
    names = {
        "dead_dir": f"token_spill_{scratch.HOST}_{dead}_ab12cd_e",
        "dead_file": f"upload_{scratch.HOST}_{dead}_x1.tmp",
        "live": f"token_spill_{scratch.HOST}_{live}_zz",
        "mine": scratch.owner_prefix("token_spill") + "q",
        "other_host": f"token_spill_elsewhere-{scratch.HOST}_{dead}_ab",
        "not_ours": "token_spill_abcdefgh",
    }
    for key, n in names.items():
        if key == "dead_file":
            (tmp_path / n).write_text("")
        else:
            (tmp_path / n).mkdir()
            (tmp_path / n / "spill.bin").write_bytes(b"x")
    assert scratch.sweep(tmp_path, "token_spill") == [names["dead_dir"]]
    assert scratch.sweep(tmp_path, "upload") == [names["dead_file"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        names[k] for k in ("live", "mine", "other_host", "not_ours"))
    assert scratch.sweep(tmp_path / "absent", "upload") == []


def test_s3_uploads_go_through_an_owner_named_local_file(tmp_path):
    from mix_assets.core.storage import Storage
    from mix_assets.core.transport import UPLOAD
    from mix_assets.core.transport import S3Location

    names, sent = [], []

    class Client:
        def put_object(self, Bucket, Key, Body, **kw):  # noqa: N803 - boto3 spells it so
            sent.append((Bucket, Key))

    class Location(S3Location):
        def put_file(self, key, local, sha256=None):  # the local file the upload is sent from
            names.append(os.path.basename(local))
            super().put_file(key, local, sha256)

    st = Storage("s3://bucket/pre", cache_dir=str(tmp_path),
                 _location=Location("s3://bucket/pre", Client(), scratch_dir=str(tmp_path)))
    st.write_text("mix/train/train-00000.bin", "x")
    (name,) = names
    assert name.startswith(scratch.owner_prefix(UPLOAD)) and name.endswith(".tmp")
    assert sent == [("bucket", "pre/mix/train/train-00000.bin")] and list(tmp_path.iterdir()) == []
