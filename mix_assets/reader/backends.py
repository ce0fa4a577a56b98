"""Where a mix's files come from: a local directory (_LocalBackend, read in place), or a remote location of
core/transport.py (_RemoteBackend: _S3Backend through boto3, _HubBackend through huggingface_hub), and the
choice of one from open_mix's location argument (_backend)."""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mix_assets.core.transport import (HUB, S3, HubLocation, Location, S3Location, local_path, s3_client, scheme,
                                       split_hub_url, split_s3_url)
from mix_assets.format.manifest import MANIFEST_NAME
from mix_assets.reader.errors import _DISK_FULL, ReaderError


class _LocalBackend:
    remote = False

    def __init__(self, root: str):
        self.root = Path(root).expanduser().resolve()
        self.label = str(self.root)

    def read_manifest(self) -> bytes:
        try:
            return (self.root / MANIFEST_NAME).read_bytes()
        except FileNotFoundError:
            raise ReaderError(f"{self.root / MANIFEST_NAME}: not found (is {self.root} a published mix?)") from None

    def local_path(self, rel: str) -> str:
        p = self.root / rel
        if not p.exists():
            raise ReaderError(f"{p}: listed in the manifest but not found")
        return str(p)


class _RemoteBackend:
    """A remote location of `core/transport.py`; its files are fetched into the reader's _SharedCache."""

    remote = True
    verb = "read"

    def __init__(self, loc: Location, label: str):
        self.loc, self.label = loc, label

    def _failed(self, rel: str, e: Exception) -> ReaderError:
        if isinstance(e, FileNotFoundError) and self.verb == "read":
            return ReaderError(f"{self.label}/{rel}: not found")
        return ReaderError(f"{self.label}/{rel}: cannot {self.verb} ({type(e).__name__}: {e})")

    def read_small(self, rel: str) -> bytes:
        """A small file's bytes (the caller checks its sha256), outside the shard cache."""
        try:
            return self.loc.read_bytes(rel)
        except Exception as e:
            raise self._failed(rel, e) from e

    def read_manifest(self) -> bytes:
        return self.read_small(MANIFEST_NAME)

    def read_private(self, rel: str) -> bytes:
        """A shard's bytes into memory, touching nothing other processes share (the caller checks them)."""
        return self.read_small(rel)

    def download(self, rel: str, dest: Path) -> str | None:
        """Write the file to dest; return its sha256 when hashed on the way (else None: the cache hashes it).
        A full local disk raises its OSError as is (the cache's problem, see _DISK_FULL)."""
        try:
            return self.loc.download(rel, dest)
        except OSError as e:
            if e.errno in _DISK_FULL:
                raise
            raise self._failed(rel, e) from e
        except Exception as e:
            raise self._failed(rel, e) from e


class _S3Backend(_RemoteBackend):
    """Objects under s3://bucket/prefix (client: `core/transport.s3_client` unless one is given)."""

    def __init__(self, url: str, cache_dir: Path, endpoint_url: str | None, anonymous: bool | None,
                 client: Any = None):
        try:
            bucket, prefix = split_s3_url(url)
        except ValueError as e:
            raise ReaderError(str(e)) from None
        self.client = client if client is not None else s3_client(endpoint_url, anonymous=anonymous)
        super().__init__(S3Location(url, self.client), f"{S3}://{bucket}/{prefix}" if prefix else f"{S3}://{bucket}")


class _HubBackend(_RemoteBackend):
    """A hub dataset repo at a revision, downloaded through huggingface_hub (its cache: cache_dir/hub)."""

    verb = "fetch"

    def __init__(self, url: str, cache_dir: Path, endpoint: str | None):
        try:
            hub = split_hub_url(url)
        except ValueError as e:
            raise ReaderError(str(e)) from None
        if hub.revision is None:
            raise ReaderError(f"{url}: a hub location needs a pinned revision: hf://datasets/org/name@revision")
        loc = HubLocation(hub.repo_id, hub.revision, endpoint=endpoint, cache_dir=str(cache_dir / "hub"),
                          subdir=hub.subdir)
        super().__init__(loc, url)

    def _failed(self, rel: str, e: Exception) -> ReaderError:
        return ReaderError(f"{self.label}: cannot fetch {rel} ({type(e).__name__}: {e})")

    def read_private(self, rel: str) -> bytes:
        # Through a hub cache of our own: a blob in the shared cache_dir/hub may be moved into the object
        # cache by the process fetching it meanwhile.
        loc = copy.copy(self.loc)
        with tempfile.TemporaryDirectory(prefix="mix-reader-hub-") as d:
            loc.cache_dir = d
            try:
                return loc.read_bytes(rel)
            except Exception as e:
                raise self._failed(rel, e) from e

    def download(self, rel: str, dest: Path) -> None:
        # Move the hub's blob into the reader's cache (one copy on disk, under the reader's budget) and drop
        # the snapshot link that pointed at it; a later hf_hub_download of it fetches again.
        try:
            pointer = self.loc.fetch(rel)
        except OSError as e:
            if e.errno in _DISK_FULL:  # the hub's cache is under cache_dir too
                raise
            raise self._failed(rel, e) from e
        except Exception as e:
            raise self._failed(rel, e) from e
        shutil.move(os.path.realpath(pointer), dest)
        if os.path.islink(pointer):
            os.unlink(pointer)


def _backend(location: Any, cache_dir: Path, s3_endpoint_url: str | None, anonymous: bool | None,
             hub_endpoint: str | None, s3_client: Any):
    loc = os.fspath(location)
    try:
        kind = scheme(loc)
    except ValueError as e:
        raise ReaderError(str(e)) from None
    if kind == S3:
        return _S3Backend(loc, cache_dir, s3_endpoint_url, anonymous, s3_client)
    if kind == HUB:
        return _HubBackend(loc, cache_dir, hub_endpoint)
    return _LocalBackend(local_path(loc))
