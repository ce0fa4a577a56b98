"""One storage root for every artifact: a local directory or `s3://bucket/prefix`.

A thin face over `core/transport.py` (a LocalLocation or an S3Location). Writes are atomic: a local
file is written under a temporary name in the same directory and renamed into place; an S3 object
appears whole on PUT. A killed write never leaves a file that looks complete. Paths given to `Storage`
are relative keys with `/` separators.

Reading: `open(key)` (or `source(key)` for pyarrow) reads in place, on S3 by range GETs, so a stage that
reads some row groups of a Parquet file never downloads the whole object. `local_path(key)` is only for
libraries that need a real file (a tokenizer.json, `np.load`); on S3 it downloads into `cache_dir`.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator, Optional

from mix_assets.core.transport import LocalLocation, Location, S3Location, is_s3, s3_client, split_s3_url

_MISSING = " (was the upstream asset materialised?)"


class StorageLinkError(OSError):
    """A write or delete under a local storage root that a symlink (or `..`) would take out of it."""


def local_key_path(root: str | Path, key: str) -> Path:
    """`root/key` for writing or deleting: refused when a symlink on the way (or a `..`) leads out of
    the root, naming the link and its target. Without this a stage writes through such a link into
    another folder, and deleting old shards through it silently does nothing."""
    base = Path(root).resolve()
    full = Path(root) / key
    real = full.resolve()
    if real == base or base in real.parents:
        return full
    at = Path(root)
    for part in Path(key).parts:
        at = at / part
        if at.is_symlink():
            target = at.resolve()
            if target != base and base not in target.parents:
                raise StorageLinkError(f"{at} is a symlink to {target}, outside the storage root {base}; stages "
                                       "write and delete only inside their storage root: replace the link with a "
                                       "folder (or make its target the storage root)")
    raise StorageLinkError(f"{full}: key {key!r} resolves to {real}, outside the storage root {base}")


@dataclass
class Storage:
    """A root (local path or s3:// URL) with atomic writes, in-place reads and local paths on demand."""

    root: str
    s3_endpoint_url: Optional[str] = None
    cache_dir: Optional[str] = None  # where S3 uploads are staged and `local_path` downloads land
    # a run's checkout (core/checkout.py): `root` holds its working files, `store_root` (the storage root) the
    # object store, keyed records and locks that every checkout shares; None: `root` is the storage root
    store_root: Optional[str] = None
    _location: Optional[Location] = field(default=None, repr=False)

    @property
    def is_s3(self) -> bool:
        return is_s3(self.root)

    @property
    def location(self) -> Location:
        """The transport location of the root (built once; S3 clients from `transport.s3_client`)."""
        if self._location is None:
            if self.is_s3:
                self._location = S3Location(self.root, s3_client(self.s3_endpoint_url), scratch_dir=self.cache_dir)
            else:
                self._location = LocalLocation(self.root)
        return self._location

    @property
    def store(self) -> "Storage":
        """The storage root shared by every checkout: objects/, keyed/, locks/ (itself when not a checkout)."""
        if self.store_root is None or self.store_root == self.root:
            return self
        return Storage(root=self.store_root, s3_endpoint_url=self.s3_endpoint_url, cache_dir=self.cache_dir)

    def sub(self, prefix: str) -> Location:
        """The location of the folder `prefix` (e.g. the mix directory, for publishing and the reader)."""
        if self.is_s3:
            return S3Location(self.uri(prefix), self.location.client, scratch_dir=self.cache_dir)
        return LocalLocation(Path(self.root) / prefix)

    def uri(self, key: str) -> str:
        return f"{self.root.rstrip('/')}/{key}"

    # -- writing ----------------------------------------------------------------------------
    def _confine(self, key: str) -> None:
        """Refuse a write or delete of `key` that a symlink would take out of a local root."""
        if not self.is_s3:
            local_key_path(self.root, key)

    @contextlib.contextmanager
    def writing(self, key: str) -> Iterator[str]:
        """Yield a local temporary path; on clean exit it becomes `key` atomically."""
        self._confine(key)
        with self.location.writing(key) as tmp:
            yield tmp

    def write_bytes(self, key: str, data: bytes) -> None:
        with self.writing(key) as tmp:
            Path(tmp).write_bytes(data)

    def write_text(self, key: str, text: str) -> None:
        self.write_bytes(key, text.encode("utf-8"))

    # -- reading ----------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        return self.location.exists(key)

    def open(self, key: str) -> BinaryIO:
        """A seekable binary file over `key`, read in place (S3: range GETs)."""
        try:
            return self.location.open(key)
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.uri(key)}: not found{_MISSING}") from None

    def source(self, key: str) -> str | BinaryIO:
        """What pyarrow reads `key` from: the path on a local root, an in-place S3 file otherwise."""
        return self.local_path(key) if not self.is_s3 else self.open(key)

    def read_bytes(self, key: str) -> bytes:
        return self.location.read_bytes(key)

    def read_text(self, key: str) -> str:
        return self.read_bytes(key).decode("utf-8")

    def sha256(self, key: str) -> str:
        """The sha256 of `key`'s bytes (FileNotFoundError when absent); on S3 the `sha256` metadata that
        `writing` records, so no download (an object put by anything else is hashed from its bytes)."""
        return self.location.sha256(key)

    def local_path(self, key: str) -> str:
        """A local file path holding `key` (downloaded into the cache for S3 roots)."""
        if not self.is_s3:
            p = Path(self.root) / key
            if not p.exists():
                raise FileNotFoundError(f"{self.uri(key)}: not found{_MISSING}")
            return str(p)
        bucket, k = split_s3_url(self.uri(key))
        dest = Path(self.cache_dir or tempfile.gettempdir()) / "storage" / bucket / k
        try:
            self.location.download(key, dest)
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.uri(key)}: not found{_MISSING}") from None
        return str(dest)

    def list(self, prefix: str) -> list[str]:
        """Keys under the folder `prefix` ("" for all), sorted."""
        return self.location.list(prefix)

    def delete(self, key: str) -> None:
        """Remove one key; an absent key is not an error."""
        self._confine(key)
        self.location.delete(key)

    def delete_prefix(self, prefix: str) -> None:
        """Remove the folder `prefix` and everything under it."""
        self._confine(prefix)
        self.location.delete_prefix(prefix)
