"""One transport layer: a `Location` is a root (a local directory, `s3://bucket/prefix`, or a hub dataset at a
revision) holding objects under relative `/`-separated keys.

Every reader and writer of the project goes through it: `core/storage.Storage` (the build's artifacts),
the publish targets of `stages/publish/publish.py`, and the reader's backends (`mix_assets/reader/backends.py`).

  open(key)              a seekable binary file; on S3 every read is an HTTP range GET, so
                         `pq.ParquetFile(loc.open(key))` reads the footer and the row groups it needs,
                         never the whole object
  read_bytes / download  the whole object (in memory / to a local path, hashed while streaming)
  stat / exists / sha256 (size, recorded sha256) without reading the bytes where the store records it
                         (S3 user metadata `sha256`, written by every put here)
  writing / put_file / put_bytes / create_if_absent   atomic writes (local rename, whole-object PUT)
  copy_from              server-side copy (S3 CopyObject) when source and destination share an endpoint
  read_versioned / put_if_match / delete_if_match   compare-and-swap on one small object (the run lease)

`put_file` and `copy_from` hash the bytes they write while writing them and refuse (IntegrityError, nothing
left under the key) when they differ from the sha256 the caller expects: a file rewritten between a check
and its copy is never stored under a name that vouches for other bytes.
  list / delete / delete_prefix

S3 clients are built in exactly one place, `s3_client`. boto3 is the library underneath: pyarrow.fs's
S3FileSystem cannot write user metadata, conditional PUTs (If-None-Match) or metadata-replacing copies, and
s3fs would pin botocore through aiobotocore; a range-reading file object over boto3 gives pyarrow what it
needs (seek + read) with one credential chain. The hub is read-only here (`HubLocation`); writing to it is a
commit, which `stages/publish/publish.HubTarget` does.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from mix_assets.core import scratch

CHUNK = 1 << 22
# S3 uploads: up to SINGLE_PUT_MAX one PutObject from memory, above it a multipart upload of PART-byte parts
# (PARTS_IN_FLIGHT at a time), completed only once the streamed sha256 matches
SINGLE_PUT_MAX = 64 << 20
PART = 16 << 20
PARTS_IN_FLIGHT = 4
UPLOAD = "upload"  # scratch kind of an S3 upload's local file (see core/scratch.py)
TAIL_BYTES = 1 << 18  # what opening an S3 object reads: all of a small one, the footer of a large Parquet file


class IntegrityError(RuntimeError):
    """The bytes written (or about to be) do not hash to the sha256 the caller vouched for; nothing was stored."""


def refuse_mismatch(where: str, expected: str | None, actual: str, source: str = "") -> None:
    """Raise IntegrityError naming the object, the expected and the actual sha256 (when `expected` is given)."""
    if expected is not None and actual != expected:
        src = f" from {source}" if source else ""
        raise IntegrityError(f"{where}: refusing to store it: the bytes{src} hash to sha256 {actual}, expected "
                             f"{expected} (was the source rewritten after it was checked, e.g. by another run?)")


def _b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii")


# -- hashing and atomic local files ---------------------------------------------------------------------------
def sha256_stream(f: BinaryIO) -> tuple[str, int]:
    """(hex sha256, bytes read) of a binary stream, read to its end."""
    h, n = hashlib.sha256(), 0
    while chunk := f.read(CHUNK):
        h.update(chunk)
        n += len(chunk)
    return h.hexdigest(), n


def sha256_file(path: str | os.PathLike) -> str:
    """The hex sha256 of a local file: the one file-hashing helper of the project."""
    with open(path, "rb") as f:
        return sha256_stream(f)[0]


# A local file's sha256, remembered in this process by what stat says of the file. Lineage re-checks every
# input's files in each step that reads them (a 100 MB build hashed 2.3 GB, half of it the same raw
# documents and shards again): a file the project writes is a new inode (write-temp-rename), and a write in
# place moves its ctime, which nothing but the clock sets. A file whose last change is within RACY_NS of
# the hash (whole-second timestamps: RACY_COARSE_NS) is hashed again next time, as git re-reads "racily
# clean" files: a change in the same clock tick would leave the timestamps as they were.
RACY_NS = 100_000_000
RACY_COARSE_NS = 2_000_000_000
_HASHED_MAX = 1 << 14
_HASHED: dict[tuple, str] = {}


def _stat_key(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def sha256_file_remembered(path: str | os.PathLike) -> str:
    """`sha256_file(path)`, not hashed again while the file's device, inode, size, mtime and ctime stay the
    same (past its racy window). For the lineage checks; what proves published bytes (the manifest
    checker, the reader) hashes the bytes every time."""
    now = time.time_ns()
    before = os.stat(path)
    key = _stat_key(before)
    got = _HASHED.get(key)
    if got is not None:
        return got
    got = sha256_file(path)
    changed = max(before.st_mtime_ns, before.st_ctime_ns)
    racy = RACY_COARSE_NS if changed % 1_000_000_000 == 0 else RACY_NS
    # a later change then gets other timestamps; and none happened while the bytes were read
    if now - changed > racy and _stat_key(os.stat(path)) == key:
        if len(_HASHED) >= _HASHED_MAX:
            _HASHED.clear()
        _HASHED[key] = got
    return got


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


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so that the file is either absent/old or complete."""
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)


# -- locations: the one place that knows the URL schemes --------------------------------------------------
S3, HUB, LOCAL = "s3", "hf", "file"
SCHEMES = (S3, HUB)  # a location is a local path (or file://...), s3://bucket/prefix or hf://datasets/org/name[@rev][/dir]


def has_scheme(location: str) -> bool:
    """Whether `location` is written as a URL (`<scheme>://...`, file:// included) rather than a path."""
    return "://" in location


def is_url(location: str) -> bool:
    """Whether `location` names a remote scheme (anything with `://` but a file:// path)."""
    return has_scheme(location) and not location.startswith("file://")


def is_s3(location: str) -> bool:
    return location.startswith(f"{S3}://")


def scheme(location: str) -> str:
    """S3, HUB or LOCAL; ValueError naming the location for any other `<scheme>://`."""
    for name in SCHEMES:
        if location.startswith(f"{name}://"):
            return name
    if is_url(location):
        raise ValueError(f"{location}: unsupported location (use a local path, s3://bucket/prefix "
                         "or hf://datasets/org/name)")
    return LOCAL


def local_path(location: str) -> str:
    """A LOCAL location as a path (`file://` dropped)."""
    return location.removeprefix("file://")


@dataclass(frozen=True)
class HubUrl:
    """`hf://datasets/<repo_id>[@<revision>][/<subdir>]`."""

    repo_id: str
    revision: str | None
    subdir: str


def split_hub_url(url: str) -> HubUrl:
    """Parse a hub dataset URL; ValueError naming the URL when it is not `hf://datasets/<org>/<name>...`."""
    rest = url.removeprefix(f"{HUB}://")
    if not rest.startswith("datasets/"):
        raise ValueError(f"{url}: expected hf://datasets/org/name[@revision][/subdir]")
    parts = rest.removeprefix("datasets/").split("/")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise ValueError(f"{url}: expected hf://datasets/org/name[@revision][/subdir]")
    name, at, revision = parts[1].partition("@")
    if at and not revision:
        raise ValueError(f"{url}: empty revision after '@'")
    return HubUrl(f"{parts[0]}/{name}", revision or None, "/".join(p for p in parts[2:] if p))


def s3_url_within(url: str, root: str) -> bool:
    """Whether s3 `url` is `root` or under it (bucket and key prefix compared, not strings)."""
    (b1, k1), (b2, k2) = split_s3_url(url), split_s3_url(root)
    return b1 == b2 and (not k2 or k1 == k2 or k1.startswith(k2 + "/"))


# -- S3 clients: the one factory ----------------------------------------------------------------------------
def split_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/a/b` -> ("bucket", "a/b")."""
    rest = url.removeprefix(f"{S3}://")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"{url}: an S3 URL needs a bucket, e.g. s3://bucket/prefix")
    return bucket, prefix.strip("/")


def s3_endpoint(endpoint_url: str | None = None) -> str | None:
    """The endpoint an S3 client talks to: the argument, else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS."""
    return endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def s3_client(endpoint_url: str | None = None, region: str | None = None, *, access_key: str | None = None,
              secret_key: str | None = None, anonymous: bool | None = False) -> Any:
    """A boto3 S3 client: the only place the project builds one.

    endpoint_url: an S3-compatible server (SeaweedFS, MinIO), else AWS_ENDPOINT_URL[_S3]; such servers get
    path-style addressing. access_key/secret_key: explicit credentials (e.g. a read-only identity), else
    boto3's ordinary chain. anonymous: sign nothing (public-read buckets); None = anonymous exactly when
    the chain finds no credentials.
    """
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    endpoint = s3_endpoint(endpoint_url)
    session = boto3.session.Session()
    if anonymous is None:
        anonymous = not access_key and session.get_credentials() is None
    cfg = Config(s3={"addressing_style": "path"} if endpoint else {},
                 retries={"max_attempts": 5, "mode": "standard"},
                 signature_version=UNSIGNED if anonymous else None)
    kw = {"aws_access_key_id": access_key, "aws_secret_access_key": secret_key} if access_key and not anonymous else {}
    return boto3.client("s3", endpoint_url=endpoint, region_name=region or session.region_name or "us-east-1",
                        config=cfg, **kw)


_CLIENTS_LOCK = threading.Lock()
_CLIENTS: dict[str | None, Any] = {}  # endpoint -> one client per process (map tasks on a worker share it)


def shared_s3_client(endpoint_url: str | None = None) -> Any:
    """`s3_client(endpoint_url)` built once per process (boto3 clients are thread-safe)."""
    with _CLIENTS_LOCK:
        if endpoint_url not in _CLIENTS:
            _CLIENTS[endpoint_url] = s3_client(endpoint_url)
        return _CLIENTS[endpoint_url]


def open_url(url: str, endpoint_url: str | None = None) -> BinaryIO:
    """A seekable binary file over a local path or an `s3://bucket/key` object (read by range GETs,
    credentials from the process's ordinary chain): what a map task on any node opens its chunk with."""
    if not url.startswith("s3://"):
        return open(url, "rb")
    bucket, key = split_s3_url(url)
    return _S3File(shared_s3_client(endpoint_url), bucket, key, url)


def s3_error_code(err: BaseException) -> str:
    return str(getattr(err, "response", {}).get("Error", {}).get("Code", ""))


def s3_missing(err: BaseException) -> bool:
    return s3_error_code(err) in {"404", "NoSuchKey", "NotFound"}


def s3_condition_failed(err: BaseException) -> bool:
    """A conditional request (If-Match, If-None-Match, CopySourceIfMatch) whose condition did not hold."""
    return s3_error_code(err) in {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}


# -- the protocol --------------------------------------------------------------------------------------------
class Location:
    """A root holding objects under relative keys. Subclasses: LocalLocation, S3Location, HubLocation."""

    url: str
    is_local = False

    def uri(self, key: str) -> str:
        return f"{self.url.rstrip('/')}/{key}" if key else self.url

    def _absent(self, key: str, why: str = "") -> FileNotFoundError:
        return FileNotFoundError(f"{self.uri(key)}: not found{why}")

    # reading
    def open(self, key: str) -> BinaryIO:
        """A seekable binary file over `key` (FileNotFoundError when absent)."""
        raise NotImplementedError

    def read_bytes(self, key: str) -> bytes:
        with self.open(key) as f:
            return f.read()

    def stat(self, key: str) -> tuple[int, str | None] | None:
        """(size, sha256 when known without reading the bytes, else None), or None when absent."""
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        return self.stat(key) is not None

    def digest(self, key: str) -> tuple[int, str] | None:
        """(size, sha256 recomputed from the bytes), or None when absent."""
        try:
            with self.open(key) as f:
                sha, n = sha256_stream(f)
        except FileNotFoundError:
            return None
        return n, sha

    def sha256(self, key: str) -> str:
        """The sha256 of `key` (the recorded one where the store keeps it); FileNotFoundError when absent."""
        st = self.stat(key)
        if st is None:
            raise self._absent(key)
        if st[1]:
            return st[1]
        got = self.digest(key)
        if got is None:
            raise self._absent(key)
        return got[1]

    def download(self, key: str, dest: str | os.PathLike) -> str:
        """Copy `key` to the local path `dest` atomically; return its sha256 (hashed while copying)."""
        h = hashlib.sha256()
        with self.open(key) as src, atomic_path(dest) as tmp, open(tmp, "wb") as out:
            while chunk := src.read(CHUNK):
                h.update(chunk)
                out.write(chunk)
        return h.hexdigest()

    # writing (read-only locations raise)
    @contextlib.contextmanager
    def writing(self, key: str) -> Iterator[str]:
        """Yield a local temporary path; on clean exit it becomes `key` atomically."""
        raise NotImplementedError(f"{self.url}: read-only location")
        yield ""  # pragma: no cover

    def put_file(self, key: str, local: str | os.PathLike, sha256: str | None = None) -> str:
        """Store the local file as `key`, hashing the bytes as they are written; return their sha256.
        `sha256` given and different: IntegrityError, and `key` is left as it was."""
        raise NotImplementedError(f"{self.url}: read-only location")

    def put_bytes(self, key: str, data: bytes) -> None:
        raise NotImplementedError(f"{self.url}: read-only location")

    def create_if_absent(self, key: str, data: bytes) -> bool:
        """Write `key` only if it does not exist; False when it already did."""
        raise NotImplementedError(f"{self.url}: read-only location")

    def copy_from(self, src: Location, src_key: str, key: str, sha256: str, src_version: str | None = None) -> bool:
        """Copy `src_key` of `src` to `key` without uploading the bytes from here, only if they hash to
        `sha256` (IntegrityError otherwise); False when this store cannot (the caller then uploads).
        src_version: the source's version (S3 ETag) when its bytes were hashed, see `digest_versioned`."""
        return False

    def digest_versioned(self, key: str) -> tuple[int, str, str | None] | None:
        """(size, sha256 from the bytes, the version those bytes are: S3 ETag, else None), or None when absent."""
        got = self.digest(key)
        return None if got is None else (got[0], got[1], None)

    # compare-and-swap on one small object: what the run lease (core/runlock.py) is built on
    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        """(bytes, version) of `key`, or None when absent; the version changes whenever the object does."""
        raise NotImplementedError(f"{self.url}: no compare-and-swap here")

    def put_if_match(self, key: str, data: bytes, version: str) -> bool:
        """Replace `key` with `data` only if it still is `version`; False when it changed or vanished."""
        raise NotImplementedError(f"{self.url}: no compare-and-swap here")

    def delete_if_match(self, key: str, version: str) -> bool:
        """Delete `key` only if it still is `version`; False when it changed or vanished."""
        raise NotImplementedError(f"{self.url}: no compare-and-swap here")

    def list(self, prefix: str) -> list[str]:
        """Keys under the folder `prefix` ("" for all), sorted."""
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError(f"{self.url}: read-only location")

    def delete_prefix(self, prefix: str) -> None:
        raise NotImplementedError(f"{self.url}: read-only location")


class LocalLocation(Location):
    """A local directory; writes are write-temp-fsync-rename."""

    is_local = True

    def __init__(self, root: str | os.PathLike, confine: Callable[[str, Path], Path] | None = None):
        self.root = Path(root)
        self.url = str(root)
        self.confine = confine  # e.g. format/paths.safe_path: refuse keys (or symlinks) leading out of root

    def path(self, key: str) -> Path:
        return self.confine(key, self.root) if self.confine else self.root / key

    def open(self, key):
        try:
            return open(self.path(key), "rb")
        except (FileNotFoundError, IsADirectoryError):
            raise self._absent(key) from None

    def read_bytes(self, key):
        try:
            return self.path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise self._absent(key) from None

    def exists(self, key):
        return self.path(key).exists()

    def stat(self, key):  # a local file's hash is cheap next to its upload; nothing records it
        p = self.path(key)
        return (p.stat().st_size, sha256_file_remembered(p)) if p.is_file() else None

    def digest(self, key):  # recomputed from the bytes, as on every location
        p = self.path(key)
        return (p.stat().st_size, sha256_file(p)) if p.is_file() else None

    def download(self, key, dest):
        src = self.path(key)
        if not src.is_file():
            raise self._absent(key)
        with atomic_path(dest) as tmp:
            shutil.copyfile(src, tmp)
        return sha256_file(dest)

    @contextlib.contextmanager
    def writing(self, key):
        with atomic_path(self.path(key)) as tmp:
            yield tmp

    def put_file(self, key, local, sha256=None):
        # hashed while copied, checked before the rename: a mismatch leaves `key` as it was
        h = hashlib.sha256()
        with open(local, "rb") as src, atomic_path(self.path(key)) as tmp:
            with open(tmp, "wb") as out:
                while chunk := src.read(CHUNK):
                    h.update(chunk)
                    out.write(chunk)
            refuse_mismatch(self.uri(key), sha256, h.hexdigest(), str(local))
        return h.hexdigest()

    def put_bytes(self, key, data):
        atomic_write_bytes(self.path(key), data)

    @contextlib.contextmanager
    def _cas(self, key: str) -> Iterator[Path]:
        """`key`'s path with an exclusive flock held on a hidden sibling: every compare-and-swap on `key`
        takes it, so read-compare-replace is atomic between processes (the kernel drops it if one dies)."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.parent / f".{path.name}.cas", "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield path
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def read_versioned(self, key):
        try:
            data = self.path(key).read_bytes()
        except FileNotFoundError:
            return None
        return data, hashlib.sha256(data).hexdigest()

    def put_if_match(self, key, data, version):
        with self._cas(key) as path:
            got = self.read_versioned(key)
            if got is None or got[1] != version:
                return False
            atomic_write_bytes(path, data)
            return True

    def delete_if_match(self, key, version):
        with self._cas(key) as path:
            got = self.read_versioned(key)
            if got is None or got[1] != version:
                return False
            path.unlink()
            return True

    def create_if_absent(self, key, data):
        dest = self.path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, dest)  # fails if dest exists: an atomic create-if-absent
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def list(self, prefix):
        base = self.path(prefix)
        if not base.exists():
            return []
        return sorted(str(p.relative_to(self.root)).replace(os.sep, "/")
                      for p in base.rglob("*") if p.is_file() and not p.name.startswith("."))

    def delete(self, key):
        self.path(key).unlink(missing_ok=True)

    def delete_prefix(self, prefix):
        shutil.rmtree(self.path(prefix), ignore_errors=True)


class _S3File(io.RawIOBase):
    """A read-only, seekable view of one S3 object. Opening GETs its last TAIL_BYTES (`Range: bytes=-n`):
    an object that small arrives whole in that one request; for a larger one it holds the Parquet footer.
    Any other read is one `Range: bytes=a-b` GET of exactly the bytes asked for (a Parquet column chunk)."""

    def __init__(self, client: Any, bucket: str, key: str, uri: str):
        self.client, self.bucket, self.key, self.uri, self.pos = client, bucket, key, uri, 0
        try:
            got = client.get_object(Bucket=bucket, Key=key, Range=f"bytes=-{TAIL_BYTES}")
        except Exception as e:
            if s3_missing(e):
                raise FileNotFoundError(f"{uri}: not found") from None
            if s3_error_code(e) != "InvalidRange":  # an empty object has no last byte
                raise
            got = {"Body": io.BytesIO(b""), "ContentRange": "bytes */0"}
        with contextlib.closing(got["Body"]) as body:
            self.tail = body.read()
        total = got.get("ContentRange", "").rpartition("/")[2]
        self.size = int(total) if total.isdigit() else len(self.tail)  # no Content-Range: the whole object
        self.tail_start = self.size - len(self.tail)

    def __str__(self) -> str:  # messages name the object: f"{source}: ..."
        return self.uri

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readall(self) -> bytes:  # one GET for the rest, not io's 8 KB loop
        return self.read(max(0, self.size - self.pos))

    def readinto(self, b) -> int:
        n = min(len(b), self.size - self.pos)
        if n <= 0:
            return 0
        if self.pos >= self.tail_start:
            data = self.tail[self.pos - self.tail_start:self.pos - self.tail_start + n]
        else:
            body = self.client.get_object(Bucket=self.bucket, Key=self.key,
                                          Range=f"bytes={self.pos}-{self.pos + n - 1}")["Body"]
            with contextlib.closing(body):
                data = body.read()
        b[:len(data)] = data
        self.pos += len(data)
        return len(data)


class S3Location(Location):
    """`s3://bucket/prefix`: each object written here carries its sha256 as user metadata `sha256`."""

    def __init__(self, url: str, client: Any, scratch_dir: str | None = None):
        self.url = url.rstrip("/")
        self.bucket, self.prefix = split_s3_url(url)
        self.client = client
        self.scratch_dir = scratch_dir  # where `writing` stages the local file before its PUT

    def key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _head(self, key: str) -> dict | None:
        try:
            return self.client.head_object(Bucket=self.bucket, Key=self.key(key))
        except Exception as e:  # botocore ClientError; only "not found" means absent
            if s3_missing(e):
                return None
            raise

    def _body(self, key: str) -> Any:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self.key(key))["Body"]
        except Exception as e:
            if s3_missing(e):
                raise self._absent(key) from None
            raise

    def open(self, key):
        return _S3File(self.client, self.bucket, self.key(key), self.uri(key))

    def read_bytes(self, key):
        with contextlib.closing(self._body(key)) as body:
            return body.read()

    def stat(self, key):
        head = self._head(key)
        return None if head is None else (head["ContentLength"], head.get("Metadata", {}).get("sha256"))

    def digest(self, key):
        try:
            body = self._body(key)
        except FileNotFoundError:
            return None
        with contextlib.closing(body):
            sha, n = sha256_stream(body)
        return n, sha

    def download(self, key, dest):
        h = hashlib.sha256()
        with contextlib.closing(self._body(key)) as body, atomic_path(dest) as tmp, open(tmp, "wb") as out:
            while chunk := body.read(CHUNK):
                h.update(chunk)
                out.write(chunk)
        return h.hexdigest()

    @contextlib.contextmanager
    def writing(self, key):
        if self.scratch_dir:
            os.makedirs(self.scratch_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=scratch.owner_prefix(UPLOAD), suffix=".tmp", dir=self.scratch_dir)
        os.close(fd)
        try:
            yield tmp
            self.put_file(key, tmp)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def put_file(self, key, local, sha256=None):
        # the sha256 rides along as object metadata, so lineage checks and resumed publishes need not read it;
        # it is the hash of the bytes sent, and the server checks them again (x-amz-checksum-sha256)
        with open(local, "rb") as f:
            if os.fstat(f.fileno()).st_size <= SINGLE_PUT_MAX:
                data = f.read()
                got = hashlib.sha256(data).hexdigest()
                refuse_mismatch(self.uri(key), sha256, got, str(local))
                self.client.put_object(Bucket=self.bucket, Key=self.key(key), Body=data, Metadata={"sha256": got},
                                       ChecksumSHA256=_b64(got))
                return got
            expected = sha256 or sha256_stream(f)[0]  # the metadata is sent first; the stream is checked against it
            f.seek(0)
            return self._put_multipart(key, f, expected, str(local))

    def _put_multipart(self, key: str, f: BinaryIO, expected: str, local: str) -> str:
        """A multipart upload hashed part by part as it is read; completed only when the whole matches
        `expected`, aborted otherwise (an uncompleted upload is no object)."""
        k = self.key(key)
        up = self.client.create_multipart_upload(Bucket=self.bucket, Key=k, Metadata={"sha256": expected},
                                                 ChecksumAlgorithm="SHA256")["UploadId"]
        h, parts, inflight = hashlib.sha256(), [], collections.deque()

        def settle(part: dict, fut: Any) -> None:
            part["ETag"] = fut.result()["ETag"]  # raises that part's error

        try:
            with ThreadPoolExecutor(PARTS_IN_FLIGHT) as pool:
                while data := f.read(PART):
                    h.update(data)
                    cs = _b64(hashlib.sha256(data).hexdigest())
                    part = {"PartNumber": len(parts) + 1, "ChecksumSHA256": cs}
                    parts.append(part)
                    inflight.append((part, pool.submit(self.client.upload_part, Bucket=self.bucket, Key=k,
                                                       UploadId=up, PartNumber=part["PartNumber"], Body=data,
                                                       ChecksumSHA256=cs)))
                    if len(inflight) >= PARTS_IN_FLIGHT:  # bounded memory: PARTS_IN_FLIGHT parts at most
                        settle(*inflight.popleft())
                while inflight:
                    settle(*inflight.popleft())
            refuse_mismatch(self.uri(key), expected, h.hexdigest(), local)
            self.client.complete_multipart_upload(Bucket=self.bucket, Key=k, UploadId=up,
                                                  MultipartUpload={"Parts": parts})
        except BaseException:
            with contextlib.suppress(Exception):
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=k, UploadId=up)
            raise
        return expected

    def put_bytes(self, key, data):
        self.client.put_object(Bucket=self.bucket, Key=self.key(key), Body=data,
                               Metadata={"sha256": hashlib.sha256(data).hexdigest()})

    def create_if_absent(self, key, data):
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key(key), Body=data,
                                   Metadata={"sha256": hashlib.sha256(data).hexdigest()}, IfNoneMatch="*")
            return True
        except Exception as e:
            if s3_condition_failed(e):
                return False
            if s3_error_code(e) in {"NotImplemented", "501"}:  # a server without conditional PUT: check, then put
                if self.stat(key) is not None:
                    return False
                self.put_bytes(key, data)
                return True
            raise

    def copy_from(self, src, src_key, key, sha256, src_version=None):
        if not isinstance(src, S3Location) or src.client.meta.endpoint_url != self.client.meta.endpoint_url:
            return False
        if src_version is None:  # hash the source here (streamed, not uploaded) and pin that version
            got = src.digest_versioned(src_key)
            if got is None:
                raise src._absent(src_key)
            refuse_mismatch(self.uri(key), sha256, got[1], src.uri(src_key))
            src_version = got[2]
        # CopySourceIfMatch: the copy is of exactly the bytes that were hashed (a source rewritten since has
        # another ETag, and the server refuses), so the `sha256` metadata stamped here is true
        try:  # boto3's managed copy: CopyObject, or UploadPartCopy for objects over its multipart threshold
            self.client.copy({"Bucket": src.bucket, "Key": src.key(src_key)}, self.bucket, self.key(key),
                             ExtraArgs={"Metadata": {"sha256": sha256}, "MetadataDirective": "REPLACE",
                                        **({"CopySourceIfMatch": src_version} if src_version else {})})
        except Exception as e:
            if s3_condition_failed(e):
                raise IntegrityError(f"{self.uri(key)}: refusing to store it: {src.uri(src_key)} changed after "
                                     f"its bytes were checked against sha256 {sha256} (another run rewrote it?)"
                                     ) from None
            if s3_error_code(e) in {"AccessDenied", "403", "NotImplemented", "501"}:
                return False  # this identity cannot read the source: the caller uploads instead
            raise
        return True

    def _get_object(self, key: str) -> dict | None:
        """GetObject's response for `key`, or None when absent."""
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self.key(key))
        except Exception as e:
            if s3_missing(e):
                return None
            raise

    def digest_versioned(self, key):
        got = self._get_object(key)
        if got is None:
            return None
        with contextlib.closing(got["Body"]) as body:
            sha, n = sha256_stream(body)
        return n, sha, got.get("ETag")

    # compare-and-swap by conditional requests: SeaweedFS (4.x, as the tests run it) and AWS S3 honour
    # If-None-Match: * and If-Match on PutObject and If-Match on DeleteObject (412 when they do not hold)
    def read_versioned(self, key):
        got = self._get_object(key)
        if got is None:
            return None
        with contextlib.closing(got["Body"]) as body:
            return body.read(), got["ETag"]

    def put_if_match(self, key, data, version):
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key(key), Body=data, IfMatch=version,
                                   Metadata={"sha256": hashlib.sha256(data).hexdigest()})
            return True
        except Exception as e:
            if s3_condition_failed(e) or s3_missing(e):
                return False
            self._refuse_unconditional(e, key, "PutObject If-Match")
            raise

    def _refuse_unconditional(self, err: BaseException, key: str, what: str) -> None:
        # a server without conditional writes cannot hold a lease safely: say so rather than race
        if s3_error_code(err) in {"NotImplemented", "501"}:
            raise NotImplementedError(f"{self.uri(key)}: this S3 server does not implement {what}, which the run "
                                      "lease needs (SeaweedFS 4.x and AWS S3 do)") from None

    def delete_if_match(self, key, version):
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key(key), IfMatch=version)
            return True
        except Exception as e:
            if s3_condition_failed(e) or s3_missing(e):
                return False
            self._refuse_unconditional(e, key, "DeleteObject If-Match")
            raise

    def list(self, prefix):
        k = self.key(prefix.strip("/"))
        k = k + "/" if k else k  # a folder: "mix" must not match "mixed/..."
        cut = len(self.prefix) + 1 if self.prefix else 0
        return sorted(obj["Key"][cut:]
                      for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=k)
                      for obj in page.get("Contents", []))

    def delete(self, key):
        self.client.delete_object(Bucket=self.bucket, Key=self.key(key))

    def delete_prefix(self, prefix):
        for key in self.list(prefix):
            self.delete(key)


class HubLocation(Location):
    """A hub dataset repo at one revision, read through huggingface_hub (its cache, so HF_HUB_OFFLINE works)."""

    def __init__(self, repo_id: str, revision: str, *, api: Any = None, endpoint: str | None = None,
                 cache_dir: str | None = None, subdir: str = ""):
        if api is None:
            from huggingface_hub import HfApi

            api = HfApi(endpoint=endpoint)
        self.repo_id, self.revision, self.api, self.cache_dir, self.subdir = repo_id, revision, api, cache_dir, subdir
        self.url = f"hf://datasets/{repo_id}@{revision}" + (f"/{subdir}" if subdir else "")

    def fetch(self, key: str) -> str:
        """A local path of `key` in the hub cache (FileNotFoundError when the file or revision is absent)."""
        from huggingface_hub.errors import EntryNotFoundError, RevisionNotFoundError

        name = f"{self.subdir}/{key}" if self.subdir else key
        try:
            return self.api.hf_hub_download(self.repo_id, name, repo_type="dataset", revision=self.revision,
                                            cache_dir=self.cache_dir)
        except (EntryNotFoundError, RevisionNotFoundError):
            raise self._absent(key) from None

    def open(self, key):
        return open(self.fetch(key), "rb")

    def stat(self, key):
        try:
            return os.path.getsize(self.fetch(key)), None
        except FileNotFoundError:
            return None
