"""The content-addressed object store under a storage root, and keyed records (pure; no Dagster).

    objects/<sha256[:2]>/<sha256>      a file's bytes, written once (atomically), never overwritten
    keyed/<asset>/<key>.json           {"outputs": {layout path: sha256}, "input_keys", "code_version",
                                        "created", "run_id", "dagster": the materialisation's metadata and
                                        check results (dagster serdes, opaque here),
                                        "uses": optional, what else the artifact was made with that gc
                                        must keep while the record stays (token_shards: its token-id
                                        cache key, {"token_cache": key}),
                                        "value": optional, a small JSON result the record itself holds
                                        (raw's measured bytes per token: no file to file)}
    keyed/checks/<asset>/<check>/<key>.json   a check's stored result on the artifact of `asset` whose key
                                        its input_keys name (stages/common.stored_check)

`stash` files an asset's just-written outputs under their sha256: on a local root a hard link to the file
the asset wrote (every write under a root is temp + rename, so the linked inode is never written again),
a copy when the link fails (another filesystem); on S3 a server-side copy. `restore` puts a keyed
record's outputs back at their working paths (temp name, then rename; S3: server-side copy), each blob's
bytes checked against its name first: a blob changed in the store is refused (`CorruptObject`), never
restored. gc (mix_assets/gc.py) removes keyed records nothing needs, then the blobs no record names.

A `storage` here may be a run's checkout (core/checkout.py): its working paths are under the checkout, the
blobs and keyed records under `storage.store`, the storage root every checkout shares.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from mix_assets.core import transport
from mix_assets.core.transport import IntegrityError

OBJECTS = "objects"
KEYED = "keyed"
CHECK_RECORDS = "checks"  # keyed/checks/<asset>/<check>/<key>.json: stored check results
FORMAT = "mix_assets.keyed/1"


class CorruptObject(IntegrityError):
    """A blob whose bytes no longer hash to its name (changed in the store): never restored."""


def object_key(sha256: str) -> str:
    return f"{OBJECTS}/{sha256[:2]}/{sha256}"


def keyed_key(asset: str, key: str) -> str:
    return f"{KEYED}/{asset}/{key}.json"


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _local_root(storage) -> Path:
    return Path(storage.root)


def _head(loc, key: str) -> Optional[dict]:
    """An S3 object's HEAD (metadata, ETag), or None when absent."""
    try:
        return loc.client.head_object(Bucket=loc.bucket, Key=loc.key(key))
    except Exception as e:  # noqa: BLE001 - botocore's ClientError; only "not found" means absent
        if transport.s3_missing(e):
            return None
        raise


def put_object(storage, path: str, sha256: str) -> bool:
    """File the working file `path` (whose sha256 the caller knows) as its blob; False if it was there."""
    okey = object_key(sha256)
    if storage.is_s3:
        loc, store = storage.location, storage.store.location
        if store.stat(okey) is not None:
            return False
        # the working object's recorded sha256 (what lineage trusts on S3) and its ETag pin the copied bytes
        head = _head(loc, path)
        version = head["ETag"] if head and head.get("Metadata", {}).get("sha256") == sha256 else None
        if not store.copy_from(loc, path, okey, sha256, version):  # no server-side copy here: download, upload
            local = storage.local_path(path)
            store.put_file(okey, local, sha256)
        return True
    dest = _local_root(storage.store) / okey
    if dest.exists():
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    src = _local_root(storage) / path
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        try:
            os.link(src, tmp)
        except OSError:  # another filesystem (or no links): a copy, checked
            shutil.copyfile(src, tmp)
        if transport.sha256_file(tmp) != sha256:  # the working file changed since it was recorded
            raise IntegrityError(f"{storage.uri(path)}: does not hash to its recorded {sha256[:12]}; not stored")
        os.replace(tmp, dest)  # same bytes whoever wins a race: an existing blob is equal
    finally:
        tmp.unlink(missing_ok=True)
    return True


def blob_problem(storage, sha256: str) -> Optional[str]:
    """Why the blob `sha256` cannot be restored (missing, or its bytes hash otherwise), or None."""
    okey = object_key(sha256)
    storage = storage.store
    got = storage.location.digest(okey)  # the bytes, re-hashed (not S3's recorded metadata)
    if got is None:
        return f"{storage.uri(okey)} is missing"
    if got[1] != sha256:
        return f"{storage.uri(okey)} hashes to {got[1][:12]}, not its name (changed in the object store)"
    return None


def restore_object(storage, sha256: str, path: str, verify: bool = True) -> None:
    """Put blob `sha256` at the working path `path` atomically, refusing a blob whose bytes changed
    (`verify=False`: the caller has just re-hashed it with `blob_problem`; a local link is not re-read)."""
    okey = object_key(sha256)
    store = storage.store
    if storage.is_s3:
        loc, sloc = storage.location, store.location
        head = None if verify else _head(sloc, okey)  # verify: hash the blob, then copy exactly those bytes
        try:
            if loc.copy_from(sloc, okey, path, sha256, head["ETag"] if head else None):
                return
        except IntegrityError as e:
            raise CorruptObject(str(e)) from None
        with tempfile.TemporaryDirectory(dir=storage.cache_dir) as d:  # no server-side copy: through here
            tmp = os.path.join(d, "blob")
            try:
                got = sloc.download(okey, tmp)
            except FileNotFoundError:
                raise CorruptObject(f"{store.uri(okey)} is missing") from None
            if got != sha256:
                raise CorruptObject(f"{store.uri(okey)} hashes to {got[:12]}, not its name (changed in the "
                                    "object store); not restored")
            loc.put_file(path, tmp, sha256)
        return
    src = _local_root(store) / okey
    with storage.writing(path) as tmp:
        os.unlink(tmp)  # atomic_path made it; the link takes its name
        try:
            os.link(src, tmp)
        except FileNotFoundError:
            raise CorruptObject(f"{store.uri(okey)} is missing") from None
        except OSError:
            shutil.copyfile(src, tmp)
        got = transport.sha256_file(tmp) if verify else sha256
        if got != sha256:
            raise CorruptObject(f"{store.uri(okey)} hashes to {got[:12]}, not its name (changed in the "
                                "object store); not restored")


def write_keyed(storage, asset: str, key: str, outputs: Mapping[str, str], *, input_keys: Mapping[str, str],
                code_version: Optional[str], run_id: str, dagster: Optional[str],
                uses: Optional[Mapping[str, str]] = None, value: Optional[dict] = None) -> dict:
    """Write `keyed/<asset>/<key>.json` (once: an existing record of the key is left as it is)."""
    rec = {"format": FORMAT, "asset": asset, "key": key, "outputs": dict(sorted(outputs.items())),
           "input_keys": dict(sorted(input_keys.items())), "code_version": code_version, "created": now(),
           "run_id": run_id, "dagster": dagster}
    if uses:
        rec["uses"] = dict(sorted(uses.items()))
    if value is not None:
        rec["value"] = value
    storage.store.location.create_if_absent(keyed_key(asset, key),
                                            json.dumps(rec, indent=1, sort_keys=True).encode())
    return rec


def read_keyed(storage, asset: str, key: str) -> Optional[dict]:
    storage = storage.store
    k = keyed_key(asset, key)
    try:
        rec = json.loads(storage.read_bytes(k))
    except FileNotFoundError:
        return None
    if rec.get("format") != FORMAT or rec.get("asset") != asset or rec.get("key") != key:
        raise ValueError(f"{storage.uri(k)}: not the keyed record of {asset} {key[:12]}")
    return rec


def keyed_records(storage, asset: str) -> list[dict]:
    """Every keyed record of `asset` in the store (unreadable ones left out), newest first."""
    store, out = storage.store, []
    for k in store.list(f"{KEYED}/{asset}"):
        if not k.endswith(".json") or "/" in k[len(f"{KEYED}/{asset}/"):]:
            continue  # keyed/checks/<asset>/... lives below keyed/ too
        try:
            rec = read_keyed(store, asset, k.rsplit("/", 1)[1][:-len(".json")])
        except (ValueError, FileNotFoundError):
            continue
        if rec is not None:
            out.append(rec)
    return sorted(out, key=lambda r: (r.get("created") or "", r["key"]), reverse=True)


def stash(storage, asset: str, key: str, outputs: Mapping[str, str], **record) -> dict:
    """File every output as a blob, then write the keyed record (last: a record names only stored blobs)."""
    for path, sha in outputs.items():
        put_object(storage, path, sha)
    return write_keyed(storage, asset, key, outputs, **record)
