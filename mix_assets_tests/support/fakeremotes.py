"""Stand-ins for remote stores, faked only at the network boundary.

* `FakeS3Client`: the boto3 S3 client surface the reader uses (`get_object`), serving a local directory.
* `FakeHub`: a local HTTP server speaking the hub's file-resolve protocol (HEAD/GET
  /datasets/<repo>/resolve/<revision>/<path> with X-Repo-Commit and ETag headers), so the real
  huggingface_hub download and cache code runs against it (pass its `endpoint`).
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from botocore.exceptions import ClientError


class FakeS3Client:
    """Objects of `bucket` are the files under `root` (key = relative path); `gets` counts reads by the key
    with `prefix` stripped, i.e. by the path relative to the mix directory."""

    def __init__(self, bucket: str, root: str | Path, prefix: str = ""):
        self.bucket, self.root, self.prefix = bucket, Path(root), prefix.strip("/")
        self.gets: Counter[str] = Counter()
        self.overrides: dict[str, bytes] = {}  # key -> bytes served instead of the file (corruption)

    def get_object(self, Bucket: str, Key: str):
        if Bucket != self.bucket or not Key.startswith(self.prefix):
            raise ClientError({"Error": {"Code": "NoSuchBucket", "Message": Bucket}}, "GetObject")
        rel = Key[len(self.prefix):].lstrip("/")
        self.gets[rel] += 1
        if rel in self.overrides:
            return {"Body": io.BytesIO(self.overrides[rel])}
        p = self.root / Key  # the bucket's objects are the files under root
        if not p.is_file():
            raise ClientError({"Error": {"Code": "NoSuchKey", "Message": Key}}, "GetObject")
        return {"Body": io.BytesIO(p.read_bytes())}


class FakeHub:
    """Serves `root` as the dataset repo `repo_id` at commit `commit` (40 hex digits)."""

    def __init__(self, root: str | Path, repo_id: str, commit: str):
        self.root, self.repo_id, self.commit = Path(root), repo_id, commit
        self.gets: Counter[str] = Counter()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output quiet
                pass

            def _resolve(self):
                prefix = f"/datasets/{hub.repo_id}/resolve/"
                if not self.path.startswith(prefix):
                    return None
                rev, _, rel = self.path[len(prefix):].partition("/")
                if rev not in (hub.commit, "main"):
                    return None
                p = hub.root / rel
                return (rel, p) if p.is_file() else None

            def _headers(self, found):
                if found is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("X-Repo-Commit", hub.commit)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                _, p = found
                data = p.read_bytes()
                self.send_response(200)
                self.send_header("X-Repo-Commit", hub.commit)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                return data

            def do_HEAD(self):
                self._headers(self._resolve())

            def do_GET(self):
                found = self._resolve()
                data = self._headers(found)
                if data is not None:
                    hub.gets[found[0]] += 1
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:  # noqa: PYI034
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
