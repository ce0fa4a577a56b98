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
  3. the `latest` pointer (a small JSON file at the target root) is written after it.

A publish killed before step 2 leaves files without a manifest: not a revision; a retry re-uses the
files already there (same size and sha256) and finishes. Publishing the same manifest again re-hashes
every object of the existing revision and re-uploads only what is missing or differs (a shard deleted
or damaged at the target), the card too, then points `latest`; an intact revision is left untouched.
A different manifest under an existing revision id is refused (RevisionConflict).
Every path taken from a manifest (local or remote) goes through `lib/manifest.safe_path`.
On the hub one `create_commit` is atomic on its own (blobs are pre-uploaded, the commit appears whole);
the commit is tagged `rev-<fp16>` so that a re-publish finds it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mix_assets.lib.manifest import (
    INTERPRETATION_KEY,
    LocalDir,
    UnsafePathError,
    manifest_problems,
    safe_path,
)
from mix_assets.lib.storage import atomic_path, sha256_file, split_s3_url

MANIFEST = "manifest.json"
README = "README.md"
LATEST = "latest"
REV_PREFIX = "rev-"
_CHUNK = 1 << 22


class PublishError(RuntimeError):
    """The mix cannot be published as it is; the message names the file and what is wrong."""


class RevisionConflict(PublishError):
    """A revision with this id already exists at the target with different content."""


# -- what is published -------------------------------------------------------------------------


def revision_id(fingerprint: str) -> str:
    """The immutable revision id of a manifest fingerprint (local and S3 targets; the hub tag)."""
    if len(fingerprint) < 16 or any(c not in "0123456789abcdef" for c in fingerprint):
        raise PublishError(f"manifest fingerprint {fingerprint!r} is not a lowercase hex sha256")
    return f"{REV_PREFIX}{fingerprint[:16]}"


def fingerprint_of(files: list[dict]) -> str:
    """The content fingerprint of the contract: sha256 over the concatenated per-file sha256 hex strings."""
    return hashlib.sha256("".join(f["sha256"] for f in files).encode("utf-8")).hexdigest()


def manifest_bytes(manifest: dict) -> bytes:
    return json.dumps(manifest, indent=2, sort_keys=False).encode("utf-8") + b"\n"


def dataset_card(manifest: dict) -> str:
    """A README.md dataset card, a pure function of the manifest (no time, no target)."""
    fp = manifest["fingerprint"]
    tok = manifest.get("tokenizer", {})
    pk = manifest.get("packing", {})
    splits = manifest.get("splits", {})
    lines = [
        "---",
        f"pretty_name: {manifest.get('name', 'mix')}",
        "tags:",
        "- pretraining",
        "- tokenized",
        "---",
        "",
        f"# {manifest.get('name', 'mix')}",
        "",
        "A tokenised pretraining mix built by `mix_assets`. Every number below is read from `manifest.json`,",
        "which lists each file with its size and sha256.",
        "",
        f"- revision: `{revision_id(fp)}`",
        f"- content fingerprint (sha256 over the ordered per-file sha256s): `{fp}`",
        (f"- interpretation sha256 (dtype, packing, tokenizer identity, split shard samples): "
         f"`{manifest.get(INTERPRETATION_KEY)}`"),
        f"- seed: {manifest.get('seed')}, config sha256: `{manifest.get('config_sha256')}`",
        f"- dtype: `{manifest.get('dtype')}` little-endian, raw arrays without header",
        (f"- packing: {pk.get('rule')}, seq_len {pk.get('seq_len')}, sample_len {pk.get('sample_len')}, "
         f"separator {pk.get('separator')!r}, shifted targets {pk.get('shifted_targets')}"),
        f"- tokenizer: {tok.get('kind')} {tok.get('repo_id') or ''} {tok.get('revision') or ''}".rstrip()
        + f", vocab size {tok.get('vocab_size')}",
        "",
        "## Splits",
        "",
        "| split | samples | tokens | shards | dropped tail tokens | seam rate | documents |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in splits.items():
        lines.append(
            f"| {name} | {s.get('samples')} | {s.get('tokens')} | {len(s.get('shards', []))} | "
            f"{s.get('dropped_tail_tokens')} | {s.get('seam_rate')} | {s.get('documents')} |"
        )
    lines += [
        "",
        "## Sources",
        "",
        "| source | train tokens | val tokens | budget tokens | epochs | unique documents |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, s in manifest.get("sources", {}).items():
        lines.append(
            f"| {name} | {s.get('train_tokens')} | {s.get('val_tokens')} | {s.get('budget_tokens')} | "
            f"{s.get('epochs')} | {s.get('unique_documents')} |"
        )
    lines += ["", "## Review files", ""]
    lines += [f"- `{k}`: `{v}`" for k, v in manifest.get("review", {}).items()]
    lines += [
        "",
        "## Reading it",
        "",
        "```python",
        "from mix_assets.reader import open_mix",
        'reader = open_mix("<this revision>", cache_dir="/tmp/mix-cache", shuffle_seed=0)  # reader.sample(k)',
        "```",
        "",
        "The reader downloads only the shards it needs and checks each shard's sha256 against the manifest.",
        "",
    ]
    return "\n".join(lines)


def published_paths(manifest: dict) -> list[str]:
    """Every path of a revision in upload order: listed files, the card, then the manifest."""
    return [f["path"] for f in manifest["files"]] + [README, MANIFEST]


def check_local_mix(manifest: dict, local_path: Callable[[str], str]) -> list[str]:
    """Problems with the local mix against its own manifest (before anything is uploaded)."""
    problems = []
    if manifest.get("format") != "mix_assets.manifest/1":
        problems.append(f"{MANIFEST}: format {manifest.get('format')!r} != 'mix_assets.manifest/1'")
    files = manifest.get("files") or []
    if not files:
        problems.append(f"{MANIFEST}: lists no files")
    if files and fingerprint_of(files) != manifest.get("fingerprint"):
        problems.append(f"{MANIFEST}: fingerprint {manifest.get('fingerprint')} != {fingerprint_of(files)} "
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
            lp = local_path(p)
        except FileNotFoundError:
            problems.append(f"{p}: listed in the manifest but missing")
            continue
        except UnsafePathError as e:
            problems.append(f"{p}: {e.problems[0]}")
            continue
        size = os.path.getsize(lp)
        if size != f["bytes"]:
            problems.append(f"{p}: {size} bytes, manifest says {f['bytes']}")
        elif sha256_file(lp) != f["sha256"]:
            problems.append(f"{p}: sha256 differs from the manifest")
    return problems


# -- targets -------------------------------------------------------------------------------------


class Target:
    """A place revisions live: `rev-<fp16>/<path>` objects plus a `latest` pointer."""

    url: str

    def read(self, key: str) -> bytes | None:
        """The object's bytes, or None when it does not exist."""
        raise NotImplementedError

    def stat(self, key: str) -> tuple[int, str | None] | None:
        """(size, recorded sha256 or None) of an existing object, else None."""
        raise NotImplementedError

    def digest(self, key: str) -> tuple[int, str] | None:
        """(size, sha256 recomputed from the object's bytes) of an existing object, else None."""
        raise NotImplementedError

    def put_file(self, key: str, local: str, sha256: str) -> None:
        raise NotImplementedError

    def put_bytes(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def create_if_absent(self, key: str, data: bytes) -> bool:
        """Write `key` only if it does not exist; False when it already did."""
        raise NotImplementedError

    def download(self, key: str, dest: str) -> None:
        """Copy the object to the local path `dest` (FileNotFoundError when absent)."""
        raise NotImplementedError

    def uri(self, key: str) -> str:
        return f"{self.url.rstrip('/')}/{key}"

    def location(self, revision: str) -> str:
        """What `mix_assets.reader.open_mix` is given to read `revision`."""
        return self.uri(revision)

    def reader_kwargs(self) -> dict:
        """Keyword arguments for `open_mix` so it reads with this target's access (and no more)."""
        return {}


class LocalTarget(Target):
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.url = str(self.root)

    def _p(self, key: str) -> Path:
        return safe_path(key, self.root)

    def read(self, key):
        try:
            return self._p(key).read_bytes()
        except FileNotFoundError:
            return None

    def stat(self, key):
        p = self._p(key)
        if not p.is_file():
            return None
        return p.stat().st_size, sha256_file(p)

    digest = stat  # stat already re-hashes the bytes

    def put_file(self, key, local, sha256):
        with atomic_path(self._p(key)) as tmp:
            shutil.copyfile(local, tmp)

    def put_bytes(self, key, data):
        with atomic_path(self._p(key)) as tmp:
            Path(tmp).write_bytes(data)

    def create_if_absent(self, key, data):
        dest = self._p(key)
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

    def download(self, key, dest):
        src = self._p(key)
        if not src.is_file():
            raise FileNotFoundError(self.uri(key))
        with atomic_path(dest) as tmp:
            shutil.copyfile(src, tmp)


def s3_client(endpoint_url: str | None = None, region: str | None = None,
              access_key: str | None = None, secret_key: str | None = None, anonymous: bool = False):
    """A boto3 S3 client; `anonymous` signs nothing (public-read buckets)."""
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    cfg = Config(s3={"addressing_style": "path"} if endpoint_url else {},
                 retries={"max_attempts": 5, "mode": "standard"},
                 signature_version=UNSIGNED if anonymous else None)
    kw = {}
    if access_key and not anonymous:
        kw = {"aws_access_key_id": access_key, "aws_secret_access_key": secret_key}
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=region or "us-east-1", config=cfg, **kw)


def _s3_missing(err) -> bool:
    code = str(getattr(err, "response", {}).get("Error", {}).get("Code", ""))
    return code in {"404", "NoSuchKey", "NotFound"}


class S3Target(Target):
    """`s3://bucket/prefix`; each object carries its sha256 as user metadata (used to resume)."""

    def __init__(self, url: str, client):
        self.url = url.rstrip("/")
        self.bucket, self.prefix = split_s3_url(url)
        self.client = client

    def _k(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def reader_kwargs(self) -> dict:
        return {"s3_client": self.client}

    def read(self, key):
        from botocore.exceptions import ClientError

        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._k(key))["Body"].read()
        except ClientError as e:
            if _s3_missing(e):
                return None
            raise

    def stat(self, key):
        from botocore.exceptions import ClientError

        try:
            h = self.client.head_object(Bucket=self.bucket, Key=self._k(key))
        except ClientError as e:
            if _s3_missing(e):
                return None
            raise
        return h["ContentLength"], h.get("Metadata", {}).get("sha256")

    def digest(self, key):
        from botocore.exceptions import ClientError

        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._k(key))["Body"]
        except ClientError as e:
            if _s3_missing(e):
                return None
            raise
        with contextlib.closing(body):
            h, n = hashlib.sha256(), 0
            while chunk := body.read(_CHUNK):
                h.update(chunk)
                n += len(chunk)
        return n, h.hexdigest()

    def put_file(self, key, local, sha256):
        self.client.upload_file(local, self.bucket, self._k(key), ExtraArgs={"Metadata": {"sha256": sha256}})

    def put_bytes(self, key, data):
        meta = {"sha256": hashlib.sha256(data).hexdigest()}
        self.client.put_object(Bucket=self.bucket, Key=self._k(key), Body=data, Metadata=meta)

    def create_if_absent(self, key, data):
        from botocore.exceptions import ClientError

        meta = {"sha256": hashlib.sha256(data).hexdigest()}
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._k(key), Body=data, Metadata=meta,
                                   IfNoneMatch="*")
            return True
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}:
                return False
            if code in {"NotImplemented", "501"}:  # a server without conditional PUT: check, then put
                if self.stat(key) is not None:
                    return False
                self.put_bytes(key, data)
                return True
            raise

    def download(self, key, dest):
        from botocore.exceptions import ClientError

        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        try:
            with atomic_path(dest) as tmp:
                self.client.download_file(self.bucket, self._k(key), tmp)
        except ClientError as e:
            if _s3_missing(e):
                raise FileNotFoundError(self.uri(key)) from None
            raise


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


def _resolver(mix: str | os.PathLike | Callable[[str], str]) -> Callable[[str], str]:
    if callable(mix):
        return mix

    def local(rel: str) -> str:
        p = safe_path(rel, mix)
        if not p.is_file():
            raise FileNotFoundError(str(Path(mix) / rel))
        return str(p)

    return local


def load_manifest(mix: str | os.PathLike | Callable[[str], str]) -> dict:
    path = _resolver(mix)(MANIFEST)
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise PublishError(f"{path}: not valid JSON ({e})") from None


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


def publish(mix: str | os.PathLike | Callable[[str], str], target: Target | HubTarget,
            *, log: Callable[[str], None] = lambda s: None) -> PublishResult:
    """Publish the mix directory (or a resolver of its relative paths) to `target`."""
    resolve = _resolver(mix)
    manifest = load_manifest(resolve)
    problems = check_local_mix(manifest, resolve)
    if problems:
        raise PublishError("the local mix does not match its manifest:\n  " + "\n  ".join(problems))
    if isinstance(target, HubTarget):
        return target.publish(manifest, resolve, log=log)
    rev = revision_id(manifest["fingerprint"])
    mbytes = manifest_bytes(manifest)
    card = dataset_card(manifest).encode("utf-8")
    total = sum(f["bytes"] for f in manifest["files"]) + len(card) + len(mbytes)
    n_files = len(manifest["files"]) + 2

    existing = target.read(f"{rev}/{MANIFEST}")
    if existing is not None:
        _same_revision(existing, manifest, target.uri(f"{rev}/{MANIFEST}"))
        up_files, up_bytes = _repair(target, rev, manifest, resolve, card, log)
        if up_files:
            log(f"{target.location(rev)}: repaired {up_files:,} missing or damaged object(s) ({up_bytes:,} bytes)")
        else:
            log(f"{target.location(rev)} already holds this content, every object verified; nothing uploaded")
        _point_latest(target, rev, manifest["fingerprint"])
        return PublishResult(target.url, rev, target.location(rev), manifest["fingerprint"], n_files, total,
                             up_files, up_bytes, created=False)

    up_files = up_bytes = 0
    for f in manifest["files"]:
        key = f"{rev}/{f['path']}"
        st = target.stat(key)
        if st is not None and st[0] == f["bytes"] and st[1] == f["sha256"]:
            continue  # left by an interrupted publish of this same revision
        target.put_file(key, resolve(f["path"]), f["sha256"])
        up_files += 1
        up_bytes += f["bytes"]
    target.put_bytes(f"{rev}/{README}", card)
    if not target.create_if_absent(f"{rev}/{MANIFEST}", mbytes):
        # someone published concurrently: accept only the identical manifest
        _same_revision(target.read(f"{rev}/{MANIFEST}") or b"", manifest, target.uri(f"{rev}/{MANIFEST}"))
    _point_latest(target, rev, manifest["fingerprint"])
    up_files, up_bytes = up_files + 2, up_bytes + len(card) + len(mbytes)  # the card and manifest too
    log(_published_line(target.location(rev), up_files, n_files, up_bytes, total))
    return PublishResult(target.url, rev, target.location(rev), manifest["fingerprint"], n_files, total,
                         up_files, up_bytes, created=True)


def _published_line(location: str, up_files: int, n_files: int, up_bytes: int, total: int) -> str:
    """The log line for a publish: the same numbers the asset's metadata shows."""
    return f"published {location}: {up_files:,} of {n_files:,} files uploaded ({up_bytes:,} of {total:,} bytes)"


def _repair(target: Target, rev: str, manifest: dict, resolve: Callable[[str], str], card: bytes,
            log: Callable[[str], None]) -> tuple[int, int]:
    """Re-hash every object of an existing revision; re-upload each one missing or differing, the card
    after the listed files (the manifest is already there and identical). (files, bytes) uploaded."""
    up_files = up_bytes = 0
    for f in manifest["files"]:
        key = f"{rev}/{f['path']}"
        if target.digest(key) == (f["bytes"], f["sha256"]):
            continue
        log(f"{target.uri(key)}: missing or differs from the manifest; uploading it again")
        target.put_file(key, resolve(f["path"]), f["sha256"])
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


class HubTarget:
    """`hf://datasets/org/name`: one commit per revision, tagged `rev-<fp16>`; the revision is the commit."""

    def __init__(self, url: str, api=None, token: str | bool | None = None):
        rest = url.removeprefix("hf://")
        if not rest.startswith("datasets/") or rest.count("/") != 2:
            raise PublishError(f"{url}: a hub publish URL looks like hf://datasets/<org>/<name>")
        self.url = url.rstrip("/")
        self.repo_id = rest.removeprefix("datasets/").strip("/")
        if api is None:
            from huggingface_hub import HfApi

            api = HfApi(token=token)
        self.api = api

    def location(self, revision: str) -> str:
        return f"{self.url}@{revision}"

    def reader_kwargs(self) -> dict:
        return {"hub_endpoint": self.api.endpoint}

    def uri(self, key: str, revision: str) -> str:
        return f"{self.url}@{revision}/{key}"

    def _download(self, key: str, revision: str, cache_dir: str | None = None) -> str | None:
        from huggingface_hub.errors import EntryNotFoundError, RevisionNotFoundError

        try:
            return self.api.hf_hub_download(self.repo_id, key, repo_type="dataset", revision=revision,
                                            cache_dir=cache_dir)
        except (EntryNotFoundError, RevisionNotFoundError):
            return None

    def tag_commit(self, tag: str) -> str | None:
        refs = self.api.list_repo_refs(self.repo_id, repo_type="dataset")
        return next((t.target_commit for t in refs.tags if t.name == tag), None)

    def download(self, key: str, revision: str, dest: str) -> None:
        with tempfile.TemporaryDirectory(prefix="hf-") as d:
            got = self._download(key, revision, cache_dir=d)
            if got is None:
                raise FileNotFoundError(self.uri(key, revision))
            with atomic_path(dest) as tmp:
                shutil.copyfile(got, tmp)

    def read(self, key: str, revision: str) -> bytes | None:
        with tempfile.TemporaryDirectory() as d:
            got = self._download(key, revision, cache_dir=d)
            return None if got is None else Path(got).read_bytes()

    def publish(self, manifest: dict, resolve: Callable[[str], str], log=lambda s: None) -> PublishResult:
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete

        fp = manifest["fingerprint"]
        tag = revision_id(fp)
        mbytes = manifest_bytes(manifest)
        card = dataset_card(manifest).encode("utf-8")
        total = sum(f["bytes"] for f in manifest["files"]) + len(card) + len(mbytes)
        n_files = len(manifest["files"]) + 2
        self.api.create_repo(self.repo_id, repo_type="dataset", exist_ok=True)

        commit = self.tag_commit(tag)
        if commit is not None:
            _same_revision(self.read(MANIFEST, commit) or b"", manifest, self.uri(MANIFEST, commit))
            log(f"{self.location(commit)} already holds this content (tag {tag}); nothing uploaded")
            return PublishResult(self.url, commit, self.location(commit), fp, n_files, total, 0, 0, False)

        head = self.api.repo_info(self.repo_id, repo_type="dataset", revision="main").sha
        head_manifest = self.read(MANIFEST, head) if head else None
        created = True
        if head_manifest is not None and json.loads(head_manifest) == manifest:
            commit, created = head, False  # committed by a publish that died before tagging
        else:
            wanted = set(published_paths(manifest))
            stale = [p for p in (self.api.list_repo_files(self.repo_id, repo_type="dataset", revision=head)
                                 if head else [])
                     if p not in wanted and p != ".gitattributes"]
            ops = [CommitOperationAdd(f["path"], resolve(f["path"])) for f in manifest["files"]]
            ops += [CommitOperationAdd(README, card), CommitOperationAdd(MANIFEST, mbytes)]
            ops += [CommitOperationDelete(p) for p in stale]  # the tree at the commit is exactly the revision
            info = self.api.create_commit(
                self.repo_id, ops, repo_type="dataset", revision="main", parent_commit=head,
                commit_message=f"Publish {tag}", commit_description=f"content fingerprint {fp}",
            )
            commit = info.oid
        self.api.create_tag(self.repo_id, tag=tag, revision=commit, repo_type="dataset", exist_ok=True)
        up = (n_files, total) if created else (0, 0)
        log(_published_line(f"{self.location(commit)} (tag {tag})", up[0], n_files, up[1], total))
        return PublishResult(self.url, commit, self.location(commit), fp, n_files, total, *up, created)


def make_target(url: str, *, s3_endpoint_url: str | None = None, s3_region: str | None = None,
                s3_client_=None, hf_api=None) -> Target | HubTarget:
    """The target a publish URL names (write access from the environment's credentials)."""
    if url.startswith("s3://"):
        return S3Target(url, s3_client_ or s3_client(s3_endpoint_url, s3_region))
    if url.startswith("hf://"):
        return HubTarget(url, api=hf_api)
    if "://" in url:
        raise PublishError(f"{url}: unsupported publish URL (use a local path, s3://bucket/prefix "
                           "or hf://datasets/org/name)")
    return LocalTarget(url)


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


def verify(target: Target | HubTarget, revision: str, local_mix: str | os.PathLike | Callable[[str], str],
           *, cache_dir: str | None = None, n_random: int = 8, seed: int = 0,
           open_reader: Callable[..., object] | None = None) -> Verification:
    """Read `revision` from `target` (read-only access) into an empty cache and compare it with the local mix.

    Downloads the manifest, re-hashes every listed file, recomputes the fingerprint, regenerates the
    card, reads the first, last and `n_random` random samples of each split from the downloaded
    shards and (when `open_reader` is given: `mix_assets.reader.open_mix`) through the trainer's reader,
    comparing each with the local shards.
    """
    t0 = time.monotonic()
    resolve = _resolver(local_mix)
    local = load_manifest(resolve)
    hub = isinstance(target, HubTarget)
    loc = target.location(revision)
    out = Verification(loc)

    def uri(key: str) -> str:
        return target.uri(key, revision) if hub else target.uri(f"{revision}/{key}")

    def fetch(key: str, dest: str) -> None:
        if hub:
            target.download(key, revision, dest)
        else:
            target.download(f"{revision}/{key}", dest)

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
        if not hub and revision != revision_id(remote.get("fingerprint", "")):
            out.problems.append(f"{uri(MANIFEST)}: revision id {revision} does not derive from its fingerprint")
        out.files_verified += 1
        out.bytes_verified += (root / MANIFEST).stat().st_size
        out.samples_total = sum(sh["samples"] for sp in remote["splits"].values() for sh in sp["shards"])

        for f in remote["files"]:
            dest = safe_path(f["path"], root)
            try:
                fetch(f["path"], str(dest))
            except FileNotFoundError:
                out.problems.append(f"{uri(f['path'])}: listed in the manifest but missing")
                continue
            except Exception as e:  # noqa: BLE001 -- reported as a problem naming the object
                out.problems.append(f"{uri(f['path'])}: cannot be read ({type(e).__name__}: {e})")
                continue
            size, digest = dest.stat().st_size, sha256_file(dest)
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
                                                                        review_counts=True)]
        if not out.problems:
            out.samples_compared += _compare_raw_samples(remote, root, resolve, n_random, seed, out.problems, uri)
        if not out.problems and open_reader is not None:
            out.reader_samples_compared = _compare_through_reader(
                open_reader, loc, target.reader_kwargs(), remote, resolve, Path(cache) / "reader", n_random, seed,
                out.problems)
            out.samples_compared += out.reader_samples_compared
    out.seconds = time.monotonic() - t0
    return out


def _compare_raw_samples(manifest, root: Path, resolve, n_random, seed, problems, uri) -> int:
    """Sample k of a split read from the downloaded shards == the same bytes of the local shards."""
    sample_bytes = manifest["packing"]["sample_len"] * (2 if manifest["dtype"] == "uint16" else 4)
    compared = 0
    for split, s in manifest["splits"].items():
        starts, acc = [], 0
        for sh in s["shards"]:
            starts.append(acc)
            acc += sh["samples"]
        for k in _sample_indices(acc, n_random, seed):
            i = max(j for j, st in enumerate(starts) if st <= k)
            sh = s["shards"][i]
            off = (k - starts[i]) * sample_bytes
            with open(root / sh["path"], "rb") as a, open(resolve(sh["path"]), "rb") as b:
                a.seek(off)
                b.seek(off)
                if a.read(sample_bytes) != b.read(sample_bytes):
                    problems.append(f"{uri(sh['path'])}: {split} sample {k} differs from the local shard")
            compared += 1
    return compared


def _compare_through_reader(open_reader, location, reader_kwargs, manifest, resolve, cache: Path, n_random,
                            seed, problems) -> int:
    """The trainer's reader over the published revision and over the local mix yield the same samples."""
    import numpy as np

    # The reader opens a whole folder; a resolver that fetches on demand (an S3 storage root) must
    # first have fetched every listed file into it.
    for f in manifest.get("files", []):
        resolve(f["path"])
    local_dir = str(Path(resolve(MANIFEST)).parent)
    compared = 0
    for split in manifest["splits"]:
        try:
            pub = open_reader(location, cache_dir=str(cache / "published" / split), shuffle_seed=seed, split=split,
                              **reader_kwargs)
            ref = open_reader(local_dir, cache_dir=str(cache / "local" / split), shuffle_seed=seed, split=split)
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
