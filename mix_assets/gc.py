"""Remove keyed artifacts nothing needs from a storage root's object store (core/objects.py); no Dagster needed.

    python -m mix_assets.gc CONFIG [--keep-days N] [--dry-run]

Keeps every keyed record (keyed/<asset>/<key>.json)
  * named by a current lineage record (lineage/*.json: the artifacts in the working paths now);
  * named by a publication: publish/published_revision.json's input keys (`artifacts`, the key of every
    artifact in the published revision's chain), and those of every earlier publication, whose records
    are filed as keyed/published_revision/<key>.json (never removed here; a publication made before
    artifact keys existed names none);
  * created within the last N days (default 7);
then removes the others, and every blob (objects/<sha[:2]>/<sha>) no remaining keyed record names (a
local blob modified within the N days is kept too: a build may have filed it before its keyed record).
`--dry-run` lists what would be removed, with sizes, and removes nothing. Local and s3:// roots alike.
Exit status 0; 2 when the config or the root cannot be read (message on stderr).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from dataclasses import dataclass, field

from mix_assets.config import load_spec
from mix_assets.core import layout, lineage, objects
from mix_assets.core.storage import Storage
from mix_assets.stages.publish.target import PUBLISHED_REVISION

EXIT_ERROR = 2
DEFAULT_KEEP_DAYS = 7.0


@dataclass
class Plan:
    """What gc keeps and removes (keys under the root, sizes in bytes)."""

    keep_records: dict[str, str] = field(default_factory=dict)  # keyed record -> why kept
    remove_records: dict[str, int] = field(default_factory=dict)
    remove_blobs: dict[str, int] = field(default_factory=dict)
    kept_blobs: int = 0

    @property
    def bytes(self) -> int:
        return sum(self.remove_records.values()) + sum(self.remove_blobs.values())


def _size(storage: Storage, key: str) -> int:
    st = storage.location.stat(key) if storage.is_s3 else None
    if st is not None:
        return int(st[0])
    try:
        return os.path.getsize(os.path.join(storage.root, key))
    except OSError:
        return 0


def _created(rec: dict) -> float:
    try:
        return dt.datetime.strptime(rec["created"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc).timestamp()
    except (KeyError, TypeError, ValueError):
        return time.time()  # unknown: as if new (kept for the window)


def _published_keys(storage: Storage, keyed: dict[str, dict]) -> dict[str, str]:
    """(asset/key) -> the revision needing it, from the current and every filed publication record."""
    records = []
    if storage.exists(layout.PUBLISHED):
        records.append(json.loads(storage.read_text(layout.PUBLISHED)))
    for rec in keyed.values():
        if rec.get("asset") == PUBLISHED_REVISION:
            sha = rec["outputs"].get(layout.PUBLISHED)
            if sha and storage.exists(objects.object_key(sha)):
                records.append(json.loads(storage.read_text(objects.object_key(sha))))
    out = {}
    for pub in records:
        for asset, key in ((pub.get("input_keys") or {}).get("artifacts") or {}).items():
            out[objects.keyed_key(asset, key)] = f"published {pub.get('revision', '?')}"
    return out


def plan(storage: Storage, keep_days: float = DEFAULT_KEEP_DAYS, now: float | None = None) -> Plan:
    """What `gc` removes from `storage` (nothing is removed here)."""
    now = time.time() if now is None else now
    horizon = now - keep_days * 86400
    keyed = {k: json.loads(storage.read_text(k)) for k in storage.list(objects.KEYED) if k.endswith(".json")}
    p = Plan()
    for rk in storage.list("lineage"):
        try:
            rec = json.loads(storage.read_text(rk))
        except (ValueError, FileNotFoundError):
            continue
        if rec.get("format") == lineage.FORMAT and rec.get("key"):
            p.keep_records[objects.keyed_key(rec["asset"], rec["key"])] = "current lineage record"
    for k, why in _published_keys(storage, keyed).items():
        p.keep_records.setdefault(k, why)
    for k, rec in keyed.items():
        if k in p.keep_records:
            continue
        if rec.get("asset") == PUBLISHED_REVISION:
            p.keep_records[k] = "a publication"
        elif _created(rec) >= horizon:
            p.keep_records[k] = f"created within {keep_days:g} days"
        else:
            p.remove_records[k] = _size(storage, k)
    needed = {sha for k, rec in keyed.items() if k not in p.remove_records for sha in rec["outputs"].values()}
    for ok in storage.list(objects.OBJECTS):
        sha = ok.rsplit("/", 1)[-1]
        if sha in needed:
            p.kept_blobs += 1
            continue
        if not storage.is_s3:
            try:
                if os.path.getmtime(os.path.join(storage.root, ok)) >= horizon:
                    p.kept_blobs += 1
                    continue
            except OSError:
                continue
        p.remove_blobs[ok] = _size(storage, ok)
    return p


def apply(storage: Storage, p: Plan) -> None:
    """Remove the records first, then the blobs (a blob is never removed while a kept record names it)."""
    for k in p.remove_records:
        storage.delete(k)
    for k in p.remove_blobs:
        storage.delete(k)


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mix_assets.gc", description=__doc__.split("\n\n")[0])
    ap.add_argument("config", help="the mix config (its storage root is collected)")
    ap.add_argument("--keep-days", type=float, default=DEFAULT_KEEP_DAYS,
                    help=f"keep keyed artifacts created within this many days (default {DEFAULT_KEEP_DAYS:g})")
    ap.add_argument("--dry-run", action="store_true", help="list what would be removed, with sizes; remove nothing")
    a = ap.parse_args(argv)
    if a.keep_days < 0:
        ap.error("--keep-days must be >= 0")
    try:
        spec = load_spec(a.config)
        st = spec.storage
        storage = Storage(root=spec.resolve(st.root), s3_endpoint_url=st.s3_endpoint_url,
                          cache_dir=spec.resolve(st.cache_dir))
        p = plan(storage, a.keep_days)
    except (OSError, ValueError) as e:
        print(f"gc: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_ERROR
    verb = "would remove" if a.dry_run else "removing"
    for k, n in sorted(p.remove_records.items()):
        print(f"{verb} {k} ({_mb(n)})")
    for k, n in sorted(p.remove_blobs.items()):
        print(f"{verb} {k} ({_mb(n)})")
    if not a.dry_run:
        apply(storage, p)
    print(f"{'would remove' if a.dry_run else 'removed'} {len(p.remove_records)} keyed record(s) and "
          f"{len(p.remove_blobs)} blob(s), {_mb(p.bytes)}; kept {len(p.keep_records)} keyed record(s) and "
          f"{p.kept_blobs} blob(s) in {storage.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
