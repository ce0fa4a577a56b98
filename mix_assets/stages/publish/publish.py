"""Publish the mix directory as an immutable revision, and verify it as a stranger would.

Targets, chosen by the publish URL:
  * a local directory            /data/published            -> /data/published/rev-<fp16>/...
  * S3 (or S3-compatible)        s3://bucket/prefix         -> s3://bucket/prefix/rev-<fp16>/...
  * the Hugging Face hub         hf://datasets/org/name     -> one commit; the revision is its sha

What is published: every file the manifest lists (shards, tokenizer, review files), a README.md
dataset card generated from the manifest alone (so a reader can regenerate and compare it), and
manifest.json. A revision exists exactly when its manifest.json exists:

  1. every file is uploaded under `rev-<fingerprint[:16]>/` (S3 PUT and local rename are atomic per file);
  2. manifest.json is written last, create-if-absent (S3 `If-None-Match: *`, local `link()`);
  3. the `latest` pointer (a small JSON file at the target root) is written only once the revision
     verifies: by `publish()` after re-hashing every object at the target, or (`point_latest=False`, the
     asset) by the blocking gate after a stranger's read passes (`Target.point_latest`).

Every byte is hashed as it is written (`core/transport.Location.put_file` / `copy_from`) and refused when it is not
what the manifest lists, so a mix rewritten between its check and its copy (another run on the same
storage root) is never stored under a revision that vouches for other bytes.

A publish killed before step 2 leaves files without a manifest: not a revision; a retry re-uses the
files already there (same size and sha256) and finishes. Publishing the same manifest again re-hashes
every object of the existing revision and re-uploads only what is missing or differs (a shard deleted
or damaged at the target), the card too, then points `latest`; an intact revision is left untouched.
A different manifest under an existing revision id is refused (RevisionConflict).
Every path taken from a manifest (local or remote) goes through `format/paths.safe_path`.
On the hub the files go up in commits within the hub's documented limits (at most 100 files each), the
previous manifest deleted by the first; the last commit adds only the card and manifest.json and is the
revision, tagged `rev-<fp16>` so that a re-publish finds it.
Reads and writes go through `core/transport.py`; a storage root on the same S3 endpoint as the target is
copied server-side (CopyObject), the bytes never pass through this process.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import posixpath
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mix_assets.format import card as card_format
from mix_assets.format.card import dataset_card
from mix_assets.format.checker import manifest_problems
from mix_assets.format.manifest import FORMAT, compute_fingerprint
from mix_assets.format.mixdir import LocalDir
from mix_assets.format.paths import UnsafePathError, safe_path
from mix_assets.format.shards import read_row
from mix_assets.core import transport
from mix_assets.core.transport import (
    HubLocation,
    IntegrityError,
    LocalLocation,
    Location,
    S3Location,
    refuse_mismatch,
    s3_client,
    sha256_file,
)

MANIFEST = "manifest.json"
README = "README.md"
LATEST = "latest"
_CHUNK = 1 << 22


class PublishError(RuntimeError):
    """The mix cannot be published as it is; the message names the file and what is wrong."""


class RevisionConflict(PublishError):
    """A revision with this id already exists at the target with different content."""


# -- what is published -------------------------------------------------------------------------


def revision_id(fingerprint: str) -> str:
    """The immutable revision id of a manifest fingerprint (format/card.revision_id), or PublishError."""
    try:
        return card_format.revision_id(fingerprint)
    except ValueError as e:
        raise PublishError(str(e)) from None


def manifest_bytes(manifest: dict) -> bytes:
    return json.dumps(manifest, indent=2, sort_keys=False).encode("utf-8") + b"\n"


def published_paths(manifest: dict) -> list[str]:
    """Every path of a revision in upload order: listed files, the card, then the manifest."""
    return [f["path"] for f in manifest["files"]] + [README, MANIFEST]


def check_local_mix(manifest: dict, source: Location, versions: dict | None = None) -> list[str]:
    """Problems with the local mix against its own manifest (before anything is uploaded); every listed
    file is re-hashed from its bytes (on an S3 storage root: streamed, not downloaded). `versions`, when
    given, receives each file's version as hashed (S3 ETag), so a server-side copy copies those bytes only."""
    problems = []
    if manifest.get("format") != FORMAT:
        problems.append(f"{MANIFEST}: format {manifest.get('format')!r} != {FORMAT!r}")
    files = manifest.get("files") or []
    if not files:
        problems.append(f"{MANIFEST}: lists no files")
    if files and compute_fingerprint(files) != manifest.get("fingerprint"):
        problems.append(f"{MANIFEST}: fingerprint {manifest.get('fingerprint')} != {compute_fingerprint(files)} "
                        "recomputed from the listed sha256s")
    for f in files:
        p = f.get("path")
        try:
            safe_path(p)
        except UnsafePathError as e:
            problems.append(f"{MANIFEST}: file path {e.problems[0]}")
            continue
        if p in (README, MANIFEST, LATEST):
            problems.append(f"{MANIFEST}: file path {p!r} is reserved")
            continue
        try:
            got = source.digest_versioned(p)
        except UnsafePathError as e:
            problems.append(f"{p}: {e.problems[0]}")
            continue
        if got is None:
            problems.append(f"{p}: listed in the manifest but missing")
        elif got[0] != f["bytes"]:
            problems.append(f"{p}: {got[0]} bytes, manifest says {f['bytes']}")
        elif got[1] != f["sha256"]:
            problems.append(f"{p}: sha256 differs from the manifest")
        elif versions is not None and got[2]:
            versions[p] = got[2]
    return problems


# -- targets -------------------------------------------------------------------------------------


def _confined(key: str, root: Path) -> Path:
    return safe_path(key, root)


class Target:
    """A place revisions live: `<revision>/<path>` keys plus a `latest` pointer, over a transport Location.

    The same interface for every kind (local, S3, hub), so callers never branch on the target's type.
    """

    revision_is_fingerprint = True  # `rev-<fp16>`; the hub's revision is its commit sha

    def __init__(self, location: Location):
        self.loc = location
        self.url = location.url

    def read(self, key: str) -> bytes | None:
        """The object's bytes, or None when it does not exist."""
        try:
            return self.loc.read_bytes(key)
        except FileNotFoundError:
            return None

    def stat(self, key: str) -> tuple[int, str | None] | None:
        """(size, recorded sha256 or None) of an existing object, else None."""
        return self.loc.stat(key)

    def digest(self, key: str) -> tuple[int, str] | None:
        """(size, sha256 recomputed from the object's bytes) of an existing object, else None."""
        return self.loc.digest(key)

    def put(self, key: str, source: Location, rel: str, sha256: str, version: str | None = None) -> None:
        """Copy `rel` of the local mix to `key`: server-side when the stores allow it, else uploaded; either
        way only bytes that hash to `sha256` are stored (PublishError naming the key otherwise)."""
        try:
            if self.loc.copy_from(source, rel, key, sha256, version):
                return
            if isinstance(source, LocalLocation):
                self.put_file(key, str(source.path(rel)), sha256)
                return
            with tempfile.TemporaryDirectory(prefix="mix-publish-") as d:
                source.download(rel, Path(d) / "f")
                self.put_file(key, str(Path(d) / "f"), sha256)
        except IntegrityError as e:
            raise PublishError(f"{e}; {self.uri(key)} was not written and `latest` was not moved") from None

    def put_file(self, key: str, local: str, sha256: str) -> None:
        self.loc.put_file(key, local, sha256)

    def point_latest(self, revision: str, fingerprint: str) -> None:
        """Point `latest` at `revision`: call it only once the revision has verified."""
        _point_latest(self, revision, fingerprint)

    def put_bytes(self, key: str, data: bytes) -> None:
        self.loc.put_bytes(key, data)

    def create_if_absent(self, key: str, data: bytes) -> bool:
        """Write `key` only if it does not exist; False when it already did."""
        return self.loc.create_if_absent(key, data)

    def download(self, key: str, dest: str) -> str:
        """Copy the object to the local path `dest` (FileNotFoundError when absent); the sha256 of the bytes
        written there (every Location hashes what it writes while, or right after, copying)."""
        return self.loc.download(key, dest)

    def uri(self, key: str) -> str:
        return self.loc.uri(key)

    def location(self, revision: str) -> str:
        """What `mix_assets.reader.open_mix` is given to read `revision`."""
        return self.uri(revision)

    def reader_kwargs(self) -> dict:
        """Keyword arguments for `open_mix` so it reads with this target's access (and no more)."""
        return reader_kwargs_of(self.loc)

    def publish(self, manifest: dict, source: Location, log: Callable[[str], None], *, point_latest: bool = True,
                versions: dict | None = None) -> PublishResult:
        """Upload the files, the card, then the manifest (create-if-absent); then, with `point_latest`, re-hash
        every object of the revision at the target and point `latest` only when all match."""
        rev = revision_id(manifest["fingerprint"])
        mbytes = manifest_bytes(manifest)
        card = dataset_card(manifest).encode("utf-8")
        total = sum(f["bytes"] for f in manifest["files"]) + len(card) + len(mbytes)
        n_files = len(manifest["files"]) + 2

        existing = self.read(f"{rev}/{MANIFEST}")
        if existing is not None:
            _same_revision(existing, manifest, self.uri(f"{rev}/{MANIFEST}"))
            up_files, up_bytes = _repair(self, rev, manifest, source, card, log)
            if up_files:
                log(f"{self.location(rev)}: repaired {up_files:,} missing or damaged object(s) ({up_bytes:,} bytes)")
            else:
                log(f"{self.location(rev)} already holds this content, every object verified; nothing uploaded")
            if point_latest:  # _repair re-hashed every listed object and the card; the manifest is identical
                self.point_latest(rev, manifest["fingerprint"])
            return PublishResult(self.url, rev, self.location(rev), manifest["fingerprint"], n_files, total,
                                 up_files, up_bytes, created=False)

        up_files = up_bytes = 0
        for f in manifest["files"]:
            key = f"{rev}/{f['path']}"
            st = self.stat(key)
            if st is not None and st[0] == f["bytes"] and st[1] == f["sha256"]:
                continue  # left by an interrupted publish of this same revision
            self.put(key, source, f["path"], f["sha256"], (versions or {}).get(f["path"]))
            up_files += 1
            up_bytes += f["bytes"]
        self.put_bytes(f"{rev}/{README}", card)
        if not self.create_if_absent(f"{rev}/{MANIFEST}", mbytes):
            # someone published concurrently: accept only the identical manifest
            _same_revision(self.read(f"{rev}/{MANIFEST}") or b"", manifest, self.uri(f"{rev}/{MANIFEST}"))
        if point_latest:
            problems = revision_problems(self, rev, manifest, card)
            if problems:
                raise PublishError(f"{self.location(rev)} does not verify, `latest` not moved:\n  "
                                   + "\n  ".join(problems))
            self.point_latest(rev, manifest["fingerprint"])
        up_files, up_bytes = up_files + 2, up_bytes + len(card) + len(mbytes)  # the card and manifest too
        log(_published_line(self.location(rev), up_files, n_files, up_bytes, total))
        return PublishResult(self.url, rev, self.location(rev), manifest["fingerprint"], n_files, total,
                             up_files, up_bytes, created=True)


class LocalTarget(Target):
    """A local directory; every key is confined to it (`format/paths.safe_path`, symlinks resolved)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        super().__init__(LocalLocation(self.root, confine=_confined))


class S3Target(Target):
    """`s3://bucket/prefix`; each object carries its sha256 as user metadata (used to resume)."""

    def __init__(self, url: str, client):
        super().__init__(S3Location(url, client))
        self.client, self.bucket, self.prefix = client, self.loc.bucket, self.loc.prefix


def reader_kwargs_of(loc: Location) -> dict:
    """What `open_mix` needs besides the URL to read `loc` with the same access."""
    if isinstance(loc, S3Location):
        return {"s3_client": loc.client}
    if isinstance(loc, HubLocation):
        return {"hub_endpoint": loc.api.endpoint}
    return {}


# -- publishing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishResult:
    url: str  # the publish target
    revision: str  # rev-<fp16> (local, S3) or the hub commit sha
    location: str  # what open_mix() takes to read this revision
    fingerprint: str
    files: int  # files in the revision, manifest and card included
    bytes: int
    uploaded_files: int  # 0 when the revision already existed
    uploaded_bytes: int
    created: bool  # False: the same content was already published (no-op)

    def to_json(self) -> dict:
        return dict(self.__dict__)


def mix_source(mix: str | os.PathLike | Location) -> Location:
    """The local mix as a Location: a directory (keys confined to it) or a storage root's `mix/` folder."""
    return mix if isinstance(mix, Location) else LocalLocation(Path(mix), confine=_confined)


def load_manifest(mix: str | os.PathLike | Location) -> dict:
    src = mix_source(mix)
    try:
        return json.loads(src.read_bytes(MANIFEST).decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PublishError(f"{src.uri(MANIFEST)}: not valid JSON ({e})") from None


def _same_revision(existing: bytes, manifest: dict, where: str) -> None:
    try:
        theirs = json.loads(existing)
    except json.JSONDecodeError:
        raise RevisionConflict(f"{where}: exists but is not valid JSON; refusing to publish over it") from None
    if theirs != manifest:
        diff = sorted(k for k in set(theirs) | set(manifest) if theirs.get(k) != manifest.get(k))
        raise RevisionConflict(
            f"{where}: a revision with this id already exists with different content "
            f"(fields differ: {', '.join(diff)}); revisions are immutable, refusing to overwrite"
        )


def publish(mix: str | os.PathLike | Location, target: Target,
            *, log: Callable[[str], None] = lambda s: None, point_latest: bool = True) -> PublishResult:
    """Publish the mix directory (a path, or a Location such as `Storage.sub("mix")`) to `target`.

    point_latest=False leaves `latest` alone: the caller moves it (`Target.point_latest`) after its own
    verification, as the asset's gate does."""
    source = mix_source(mix)
    manifest = load_manifest(source)
    versions: dict[str, str] = {}
    problems = check_local_mix(manifest, source, versions)
    if problems:
        raise PublishError("the local mix does not match its manifest:\n  " + "\n  ".join(problems))
    return target.publish(manifest, source, log, point_latest=point_latest, versions=versions)


def revision_problems(target: Target, rev: str, manifest: dict, card: bytes) -> list[str]:
    """Every object of revision `rev` re-hashed from the target's bytes against the manifest (files, the
    card, manifest.json itself): [] when the revision is exactly what the manifest says."""
    want = [(f"{rev}/{f['path']}", f["bytes"], f["sha256"]) for f in manifest["files"]]
    mbytes = manifest_bytes(manifest)
    want += [(f"{rev}/{README}", len(card), hashlib.sha256(card).hexdigest()),
             (f"{rev}/{MANIFEST}", len(mbytes), hashlib.sha256(mbytes).hexdigest())]
    problems = []
    for key, n, sha in want:
        got = target.digest(key)
        if got is None:
            problems.append(f"{target.uri(key)}: missing")
        elif got != (n, sha):
            problems.append(f"{target.uri(key)}: {got[0]} bytes sha256 {got[1]}, the manifest says {n} bytes "
                            f"sha256 {sha}")
    return problems


def _published_line(location: str, up_files: int, n_files: int, up_bytes: int, total: int) -> str:
    """The log line for a publish: the same numbers the asset's metadata shows."""
    return f"published {location}: {up_files:,} of {n_files:,} files uploaded ({up_bytes:,} of {total:,} bytes)"


def _repair(target: Target, rev: str, manifest: dict, source: Location, card: bytes,
            log: Callable[[str], None]) -> tuple[int, int]:
    """Re-hash every object of an existing revision; re-upload each one missing or differing, the card
    after the listed files (the manifest is already there and identical). (files, bytes) uploaded."""
    up_files = up_bytes = 0
    for f in manifest["files"]:
        key = f"{rev}/{f['path']}"
        if target.digest(key) == (f["bytes"], f["sha256"]):
            continue
        log(f"{target.uri(key)}: missing or differs from the manifest; uploading it again")
        target.put(key, source, f["path"], f["sha256"])
        up_files += 1
        up_bytes += f["bytes"]
    if target.digest(f"{rev}/{README}") != (len(card), hashlib.sha256(card).hexdigest()):
        log(f"{target.uri(f'{rev}/{README}')}: missing or not the generated card; writing it again")
        target.put_bytes(f"{rev}/{README}", card)
        up_files += 1
        up_bytes += len(card)
    return up_files, up_bytes


def _point_latest(target: Target, rev: str, fingerprint: str) -> None:
    body = json.dumps({"revision": rev, "fingerprint": fingerprint, "manifest": f"{rev}/{MANIFEST}"},
                      sort_keys=True).encode() + b"\n"
    if target.read(LATEST) != body:
        target.put_bytes(LATEST, body)


def read_latest(target: Target) -> str | None:
    """The revision the `latest` pointer names, if it names one whose manifest exists."""
    raw = target.read(LATEST)
    if raw is None:
        return None
    rev = json.loads(raw)["revision"]
    return rev if target.read(f"{rev}/{MANIFEST}") is not None else None


# -- the Hugging Face hub ---------------------------------------------------------------------------

# The hub's documented limits (https://huggingface.co/docs/hub/en/repositories-recommendations):
# "Commit size <100 files" ("upload files in multiple commits"), "Entries per folder <10k" ("use
# subdirectories"), "Files per repo <100k".
HUB_OPS_PER_COMMIT = 100
HUB_ENTRIES_PER_FOLDER = 10_000


class HubTarget(Target):
    """`hf://datasets/org/name`: a revision is a commit, tagged `rev-<fp16>`; keys are `<commit>/<path>`.

    Files go up in commits of at most HUB_OPS_PER_COMMIT operations; the first also deletes the previous
    manifest and card, and the last adds only the card and the manifest. So no commit but the last holds
    a manifest: an interrupted publish never leaves something that reads as a revision.
    """

    revision_is_fingerprint = False

    def __init__(self, url: str, api=None, token: str | bool | None = None):
        try:
            hub = transport.split_hub_url(url)
        except ValueError:
            hub = None
        if hub is None or hub.revision is not None or hub.subdir:
            raise PublishError(f"{url}: a hub publish URL looks like hf://datasets/<org>/<name>")
        self.url = url.rstrip("/")
        self.repo_id = hub.repo_id
        if api is None:
            from huggingface_hub import HfApi

            api = HfApi(token=token)
        self.api = api

    def _at(self, revision: str, cache_dir: str) -> HubLocation:
        return HubLocation(self.repo_id, revision, api=self.api, cache_dir=cache_dir)

    def read(self, key: str) -> bytes | None:
        revision, _, path = key.partition("/")
        with tempfile.TemporaryDirectory(prefix="hf-") as d:
            try:
                return self._at(revision, d).read_bytes(path)
            except FileNotFoundError:
                return None

    def download(self, key: str, dest: str) -> str:
        revision, _, path = key.partition("/")
        with tempfile.TemporaryDirectory(prefix="hf-") as d:
            return self._at(revision, d).download(path, dest)

    def stat(self, key):
        data = self.read(key)
        return None if data is None else (len(data), hashlib.sha256(data).hexdigest())

    digest = stat

    def uri(self, key: str) -> str:
        revision, _, path = key.partition("/")
        return f"{self.url}@{revision}/{path}" if path else f"{self.url}@{revision}"

    def location(self, revision: str) -> str:
        return f"{self.url}@{revision}"

    def reader_kwargs(self) -> dict:
        return {"hub_endpoint": self.api.endpoint}

    def tag_commit(self, tag: str) -> str | None:
        refs = self.api.list_repo_refs(self.repo_id, repo_type="dataset")
        return next((t.target_commit for t in refs.tags if t.name == tag), None)

    def point_latest(self, revision: str, fingerprint: str) -> None:
        """Nothing: on the hub the last commit moves `main` and the tag names the revision."""

    def publish(self, manifest: dict, source: Location, log: Callable[[str], None], *, point_latest: bool = True,
                versions: dict | None = None) -> PublishResult:
        fp = manifest["fingerprint"]
        tag = revision_id(fp)
        mbytes = manifest_bytes(manifest)
        card = dataset_card(manifest).encode("utf-8")
        total = sum(f["bytes"] for f in manifest["files"]) + len(card) + len(mbytes)
        n_files = len(manifest["files"]) + 2
        _check_hub_folders(manifest)
        self.api.create_repo(self.repo_id, repo_type="dataset", exist_ok=True)

        commit = self.tag_commit(tag)
        if commit is not None:
            _same_revision(self.read(f"{commit}/{MANIFEST}") or b"", manifest, self.uri(f"{commit}/{MANIFEST}"))
            log(f"{self.location(commit)} already holds this content (tag {tag}); nothing uploaded")
            return PublishResult(self.url, commit, self.location(commit), fp, n_files, total, 0, 0, False)

        head = self.api.repo_info(self.repo_id, repo_type="dataset", revision="main").sha
        head_manifest = self.read(f"{head}/{MANIFEST}") if head else None
        created = True
        if head_manifest is not None and json.loads(head_manifest) == manifest:
            commit, created = head, False  # committed by a publish that died before tagging
        else:
            commit = self._commit_in_chunks(manifest, source, head, card, mbytes, tag, log)
        self.api.create_tag(self.repo_id, tag=tag, revision=commit, repo_type="dataset", exist_ok=True)
        up = (n_files, total) if created else (0, 0)
        log(_published_line(f"{self.location(commit)} (tag {tag})", up[0], n_files, up[1], total))
        return PublishResult(self.url, commit, self.location(commit), fp, n_files, total, *up, created)

    def _commit_in_chunks(self, manifest: dict, source: Location, head: str | None, card: bytes, mbytes: bytes,
                          tag: str, log: Callable[[str], None]) -> str:
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete

        present = self.api.list_repo_files(self.repo_id, repo_type="dataset", revision=head) if head else []
        wanted = {f["path"] for f in manifest["files"]}
        # the tree at the final commit is exactly the revision: the old manifest and card go first
        deletes = [p for p in present if p in (MANIFEST, README)]
        deletes += [p for p in present if p not in wanted and p not in (MANIFEST, README, ".gitattributes")]
        sha_of = {f["path"]: f["sha256"] for f in manifest["files"]}
        work: list[tuple[str, str | None]] = [(p, None) for p in deletes] + [(f["path"], f["path"])
                                                                             for f in manifest["files"]]
        chunks = [work[i:i + HUB_OPS_PER_COMMIT] for i in range(0, len(work), HUB_OPS_PER_COMMIT)]
        with tempfile.TemporaryDirectory(prefix="mix-hub-") as d:
            for n, chunk in enumerate(chunks, 1):
                ops = [CommitOperationDelete(p) if rel is None else
                       CommitOperationAdd(p, _local_file(source, rel, d, sha_of[rel])) for p, rel in chunk]
                head = self.api.create_commit(
                    self.repo_id, ops, repo_type="dataset", revision="main", parent_commit=head,
                    commit_message=f"Publish {tag}: files, part {n} of {len(chunks)}",
                ).oid
                log(f"{self.url}: committed part {n} of {len(chunks)} ({len(ops)} operations)")
                for p in Path(d).iterdir():
                    p.unlink()
        return self.api.create_commit(
            self.repo_id, [CommitOperationAdd(README, card), CommitOperationAdd(MANIFEST, mbytes)],
            repo_type="dataset", revision="main", parent_commit=head, commit_message=f"Publish {tag}",
            commit_description=f"content fingerprint {manifest['fingerprint']}",
        ).oid


def _local_file(source: Location, rel: str, scratch_dir: str, sha256: str) -> str:
    """A private copy of `rel` in `scratch_dir`, hashed while copied and refused unless it is `sha256`: the
    commit reads that copy, which nothing else rewrites (the mix itself may be, by another run)."""
    dest = Path(scratch_dir) / hashlib.sha256(rel.encode()).hexdigest()
    try:
        if isinstance(source, LocalLocation):
            LocalLocation(dest.parent).put_file(dest.name, source.path(rel), sha256)
        else:
            refuse_mismatch(source.uri(rel), sha256, source.download(rel, dest))
    except IntegrityError as e:
        dest.unlink(missing_ok=True)
        raise PublishError(f"{e}; nothing was committed for it") from None
    return str(dest)


def _check_hub_folders(manifest: dict) -> None:
    folders = collections.Counter(posixpath.dirname(p) for p in published_paths(manifest))
    crowded = {d or "/": n for d, n in folders.items() if n >= HUB_ENTRIES_PER_FOLDER}
    if crowded:
        raise PublishError(f"the hub recommends fewer than {HUB_ENTRIES_PER_FOLDER} entries per folder; "
                           f"these folders would hold more: {crowded} (use larger shards)")


def make_target(url: str, *, s3_endpoint_url: str | None = None, s3_region: str | None = None,
                s3_client_=None, hf_api=None) -> Target:
    """The target a publish URL names (write access from the environment's credentials)."""
    try:
        kind = transport.scheme(url)
    except ValueError:
        raise PublishError(f"{url}: unsupported publish URL (use a local path, s3://bucket/prefix "
                           "or hf://datasets/org/name)") from None
    if kind == transport.S3:
        return S3Target(url, s3_client_ or s3_client(s3_endpoint_url, s3_region))
    if kind == transport.HUB:
        return HubTarget(url, api=hf_api)
    return LocalTarget(transport.local_path(url))


# -- verification ----------------------------------------------------------------------------------


@dataclass
class Verification:
    location: str
    problems: list[str] = field(default_factory=list)
    files_verified: int = 0
    bytes_verified: int = 0
    samples_compared: int = 0  # comparisons: the raw shard bytes, then through the reader
    reader_samples_compared: int = 0  # the part of samples_compared read through the trainer's reader
    samples_total: int = 0  # samples in the revision's splits, of which the comparisons are a sample
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line for a reviewer: what was verified, out of how much; or the problems."""
        if self.problems:
            return f"{len(self.problems)} problem(s); first: {self.problems[0]}"
        raw = self.samples_compared - self.reader_samples_compared
        return (f"{self.files_verified:,} files ({self.bytes_verified:,} bytes) verified; of {self.samples_total:,} "
                f"samples, {raw:,} compared byte for byte and {self.reader_samples_compared:,} through the reader")


@contextlib.contextmanager
def _fresh_cache(cache_dir: str | None) -> Iterator[str]:
    if cache_dir is not None:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        if any(Path(cache_dir).iterdir()):
            raise PublishError(f"{cache_dir}: verification needs an empty cache directory")
        yield cache_dir
        return
    with tempfile.TemporaryDirectory(prefix="mix-verify-") as d:
        yield d


def _sample_indices(n: int, n_random: int, seed: int) -> list[int]:
    if n <= 0:
        return []
    rng = random.Random(seed)
    picks = {0, n - 1} | {rng.randrange(n) for _ in range(min(n_random, n))}
    return sorted(picks)


def verify(target: Target, revision: str, local_mix: str | os.PathLike | Location,
           *, cache_dir: str | None = None, n_random: int = 8, seed: int = 0,
           open_reader: Callable[..., object] | None = None) -> Verification:
    """Read `revision` from `target` (read-only access) into an empty cache and compare it with the local mix.

    Downloads the manifest, re-hashes every listed file, recomputes the fingerprint, regenerates the
    card, reads the first, last and `n_random` random samples of each split from the downloaded
    shards and (when `open_reader` is given: `mix_assets.reader.open_mix`) through the trainer's reader,
    comparing each with the local shards.
    """
    t0 = time.monotonic()
    source = mix_source(local_mix)
    local = load_manifest(source)
    loc = target.location(revision)
    out = Verification(loc)

    def uri(key: str) -> str:
        return target.uri(f"{revision}/{key}")

    def fetch(key: str, dest: str) -> str | None:
        return target.download(f"{revision}/{key}", dest)

    with _fresh_cache(cache_dir) as cache:
        root = Path(cache) / "files"
        try:
            fetch(MANIFEST, str(root / MANIFEST))
        except FileNotFoundError:
            out.problems.append(f"{uri(MANIFEST)}: missing, so {loc} is not a revision")
            out.seconds = time.monotonic() - t0
            return out
        except Exception as e:  # noqa: BLE001 -- access denied, endpoint down: a stranger could not read it
            out.problems.append(f"{uri(MANIFEST)}: cannot be read ({type(e).__name__}: {e})")
            out.seconds = time.monotonic() - t0
            return out
        try:
            remote = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            out.problems.append(f"{uri(MANIFEST)}: not valid JSON ({e})")
            out.seconds = time.monotonic() - t0
            return out
        if not isinstance(remote, dict):
            out.problems.append(f"{uri(MANIFEST)}: top level is {type(remote).__name__}, expected an object")
            out.seconds = time.monotonic() - t0
            return out
        if remote != local:
            diff = sorted(k for k in set(remote) | set(local) if remote.get(k) != local.get(k))
            out.problems.append(f"{uri(MANIFEST)}: differs from the local manifest in {', '.join(diff)}")
        structural = manifest_problems(remote, None)
        if structural:  # nothing it names is fetched: its paths may point anywhere
            out.problems += [f"{uri(MANIFEST)}: {p}" for p in structural]
            out.seconds = time.monotonic() - t0
            return out
        if target.revision_is_fingerprint and revision != revision_id(remote.get("fingerprint", "")):
            out.problems.append(f"{uri(MANIFEST)}: revision id {revision} does not derive from its fingerprint")
        out.files_verified += 1
        out.bytes_verified += (root / MANIFEST).stat().st_size
        out.samples_total = sum(sh["samples"] for sp in remote["splits"].values() for sh in sp["shards"])

        for f in remote["files"]:
            dest = safe_path(f["path"], root)
            try:
                fetched = fetch(f["path"], str(dest))
            except FileNotFoundError:
                out.problems.append(f"{uri(f['path'])}: listed in the manifest but missing")
                continue
            except Exception as e:  # noqa: BLE001 -- reported as a problem naming the object
                out.problems.append(f"{uri(f['path'])}: cannot be read ({type(e).__name__}: {e})")
                continue
            # the download's own hash of the bytes it wrote to `dest` (hashing them again proves nothing more)
            digest = fetched if isinstance(fetched, str) and len(fetched) == 64 else sha256_file(dest)
            size = dest.stat().st_size
            if size != f["bytes"] or digest != f["sha256"]:
                out.problems.append(f"{uri(f['path'])}: {size} bytes sha256 {digest[:16]}..., manifest says "
                                    f"{f['bytes']} bytes sha256 {f['sha256'][:16]}...")
                continue
            out.files_verified += 1
            out.bytes_verified += size
        try:
            fetch(README, str(root / README))
            if (root / README).read_text(encoding="utf-8") != dataset_card(remote):
                out.problems.append(f"{uri(README)}: differs from the card generated from the manifest")
            else:
                out.files_verified += 1
                out.bytes_verified += (root / README).stat().st_size
        except FileNotFoundError:
            out.problems.append(f"{uri(README)}: missing")

        if not out.problems:  # what the checker derives from the downloaded files: card, config, review counts
            out.problems += [f"{loc}: {p}" for p in manifest_problems(remote, LocalDir(root), verify_hashes=False,
                                                                        review_counts=True, doc_index=True)]
        if not out.problems:
            out.samples_compared += _compare_raw_samples(remote, root, source, n_random, seed, out.problems, uri)
        if not out.problems and open_reader is not None:
            out.reader_samples_compared = _compare_through_reader(
                open_reader, loc, target.reader_kwargs(), remote, source, Path(cache) / "reader", n_random, seed,
                out.problems)
            out.samples_compared += out.reader_samples_compared
    out.seconds = time.monotonic() - t0
    return out


def _compare_raw_samples(manifest, root: Path, source: Location, n_random, seed, problems, uri) -> int:
    """Sample k of a split read from the downloaded shards == the same sample of the local shards."""
    L, dtype = manifest["packing"]["sample_len"], manifest["dtype"]
    compared = 0
    for split, s in manifest["splits"].items():
        starts, acc = [], 0
        for sh in s["shards"]:
            starts.append(acc)
            acc += sh["samples"]
        for k in _sample_indices(acc, n_random, seed):
            i = max(j for j, st in enumerate(starts) if st <= k)
            sh = s["shards"][i]
            with open(root / sh["path"], "rb") as a, source.open(sh["path"]) as b:
                try:
                    same = (read_row(a, k - starts[i], dtype, L) == read_row(b, k - starts[i], dtype, L)).all()
                except ValueError:  # a short read: the sizes were checked, so a file changed meanwhile
                    same = False
                if not same:
                    problems.append(f"{uri(sh['path'])}: {split} sample {k} differs from the local shard")
            compared += 1
    return compared


def _compare_through_reader(open_reader, location, reader_kwargs, manifest, source: Location, cache: Path, n_random,
                            seed, problems) -> int:
    """The trainer's reader over the published revision and over the local mix yield the same samples."""
    import numpy as np

    compared = 0
    for split in manifest["splits"]:
        try:
            pub = open_reader(location, cache_dir=str(cache / "published" / split), shuffle_seed=seed, split=split,
                              **reader_kwargs)
            ref = open_reader(source.url, cache_dir=str(cache / "local" / split), shuffle_seed=seed, split=split,
                              **reader_kwargs_of(source))
        except Exception as e:  # noqa: BLE001 -- the reader's own error names the file and the number
            problems.append(f"{location}: the reader refused the {split} split: {e}")
            continue
        if len(pub) != len(ref) or pub.fingerprint != ref.fingerprint:
            problems.append(f"{location}: reader sees {len(pub)} {split} samples / fingerprint {pub.fingerprint}, "
                            f"local {len(ref)} / {ref.fingerprint}")
            continue
        for k in _sample_indices(len(pub), n_random, seed + 1):
            if not np.array_equal(pub.sample(k), ref.sample(k)):
                problems.append(f"{location}: reader {split} sample {k} differs from the local shards")
            compared += 1
    return compared
