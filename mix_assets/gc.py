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
A keyed check result (keyed/checks/<asset>/<check>/<key>.json, stages/common.stored_check) is kept while
the keyed record of the artifact it checked is kept (or within the N days).

Beside the object store, the caches other stages keep under the root:
  * chunk parts (parts/<stage>/<key>.arrow, core/chunks.py): a resume aid only, left by a killed map stage
    until a run with the same key resumes from them; a part older than N days is removed by age alone
    (nothing records parts, and a part removed is only recomputed if a resume ever needs it); so is a
    partitioned reduce's scratch (scratch/<stage>/<run>/..., stages/dedup/partitioned.py), which a reduce
    deletes as it ends and only a killed one leaves behind;
  * the token-id cache (tokens/cache/<cache key>/..., stages/tokens/idcache.py): a cache key's folder is
    kept when it is the current one (the tokenizer file now at mix/tokenizer/ under the current encode
    code), when a kept keyed record of token_shards names it (`uses`: what that build, current or
    published, encoded with), or when a part of it was written within the N days; other keys go whole;
  * per-source files at fixed paths (filters/decisions/, dedup/signatures/, audit/hits/, audit/text_keys/ and
    tokens/reference_ids/<source>.parquet):
    overwritten by every build of their source, so only a source no longer in the config leaves one
    behind; removed when no current lineage record lists it and it is older than N days;
  * dedup_keys' verified pairs (dedup/pairs/<key>.parquet, stages/dedup/pairs.py): one file per pair of
    source identities, never replaced, so every changed source leaves the files of its old identity
    behind. A file is kept when its key is one the signature files now in the root give (what the next
    reduce looks up) or one a kept dedup_keys keyed record's signature blobs give (what a reduce after
    restoring that record would look up), or when it was written within the N days; the others go (so the
    last reduce's pairs keyed by text, dedup/pairs/by-text-<code>-<shingle>.parquet, go once older). A
    pairs file is only a cache (a reduce without it computes the same bytes): no revision needs one;
  * stored charts (console/charts/<key>.md, console/metadata.stored_chart): not collected (a few KB per
    distinct chart parameters);
  * temporary files of killed writes (local roots: `.<name>.<random>.tmp` beside their target, from
    core/transport.atomic_path and objects.put_object), older than the N days (a live write's is new);
  * run checkouts (checkouts/<name>/, core/checkout.py: where a run worked while another held the root):
    a checkout goes whole when no live claim is on it (locks/checkouts/<name>/: a run holds it), none of
    its files was written within the N days, and every artifact of a publication its lineage records
    name is in the store (keyed record and blobs: a checkout holding the only copy of published bytes is
    kept). Its lineage records then no longer keep keyed records current. `apply` claims the checkout
    itself before removing it (checkout.hold), so a run claiming it meanwhile works elsewhere, and skips
    it (and the keyed records and blobs its lineage records name) when a run holds it or wrote in it by
    then; a checkout is only a working copy of what the store holds (the next run there restores its
    inputs by key);
  * claim leftovers: claims whose heartbeat is older than their TTL (a killed run's; the next claimant
    would remove them too) and the run markers locks/checkouts/.runs/<run id> (the checkout a run's
    steps worked in last) older than the N days, of runs holding no live claim.
`--dry-run` lists what would be removed, with sizes, grouped by kind, and removes nothing. Local and s3://
roots alike.
Exit status 0; 2 when the config or the root cannot be read (message on stderr).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field

import pyarrow.parquet as pq
from tokenizers import Tokenizer

from mix_assets.config import load_spec
from mix_assets.format.shards import dtype_for_vocab
from mix_assets.stages.dedup import pairs as pairs_lib
from mix_assets.stages.tokens import idcache
from mix_assets.core import checkout, layout, lineage, objects, runlock
from mix_assets.core.storage import Storage
from mix_assets.stages.publish.target import PUBLISHED_REVISION

EXIT_ERROR = 2
DEFAULT_KEEP_DAYS = 7.0
CHUNK_PARTS = layout.CHUNK_PART.split("/{stage}")[0]
REDUCE_SCRATCH = layout.REDUCE_SCRATCH.split("/{stage}")[0]
PER_SOURCE = (layout.FILTER_DECISIONS, layout.DEDUP_SIGNATURES, layout.CONTAMINATION_HITS,
              layout.CONTAMINATION_TEXT_KEYS, layout.TOKEN_IDS_REFERENCE)
DEDUP_PAIRS = layout.DEDUP_PAIRS.split("/{key}")[0]


@dataclass
class Plan:
    """What gc keeps and removes (keys under the root, sizes in bytes)."""

    keep_records: dict[str, str] = field(default_factory=dict)  # keyed record -> why kept
    remove_records: dict[str, int] = field(default_factory=dict)
    remove_blobs: dict[str, int] = field(default_factory=dict)
    kept_blobs: int = 0
    # the other caches (see the module docstring): kind -> {key or folder: bytes}
    remove_parts: dict[str, int] = field(default_factory=dict)
    remove_token_cache: dict[str, int] = field(default_factory=dict)  # tokens/cache/<key> -> bytes of its parts
    remove_per_source: dict[str, int] = field(default_factory=dict)
    remove_pairs: dict[str, int] = field(default_factory=dict)  # dedup/pairs/<key>.parquet -> bytes
    remove_temp: dict[str, int] = field(default_factory=dict)  # a killed write's temporary file -> bytes
    keep_pairs: dict[str, str] = field(default_factory=dict)  # dedup/pairs/<key>.parquet -> why kept
    keep_token_cache: dict[str, str] = field(default_factory=dict)  # cache key -> why kept
    remove_checkouts: dict[str, int] = field(default_factory=dict)  # checkouts/<name> -> bytes of its files
    remove_claims: dict[str, int] = field(default_factory=dict)  # dead claims and old run markers -> bytes
    keep_checkouts: dict[str, str] = field(default_factory=dict)  # checkouts/<name> -> why kept
    horizon: float = 0.0  # files written since are kept
    keep_days: float = DEFAULT_KEEP_DAYS

    def groups(self) -> dict[str, dict[str, int]]:
        """What is removed, by kind (the --dry-run listing's sections)."""
        return {"keyed records": self.remove_records, "blobs": self.remove_blobs,
                "chunk parts": self.remove_parts, "token-id cache keys": self.remove_token_cache,
                "per-source files of removed sources": self.remove_per_source,
                "dedup pairs files": self.remove_pairs, "temporary files of killed writes": self.remove_temp,
                "run checkouts": self.remove_checkouts, "dead claims and old run markers": self.remove_claims}

    @property
    def bytes(self) -> int:
        return sum(n for g in self.groups().values() for n in g.values())


def _size(storage: Storage, key: str) -> int:
    st = storage.location.stat(key) if storage.is_s3 else None
    if st is not None:
        return int(st[0])
    try:
        return os.path.getsize(os.path.join(storage.root, key))
    except OSError:
        return 0


def _mtime(storage: Storage, key: str) -> float:
    """When `key` was last written (now when unknown: as if new)."""
    if storage.is_s3:
        head = objects._head(storage.location, key)
        return head["LastModified"].timestamp() if head and head.get("LastModified") else time.time()
    try:
        return os.path.getmtime(os.path.join(storage.root, key))
    except OSError:
        return time.time()


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


def plan(storage: Storage, keep_days: float = DEFAULT_KEEP_DAYS, now: float | None = None,
         sources: list[str] | None = None) -> Plan:
    """What `gc` removes from `storage` (nothing is removed here); `sources`: the config's source names
    (per-source files of other sources are collected; None: not judged)."""
    now = time.time() if now is None else now
    horizon = now - keep_days * 86400
    keyed = {k: json.loads(storage.read_text(k)) for k in storage.list(objects.KEYED) if k.endswith(".json")}
    p = Plan(horizon=horizon, keep_days=keep_days)
    published = _published_keys(storage, keyed)
    _plan_checkouts(storage, p, published, keyed)
    for rk in storage.list("lineage") + _checkout_lineage(storage, p):
        try:
            rec = json.loads(storage.read_text(rk))
        except (ValueError, FileNotFoundError):
            continue
        if rec.get("format") == lineage.FORMAT and rec.get("key"):
            p.keep_records[objects.keyed_key(rec["asset"], rec["key"])] = "current lineage record"
    for k, why in published.items():
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
    # a stored check result lives as long as the artifact it checked (or the N days)
    for k, rec in keyed.items():
        if not rec.get("asset", "").startswith(objects.CHECK_RECORDS + "/") or k not in p.remove_records:
            continue
        checked = [objects.keyed_key(a, key) for a, key in (rec.get("input_keys") or {}).items()]
        why = next((p.keep_records[c] for c in checked if c in p.keep_records), None)
        if why:
            del p.remove_records[k]
            p.keep_records[k] = f"checked artifact kept ({why})"
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
    _plan_parts(storage, p, horizon)
    _plan_token_cache(storage, p, horizon, keep_days, {k: r for k, r in keyed.items() if k not in p.remove_records})
    _plan_per_source(storage, p, horizon, sources)
    _plan_pairs(storage, p, horizon, keep_days, {k: r for k, r in keyed.items() if k not in p.remove_records})
    _plan_temp(storage, p, horizon)
    return p


def _checkout_lineage(storage: Storage, p: Plan) -> list[str]:
    """The lineage records of the checkouts gc keeps (core/checkout.py): a run's checkout names artifacts as
    the root does."""
    return [k for k in storage.list(checkout.CHECKOUTS) if k.split("/")[2:3] == ["lineage"]
            and "/".join(k.split("/")[:2]) not in p.remove_checkouts]


def _checkout_in_use(storage: Storage, name: str, p: Plan, but: str | None = None) -> str | None:
    """Why checkout `name` is in use (None: it is not): a live claim (other than run `but`'s), a file written
    within the N days."""
    live = [b for b in checkout.live_claims(storage, name) if b.get("run_id") != but]  # live now, whatever the horizon
    if live:
        return "held by run " + ", ".join(sorted({str(b.get("run_id")) for b in live}))
    for k in storage.list(checkout.prefix(name)):
        if _mtime(storage, k) >= p.horizon:
            return f"written within {p.keep_days:g} days ({k})"
    return None


def _checkout_holds_published(storage: Storage, name: str, published: dict[str, str], keyed: dict[str, dict]
                              ) -> str | None:
    """Why checkout `name` holds what a publication needs and the store lacks (None: nothing)."""
    for k in storage.list(f"{checkout.prefix(name)}/lineage"):
        try:
            rec = json.loads(storage.read_text(k))
        except (ValueError, FileNotFoundError, UnicodeDecodeError):
            continue
        if not isinstance(rec, dict):
            continue
        kk = objects.keyed_key(str(rec.get("asset")), str(rec.get("key")))
        if kk not in published:
            continue
        stored = keyed.get(kk)
        missing = ["keyed record"] if stored is None else [
            path for path, sha in sorted(stored["outputs"].items()) if not storage.exists(objects.object_key(sha))]
        if missing:
            return f"names {rec.get('asset')} of {published[kk]}, whose {missing[0]} is not in the store"
    return None


def _plan_checkouts(storage: Storage, p: Plan, published: dict[str, str], keyed: dict[str, dict]) -> None:
    """Run checkouts no live run holds, untouched for N days, holding nothing only they have; dead claims;
    old run markers (see the module docstring)."""
    now = time.time()
    names = {k.split("/")[1] for k in storage.list(checkout.CHECKOUTS) if k.count("/") >= 2}
    for name in sorted(names):
        folder = checkout.prefix(name)
        why = _checkout_in_use(storage, name, p) or _checkout_holds_published(storage, name, published, keyed)
        if why:
            p.keep_checkouts[folder] = why
        else:
            p.remove_checkouts[folder] = sum(_size(storage, k) for k in storage.list(folder))
    claims = storage.list(checkout.CLAIMS)
    live_runs = set()
    for k in claims:
        parts = k[len(checkout.CLAIMS) + 1:].split("/")
        if len(parts) != 2 or parts[0] == ".runs" or not k.endswith(".json"):
            continue
        try:
            body = json.loads(storage.read_text(k))
        except (ValueError, FileNotFoundError, UnicodeDecodeError):
            continue  # released meanwhile, or half a write: left to the claimants
        if not isinstance(body, dict):
            continue
        if runlock.is_stale(body, now):
            p.remove_claims[k] = _size(storage, k)
        else:
            live_runs.add(str(body.get("run_id")))
    runs = f"{checkout.CLAIMS}/.runs/"
    for k in claims:
        if k.startswith(runs) and k[len(runs):] not in live_runs and _mtime(storage, k) < p.horizon:
            p.remove_claims[k] = _size(storage, k)


def _plan_parts(storage: Storage, p: Plan, horizon: float) -> None:
    """Chunk parts and a killed reduce's scratch older than the horizon (by age alone, see the docstring)."""
    for k in storage.list(CHUNK_PARTS):
        if k.endswith(".arrow") and _mtime(storage, k) < horizon:
            p.remove_parts[k] = _size(storage, k)
    for k in storage.list(REDUCE_SCRATCH):
        if _mtime(storage, k) < horizon:
            p.remove_parts[k] = _size(storage, k)


def current_token_cache_key(storage: Storage) -> str | None:
    """The token-id cache key the tokenizer file now in the root gives under the current encode code
    (what token_shards would use next), None without a tokenizer file."""
    if not storage.exists(layout.TOKENIZER_FILE):
        return None
    tok = Tokenizer.from_file(storage.local_path(layout.TOKENIZER_FILE))
    dtype = dtype_for_vocab(tok.get_vocab_size(with_added_tokens=True))
    return idcache.TokenCache(storage, storage.sha256(layout.TOKENIZER_FILE), dtype).key


def _plan_token_cache(storage: Storage, p: Plan, horizon: float, keep_days: float, kept: dict[str, dict]) -> None:
    """Token-id cache keys neither current, nor named by a kept keyed record, nor written within the N days."""
    files = storage.list(layout.TOKEN_CACHE_DIR)
    if not files:
        return
    by_key: dict[str, list[str]] = {}
    for k in files:
        by_key.setdefault(k[len(layout.TOKEN_CACHE_DIR) + 1:].split("/", 1)[0], []).append(k)
    try:
        current = current_token_cache_key(storage)
    except Exception:  # noqa: BLE001 - an unreadable tokenizer: no key is current, the others still decide
        current = None
    for rk, rec in sorted(kept.items()):
        used = (rec.get("uses") or {}).get("token_cache")
        if used:
            p.keep_token_cache.setdefault(used, f"used by {rk}")
    if current:
        p.keep_token_cache[current] = "the current tokenizer's key"
    for key, keys_ in sorted(by_key.items()):
        if key in p.keep_token_cache:
            continue
        if max(_mtime(storage, k) for k in keys_) >= horizon:
            p.keep_token_cache[key] = f"written within {keep_days:g} days"
            continue
        p.remove_token_cache[f"{layout.TOKEN_CACHE_DIR}/{key}"] = sum(_size(storage, k) for k in keys_)


def _plan_per_source(storage: Storage, p: Plan, horizon: float, sources: list[str] | None) -> None:
    """Per-source files of sources no longer in the config (`sources`; None: not judged), older than the
    horizon and listed by no current lineage record."""
    if sources is None:
        return
    listed = set()
    for rk in storage.list("lineage") + _checkout_lineage(storage, p):
        try:
            listed |= set(json.loads(storage.read_text(rk)).get("outputs") or {})
        except (ValueError, FileNotFoundError):
            continue
    for pattern in PER_SOURCE:
        folder, tail = pattern.split("{source}")
        for k in storage.list(folder.rstrip("/")):
            name = k[len(folder):]
            if "/" in name or not name.endswith(tail):
                continue
            if name[: -len(tail)] in sources or k in listed or _mtime(storage, k) >= horizon:
                continue
            p.remove_per_source[k] = _size(storage, k)


def _pair_keys(storage: Storage, signatures: dict[str, str]) -> set[str]:
    """The dedup/pairs keys a reduce over these signature files ({source: key under the root}) looks up:
    every pair of the sources (names sorted; a source with itself), as stages/dedup/pairs.PairStore keys them."""
    ids = []
    for name in sorted(signatures):
        src = storage.source(signatures[name])
        try:
            rows = pq.ParquetFile(src).metadata.num_rows
            ident = pairs_lib.source_identity(storage, name, signatures[name], rows)
        finally:
            if hasattr(src, "close"):
                src.close()
        if ident is not None:
            ids.append(ident)
    return {pairs_lib.pair_key(a, b, a["signatures"]["shingle"])
            for i, a in enumerate(ids) for b in ids[i:] if a["signatures"].get("shingle") == b["signatures"].get("shingle")}


def _plan_pairs(storage: Storage, p: Plan, horizon: float, keep_days: float, kept: dict[str, dict]) -> None:
    """dedup/pairs files whose key neither the current signature files nor a kept dedup_keys record's
    signature blobs give, older than the horizon (see the module docstring)."""
    files = [k for k in storage.list(DEDUP_PAIRS) if k.endswith(".parquet")]
    if not files:
        return
    sig_folder, tail = layout.DEDUP_SIGNATURES.split("{source}")
    current = {k[len(sig_folder):-len(tail)]: k for k in storage.list(sig_folder.rstrip("/"))
               if k.endswith(tail) and "/" not in k[len(sig_folder):]}
    wanted: dict[str, str] = {}
    for k in _pair_keys(storage, current):
        wanted.setdefault(k, "the current signature files' pairs")
    for rk, rec in sorted(kept.items()):
        if rec.get("asset") != "dedup_keys":
            continue
        sigs = {path[len(sig_folder):-len(tail)]: objects.object_key(sha) for path, sha in rec["outputs"].items()
                if path.startswith(sig_folder) and path.endswith(tail)}
        if not all(storage.exists(b) for b in sigs.values()):
            continue
        for k in _pair_keys(storage, sigs):
            wanted.setdefault(k, f"the pairs of {rk}")
    for k in files:
        if k in wanted:
            p.keep_pairs[k] = wanted[k]
        elif _mtime(storage, k) >= horizon:
            p.keep_pairs[k] = f"written within {keep_days:g} days"
        else:
            p.remove_pairs[k] = _size(storage, k)


def _plan_temp(storage: Storage, p: Plan, horizon: float) -> None:
    """A local root's temporary files (`.<name>.<random>.tmp`) older than the horizon: what a write killed
    between its temp file and the rename leaves (storage lists hide them)."""
    if storage.is_s3:
        return  # an S3 write is one upload: nothing half-written stays under a key
    root = str(storage.root)
    for d, _dirs, names in os.walk(root):
        for n in names:
            if not (n.startswith(".") and n.endswith(".tmp")):
                continue
            full = os.path.join(d, n)
            try:
                st = os.stat(full)
            except OSError:
                continue
            if st.st_mtime < horizon:
                p.remove_temp[os.path.relpath(full, root).replace(os.sep, "/")] = st.st_size


def _keep_named_by(storage: Storage, p: Plan, folder: str) -> None:
    """A checkout kept after all (a run took it since the plan): the keyed records its lineage records name, and
    their blobs, are kept too, as if it had been kept in the plan."""
    for rk in storage.list(f"{folder}/lineage"):
        try:
            rec = json.loads(storage.read_text(rk))
            kk = objects.keyed_key(rec["asset"], rec["key"])
        except (ValueError, FileNotFoundError, UnicodeDecodeError, KeyError, TypeError):
            continue
        if p.remove_records.pop(kk, None) is None:
            continue
        p.keep_records[kk] = f"current lineage record in {folder}"
        try:
            shas = json.loads(storage.read_text(kk))["outputs"].values()
        except (ValueError, FileNotFoundError, KeyError):
            continue
        for sha in shas:
            p.remove_blobs.pop(objects.object_key(sha), None)


def apply(storage: Storage, p: Plan, log=print) -> None:
    """Remove the checkouts first (each held by a claim of gc's own meanwhile, and skipped when in use by
    then), then the records, then the blobs (a blob is never removed while a kept record names it)."""
    for folder in p.remove_checkouts:
        name = folder.split("/", 1)[1]
        gc_run = f"gc-{uuid.uuid4().hex[:12]}"
        held = checkout.hold(storage, name, gc_run)
        why = "claimed by a run since the plan" if held is None else _checkout_in_use(storage, name, p, but=gc_run)
        try:
            if why:
                log(f"  kept {folder}: {why}")
                _keep_named_by(storage, p, folder)
                continue
            storage.delete_prefix(folder)
        finally:
            if held is not None:
                held.release()
    for k in p.remove_records:
        storage.delete(k)
    for k in p.remove_blobs:
        storage.delete(k)
    for k in [*p.remove_parts, *p.remove_per_source, *p.remove_pairs]:
        storage.delete(k)
    for k in p.remove_claims:
        if k.endswith(".json"):  # a claim judged dead: judged again (a paused process may have beaten since)
            try:
                body = json.loads(storage.read_text(k))
            except (ValueError, FileNotFoundError, UnicodeDecodeError):
                continue
            if isinstance(body, dict) and not runlock.is_stale(body):
                continue
        storage.delete(k)
    for k in p.remove_temp:  # hidden from storage's keys: removed by path, under the root only
        try:
            os.unlink(os.path.join(str(storage.root), k))
        except FileNotFoundError:
            pass
    for folder in p.remove_token_cache:
        storage.delete_prefix(folder + "/")


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
        p = plan(storage, a.keep_days, sources=[x.name for x in spec.sources])
    except (OSError, ValueError) as e:
        print(f"gc: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_ERROR
    verb = "would remove" if a.dry_run else "removing"
    for kind, group in p.groups().items():
        if group:
            print(f"{kind}: {len(group)}, {_mb(sum(group.values()))}")
        for k, n in sorted(group.items()):
            print(f"  {verb} {k} ({_mb(n)})")
    for folder, why in sorted(p.keep_checkouts.items()):
        print(f"  keeping {folder}: {why}")
    if not a.dry_run:
        apply(storage, p)
    print(f"{'would remove' if a.dry_run else 'removed'} {len(p.remove_records)} keyed record(s), "
          f"{len(p.remove_blobs)} blob(s), {len(p.remove_parts)} chunk part(s), {len(p.remove_token_cache)} "
          f"token-id cache key(s), {len(p.remove_per_source)} per-source file(s), {len(p.remove_pairs)} dedup pairs "
          f"file(s), {len(p.remove_temp)} temporary file(s), {len(p.remove_checkouts)} run checkout(s), "
          f"{len(p.remove_claims)} dead claim(s) or run marker(s): {_mb(p.bytes)}; kept {len(p.keep_records)} keyed "
          f"record(s), {p.kept_blobs} blob(s), {len(p.keep_token_cache)} token-id cache key(s), "
          f"{len(p.keep_pairs)} dedup pairs file(s), {len(p.keep_checkouts)} run checkout(s) in {storage.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
