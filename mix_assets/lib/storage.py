"""One storage root for every artifact: a local directory or `s3://bucket/prefix`.

Writes are atomic: a local file is written under a temporary name in the same directory and
renamed into place; an S3 object appears whole on PUT. A killed write never leaves a file that
looks complete. Paths given to `Storage` are relative keys with `/` separators.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from mix_assets.lib import scratch

UPLOAD = "upload"  # scratch kind of an S3 upload's local file (see lib/scratch.py)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so that the file is either absent/old or complete."""
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path beside `path`; on clean exit fsync it and rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def sha256_file(path: str | os.PathLike, bufsize: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(bufsize):
            h.update(chunk)
    return h.hexdigest()


def split_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/a/b` -> ("bucket", "a/b")."""
    rest = url.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"{url}: an S3 URL needs a bucket, e.g. s3://bucket/prefix")
    return bucket, prefix.strip("/")


@dataclass
class Storage:
    """A root (local path or s3:// URL) with atomic writes and local access for readers."""

    root: str
    s3_endpoint_url: Optional[str] = None
    cache_dir: Optional[str] = None  # where S3 objects are materialised for local readers
    _client: object = field(default=None, repr=False)

    @property
    def is_s3(self) -> bool:
        return self.root.startswith("s3://")

    # -- addressing -------------------------------------------------------------------------
    def uri(self, key: str) -> str:
        return f"{self.root.rstrip('/')}/{key}"

    def _local(self, key: str) -> Path:
        return Path(self.root) / key

    def _s3(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            # None: boto3 takes AWS_ENDPOINT_URL(_S3) or AWS itself; S3-compatible servers want path-style URLs
            endpoint = self.s3_endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            cfg = Config(s3={"addressing_style": "path"} if endpoint else {}, retries={"max_attempts": 5, "mode": "standard"})
            self._client = boto3.client("s3", endpoint_url=self.s3_endpoint_url, config=cfg)
        return self._client

    @staticmethod
    def _missing(err: Exception) -> bool:
        code = str(getattr(err, "response", {}).get("Error", {}).get("Code", ""))
        return code in {"404", "NoSuchKey", "NotFound"}

    def _s3_key(self, key: str) -> tuple[str, str]:
        bucket, prefix = split_s3_url(self.root)
        return bucket, f"{prefix}/{key}" if prefix else key

    # -- writing ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def writing(self, key: str) -> Iterator[str]:
        """Yield a local temporary path; on clean exit it becomes `key` atomically."""
        if not self.is_s3:
            with atomic_path(self._local(key)) as tmp:
                yield tmp
            return
        if self.cache_dir:
            os.makedirs(self.cache_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=scratch.owner_prefix(UPLOAD), suffix=".tmp", dir=self.cache_dir)
        os.close(fd)
        try:
            yield tmp
            bucket, k = self._s3_key(key)
            # the sha256 rides along as object metadata, so lineage checks need not download the object
            self._s3().upload_file(tmp, bucket, k, ExtraArgs={"Metadata": {"sha256": sha256_file(tmp)}})
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def write_bytes(self, key: str, data: bytes) -> None:
        with self.writing(key) as tmp:
            Path(tmp).write_bytes(data)

    def write_text(self, key: str, text: str) -> None:
        self.write_bytes(key, text.encode("utf-8"))

    # -- reading ----------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        if not self.is_s3:
            return self._local(key).exists()
        bucket, k = self._s3_key(key)
        try:
            self._s3().head_object(Bucket=bucket, Key=k)
            return True
        except Exception as e:  # botocore ClientError; only "not found" means absent
            if self._missing(e):
                return False
            raise

    def read_bytes(self, key: str) -> bytes:
        if not self.is_s3:
            return self._local(key).read_bytes()
        bucket, k = self._s3_key(key)
        return self._s3().get_object(Bucket=bucket, Key=k)["Body"].read()

    def read_text(self, key: str) -> str:
        return self.read_bytes(key).decode("utf-8")

    def sha256(self, key: str) -> str:
        """The sha256 of `key`'s bytes (FileNotFoundError when absent)."""
        if not self.is_s3:
            p = self._local(key)
            if not p.is_file():
                raise FileNotFoundError(f"{self.uri(key)}: not found")
            return sha256_file(p)
        bucket, k = self._s3_key(key)
        try:
            head = self._s3().head_object(Bucket=bucket, Key=k)
        except Exception as e:
            if self._missing(e):
                raise FileNotFoundError(f"{self.uri(key)}: not found") from e
            raise
        # written by `writing`; an object put by anything else is hashed from its bytes
        return head.get("Metadata", {}).get("sha256") or sha256_file(self.local_path(key))

    def local_path(self, key: str) -> str:
        """A local file path holding `key` (downloaded into the cache for S3 roots)."""
        if not self.is_s3:
            p = self._local(key)
            if not p.exists():
                raise FileNotFoundError(f"{self.uri(key)}: not found (was the upstream asset materialised?)")
            return str(p)
        bucket, k = self._s3_key(key)
        dest = Path(self.cache_dir or tempfile.gettempdir()) / "storage" / bucket / k
        try:
            with atomic_path(dest) as tmp:
                self._s3().download_file(bucket, k, tmp)
        except Exception as e:
            if self._missing(e):
                raise FileNotFoundError(f"{self.uri(key)}: not found (was the upstream asset materialised?)") from e
            raise
        return str(dest)

    def list(self, prefix: str) -> list[str]:
        """Keys under the folder `prefix` ("" for all), sorted."""
        if not self.is_s3:
            base = self._local(prefix)
            if not base.exists():
                return []
            return sorted(
                str(p.relative_to(self.root)).replace(os.sep, "/")
                for p in base.rglob("*")
                if p.is_file() and not p.name.startswith(".")
            )
        bucket, k = self._s3_key(prefix.strip("/"))
        k = k + "/" if k else k  # a folder: "mix" must not match "mixed/..."
        out: list[str] = []
        _, root_prefix = split_s3_url(self.root)
        for page in self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=k):
            for obj in page.get("Contents", []):
                out.append(obj["Key"][len(root_prefix) + 1 :] if root_prefix else obj["Key"])
        return sorted(out)

    def delete(self, key: str) -> None:
        """Remove one key; an absent key is not an error."""
        if not self.is_s3:
            self._local(key).unlink(missing_ok=True)
            return
        bucket, k = self._s3_key(key)
        self._s3().delete_object(Bucket=bucket, Key=k)

    def delete_prefix(self, prefix: str) -> None:
        """Remove the folder `prefix` and everything under it."""
        if not self.is_s3:
            shutil.rmtree(self._local(prefix), ignore_errors=True)
            return
        bucket, _ = self._s3_key(prefix)
        for key in self.list(prefix):
            self._s3().delete_object(Bucket=bucket, Key=self._s3_key(key)[1])
