"""The trainer's reader: sample k of a published mix as a pure function of (fingerprint, shuffle_seed, k).

    from mix_assets.reader import open_mix
    r = open_mix("build/published/mix", cache_dir="/scratch/mixcache", shuffle_seed=1234)
    x = r.batch(step, batch_size)          # (batch_size, sample_len) tokens; advances the cursor
    ckpt["data"] = r.state_dict()          # ... later, in a new process:
    r.load_state_dict(ckpt["data"])        # raises ResumeMismatchError on any other dataset/permutation

Locations: a local mix directory; `s3://bucket/prefix` (boto3; endpoint from `s3_endpoint_url=` or
AWS_ENDPOINT_URL[_S3]; unsigned requests when `anonymous=True`, or when no credentials are configured);
`hf://datasets/org/name@revision[/subdir]` (huggingface_hub `hf_hub_download`, so HF_HUB_OFFLINE and a
pre-populated cache work; `hub_endpoint=` or HF_ENDPOINT for mirrors). Remote locations are those of
`core/transport.py` (S3Location, HubLocation), shared with the build's storage and the publish targets.

Fetching: manifest.json is read and checked (structure, totals, fingerprint) at open; a shard is fetched
only when a requested sample lives in it, and its size and sha256 are verified when it arrives (once per
reader for files found already cached or local). Local shards are read in place. Remote files live in
`cache_dir/objects/<sha256[:2]>/<sha256>`, which any number of processes may share (fcntl locks, see
_SharedCache): `cache_bytes` bounds the whole directory, not one process's part, and it never goes over
(a reader that finds no room beside the files others hold, or no space on the cache's disk, reads that
shard into its own memory instead); a file a reader has open or mapped is never removed; a file is
downloaded by one process at a time. Shards
in the cache or local are read through `numpy.memmap`. `prefetch_bytes=P` starts a thread that holds up to
P bytes of the shards the next reads need (`prefetch`; batch/next_batch call it), see _Prefetcher.

Order: train sample k is storage sample perm_e[k mod N] with e = k // N (N = len(r), samples per pass).
Scheme "global" (default): perm_e is the argsort of splitmix64(i XOR base(shuffle_seed, e)) over i < N, a
bijection, so no ties and nothing depends on numpy's RNG algorithms. Scheme "shard_window"
(`shuffle_window=K`): shards in a seeded order, cut into windows of K shards, samples shuffled within each
window (shard_window_permutation), so a batch touches a bounded number of shards.
`shuffle_perm_sha` = sha256 of perm_0 as little-endian uint64.
Past one pass: by default (`epochs=1`) reading sample N raises `EndOfMix` (iteration stops); with
`epochs=E` (None = unbounded) epoch e uses perm_e, and the state records `epoch` and `epoch_perm_sha`.
The validation reader (`split="val"`, or `r.validation_reader()`) reads storage order unless asked to
shuffle, one pass.

State: `state_dict()` = {seq_len, samples_consumed, shuffle_seed, shuffle_perm_sha, dataset_files_sha,
step, tokens_consumed} + format, split, sample_len, num_samples, shuffle, shuffle_scheme, shuffle_window,
epochs, epoch, epoch_perm_sha, interpretation_sha256 (the manifest's hash of how the bytes are read).
Format /2; a /1 state (before shuffle schemes) is read as the global scheme.
tokens_consumed = samples_consumed x sample_len (tokens read from the mix); step counts batches (each of
at least one sample; iterating consumes samples without steps), so step <= samples_consumed; epoch =
samples_consumed // num_samples and epoch_perm_sha is that epoch's permutation. `load_state_dict` requires
exactly these fields, each of its type (an int is never a bool; numpy integers count as ints), checks
those relations, and recomputes and compares the rest (the state's `epochs` may differ from the reader's:
resume with more passes). Any problem raises ResumeMismatchError naming the field. Nothing is re-shuffled.

Jobs of several ranks and workers: `r.plan(global_batch, rank, world_size, steps)` (a StepPlan) says which
positions each rank and worker reads at each global step, and `r.state_at(samples_consumed, step)` is the
job's state at a step boundary; mix_assets/reader/torch_data.py wraps both for torch (docs/reader.md).

Document boundaries: on a revision built with packing.doc_index, `r.doc_starts(k)` gives the offsets
inside sample k where a document starts and `r.segment_ids(k)` a per-token document number (for
intra-document attention masks); without the index both raise NoDocIndexError.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import errno
import hashlib
import io
import json
import logging
import fcntl
import os
import shutil
import tempfile
import threading
import weakref
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from mix_assets.format.manifest import (
    DTYPES,
    INTERPRETATION_KEY,
    MANIFEST_NAME,
    ManifestError,
    check_manifest,
    interpretation_problems,
    safe_path,
    sha256_stream,
)
from mix_assets.format import docindex
from mix_assets.core.transport import HubLocation, Location, S3Location, s3_client, split_s3_url

log = logging.getLogger("mix_assets.reader")
# Writing into the cache failed for lack of local space (disk or quota): the cache directory's fault, not the
# remote object's; the shard is read into memory instead (_Shards._held)
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})

STATE_FORMAT = "mix_assets.reader_state/2"
STATE_FORMAT_1 = "mix_assets.reader_state/1"  # before shuffle schemes: read as the global scheme
SCHEMES = ("global", "shard_window")
DEFAULT_CACHE_BYTES = 8 << 30


class ReaderError(RuntimeError):
    """The reader cannot serve what was asked."""


class ShardCorruptError(ReaderError):
    """A shard whose bytes differ from the manifest (size or sha256); the message names the file."""


class NoDocIndexError(ReaderError):
    """doc_starts on a revision built without packing.doc_index."""


class ResumeMismatchError(ValueError):
    """A state_dict that belongs to another dataset, permutation, seq_len or seed."""


class PositionError(ReaderError):
    """A read that would re-read consumed samples or skip unconsumed ones."""


class EndOfMix(IndexError):
    """Reading past the last allowed pass of the split."""


# -- the state's fields ---------------------------------------------------------------------------------------
def _is_int(v: Any) -> bool:
    """A Python or numpy integer; bool (an int subclass) and numpy bool are not."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _sha_hex(v: Any) -> bool:
    return isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)


# field -> (test, what it must be)
_STATE_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "format": (lambda v: v == STATE_FORMAT, repr(STATE_FORMAT)),
    "split": (lambda v: isinstance(v, str), "a split name (str)"),
    "seq_len": (lambda v: _is_int(v) and v >= 1, "a positive int"),
    "sample_len": (lambda v: _is_int(v) and v >= 1, "a positive int"),
    "num_samples": (lambda v: _is_int(v) and v >= 1, "a positive int"),
    "samples_consumed": (lambda v: _is_int(v) and v >= 0, "a non-negative int"),
    "step": (lambda v: _is_int(v) and v >= 0, "a non-negative int"),
    "tokens_consumed": (lambda v: _is_int(v) and v >= 0, "a non-negative int"),
    "shuffle": (lambda v: isinstance(v, (bool, np.bool_)), "a bool"),
    "shuffle_seed": (lambda v: _is_int(v) and 0 <= v < 1 << 64, "an int in [0, 2**64)"),
    "shuffle_perm_sha": (_sha_hex, "a sha256 (64 lowercase hex digits)"),
    "shuffle_scheme": (lambda v: v in SCHEMES, f"one of {SCHEMES}"),
    "shuffle_window": (lambda v: v is None or (_is_int(v) and v >= 1), "an int >= 1 or None (global scheme)"),
    "epochs": (lambda v: v is None or (_is_int(v) and v >= 1), "an int >= 1 or None (unbounded)"),
    "epoch": (lambda v: _is_int(v) and v >= 0, "a non-negative int"),
    "epoch_perm_sha": (_sha_hex, "a sha256 (64 lowercase hex digits)"),
    "dataset_files_sha": (_sha_hex, "a sha256 (64 lowercase hex digits)"),
    INTERPRETATION_KEY: (_sha_hex, "a sha256 (64 lowercase hex digits)"),
}


def _checked_state(state: Any) -> dict:
    """The state with every field present, known and of its type (numpy scalars as Python ones), or a
    ResumeMismatchError naming each bad field."""
    if not isinstance(state, dict):
        raise ResumeMismatchError(f"reader state must be a dict, got {type(state).__name__}")
    if state.get("format") == STATE_FORMAT_1 and not {"shuffle_scheme", "shuffle_window"} & set(state):
        state = {**state, "format": STATE_FORMAT, "shuffle_scheme": "global", "shuffle_window": None}
    if state.get("format") != STATE_FORMAT:
        raise ResumeMismatchError(f"reader state field 'format': {state.get('format')!r}, expected {STATE_FORMAT!r}; "
                                  f"was it written by mix_assets.reader?")
    problems = [f"field {k!r}: missing" for k in _STATE_FIELDS if k not in state]
    problems += [f"field {k!r}: unknown to {STATE_FORMAT}" for k in state if k not in _STATE_FIELDS]
    for k, (ok, what) in _STATE_FIELDS.items():
        if k in state and not ok(state[k]):
            problems.append(f"field {k!r}: expected {what}, got {state[k]!r} ({type(state[k]).__name__})")
    if problems:
        raise ResumeMismatchError("reader state is malformed:\n  " + "\n  ".join(problems))
    return {k: v.item() if isinstance(v, np.generic) else v for k, v in state.items()}


# -- the permutation ----------------------------------------------------------------------------------------
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic; a bijection of uint64)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _base(seed: int, epoch: int, salt: int = 0) -> np.uint64:
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"shuffle_seed must be in [0, 2**64), got {seed}")
    with np.errstate(over="ignore"):
        b = _splitmix64(_splitmix64(np.array([seed], dtype=np.uint64)) ^ np.array([epoch], dtype=np.uint64))
        if salt:
            b = _splitmix64(b ^ np.array([salt], dtype=np.uint64))
    return b[0]


def _keyed_order(n: int, base: np.uint64) -> np.ndarray:
    """argsort of splitmix64(i ^ base) over i < n: a seeded bijection (int64)."""
    with np.errstate(over="ignore"):
        keys = _splitmix64(np.arange(n, dtype=np.uint64) ^ base)
    return np.argsort(keys, kind="stable").astype(np.int64)


def permutation(n: int, seed: int, epoch: int = 0) -> np.ndarray:
    """The epoch's order of n samples: argsort of splitmix64(i ^ base), base = f(seed, epoch). int64 array."""
    return _keyed_order(n, _base(seed, epoch))


_WINDOW_SALT = 0x5348415244  # "SHARD": the shard_window scheme's keys never coincide with the global one's


def shard_window_permutation(shard_samples: list[int], seed: int, epoch: int, window: int) -> np.ndarray:
    """The shard_window scheme: shards in a seeded order (splitmix64 keys, as `permutation`), cut into
    consecutive windows of `window` shards; each window's samples in a seeded order of their own. A batch of
    at most one window's samples touches at most 2 * window shards. int64 array of storage indices."""
    if window < 1:
        raise ValueError(f"shuffle_window must be >= 1 shards, got {window}")
    base = _base(seed, epoch, _WINDOW_SALT)
    starts = np.concatenate([[0], np.cumsum(shard_samples, dtype=np.int64)])
    order = _keyed_order(len(shard_samples), base)
    out = []
    for j in range(0, len(order), window):
        ids = np.concatenate([np.arange(starts[s], starts[s + 1], dtype=np.int64) for s in order[j:j + window]])
        with np.errstate(over="ignore"):
            wbase = _splitmix64(np.array([base ^ np.uint64(j // window + 1)], dtype=np.uint64))[0]
        out.append(ids[_keyed_order(len(ids), wbase)])
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def perm_sha(perm: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(perm, dtype="<u8").tobytes()).hexdigest()


# -- locations and backends -----------------------------------------------------------------------------------
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
        super().__init__(S3Location(url, self.client), f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}")


class _HubBackend(_RemoteBackend):
    """A hub dataset repo at a revision, downloaded through huggingface_hub (its cache: cache_dir/hub)."""

    verb = "fetch"

    def __init__(self, url: str, cache_dir: Path, endpoint: str | None):
        rest = url[len("hf://"):]
        if not rest.startswith("datasets/"):
            raise ReaderError(f"{url}: expected hf://datasets/org/name@revision[/subdir]")
        parts = rest[len("datasets/"):].split("/")
        if len(parts) < 2 or "@" not in parts[1]:
            raise ReaderError(f"{url}: a hub location needs a pinned revision: hf://datasets/org/name@revision")
        name, _, revision = parts[1].partition("@")
        if not revision:
            raise ReaderError(f"{url}: empty revision after '@'")
        loc = HubLocation(f"{parts[0]}/{name}", revision, endpoint=endpoint, cache_dir=str(cache_dir / "hub"),
                          subdir="/".join(p for p in parts[2:] if p))
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


def _raise_if_corrupt(label: str, n: int, sha: str | None, want_n: int, want_sha: str) -> None:
    if n != want_n:
        raise ShardCorruptError(f"{label}: {n} bytes, manifest says {want_n} (truncated or wrong file)")
    if sha is not None and sha != want_sha:
        raise ShardCorruptError(f"{label}: sha256 {sha}, manifest says {want_sha} (corrupt shard)")


def _backend(location: Any, cache_dir: Path, s3_endpoint_url: str | None, anonymous: bool | None,
             hub_endpoint: str | None, s3_client: Any):
    loc = os.fspath(location)
    if loc.startswith("s3://"):
        return _S3Backend(loc, cache_dir, s3_endpoint_url, anonymous, s3_client)
    if loc.startswith("hf://"):
        return _HubBackend(loc, cache_dir, hub_endpoint)
    if "://" in loc and not loc.startswith("file://"):
        raise ReaderError(f"{loc}: unsupported location (a local path, s3://bucket/prefix or hf://datasets/...)")
    return _LocalBackend(loc.removeprefix("file://"))


# -- the cache shared by processes --------------------------------------------------------------------------------
def _try_lock(f: BinaryIO, kind: int) -> bool:
    try:
        fcntl.flock(f, kind | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


class _SharedCache:
    """Remote files kept under cache_dir/objects/<sha[:2]>/<sha> (named by content, never modified), shared by
    any number of processes through fcntl.flock locks:

    * `objects/.lock` (exclusive), held briefly for bookkeeping: adopting, adding or removing a file;
    * each file, shared, for as long as a reader has it open or mapped; removal takes it exclusive without
      waiting, so a held file is never removed;
    * `<sha>.fetching` (exclusive) by the one process downloading that file; its size reserves the bytes.

    The budget is for the whole directory (files + reservations): a reservation is made only when it fits,
    after removing files no reader holds (least recently adopted first, by mtime) and, when `owner` is given,
    the owner's own holds; otherwise `fetch` returns None (the caller reads around the cache). `owner` (the
    reader's _Shards) lists its own holds, least recently used first (`own()`), and gives one up when asked
    (`drop(sha)`: unmap, release). A reader's threads (reads, prefetch) share one _SharedCache.
    """

    def __init__(self, cache_dir: Path, budget: int):
        self.root = cache_dir / "objects"
        self.budget = budget
        self.held: dict[str, BinaryIO] = {}  # sha -> the open file carrying our shared lock
        self._tlock = threading.RLock()  # this process's threads; taken before the directory's flock

    def path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with self._tlock, open(self.root / ".lock", "ab") as f:  # closing the file releases the lock
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def _hold(self, sha: str) -> BinaryIO | None:
        """Open and share-lock the file if present. Under the directory lock: no removal can interleave."""
        if sha in self.held:
            return self.held[sha]
        try:
            f = open(self.path(sha), "rb")  # kept open while held
        except FileNotFoundError:
            return None
        fcntl.flock(f, fcntl.LOCK_SH)  # removers lock exclusively only under the directory lock: never blocks
        with contextlib.suppress(OSError):
            os.utime(f.fileno())  # recency, for the directory's least-recently-used order
        self.held[sha] = f
        return f

    def adopt(self, sha: str) -> BinaryIO | None:
        """The file, held, if some process already put it in the cache."""
        f = self.held.get(sha)
        if f is not None:
            return f
        if not self.path(sha).exists():
            return None
        with self._locked():
            return self._hold(sha)

    def release(self, sha: str) -> None:
        with self._tlock:
            f = self.held.pop(sha, None)
            if f is not None:
                f.close()

    def close(self) -> None:
        with self._tlock:
            for sha in list(self.held):
                self.release(sha)

    def fetch(self, sha: str, nbytes: int, download: Callable[[Path], str | None], label: str,
              owner: _Shards | None, over_ok: bool = False) -> BinaryIO | None:
        """The file, held: downloaded (and verified) by this process, or by another one fetching it now.
        None when the directory has no room for it (unless over_ok: then it goes over by this file)."""
        while True:
            with self._locked():
                f = self._hold(sha)
                if f is not None:
                    return f
                res_path = self.path(sha).with_name(sha + ".fetching")
                try:
                    res = open(res_path, "r+b")  # a fetch in progress, or a crashed one's
                    mine = _try_lock(res, fcntl.LOCK_EX)
                except FileNotFoundError:
                    res_path.parent.mkdir(parents=True, exist_ok=True)
                    res = open(res_path, "xb")
                    fcntl.flock(res, fcntl.LOCK_EX)
                    mine = True
                if mine:
                    res.truncate(0)  # a crashed fetch's reservation is not counted twice
                    if not self._make_room(nbytes, sha, owner) and not over_ok:
                        res_path.unlink()
                        res.close()
                        return None
                    res.truncate(nbytes)  # a sparse file: reserves the bytes in every process's count
            if mine:
                break
            with res:  # another process is fetching it: wait for it to finish (or die), then look again
                fcntl.flock(res, fcntl.LOCK_SH)
        part = res_path.with_name(sha + ".part")
        try:
            got = download(part)
            n = part.stat().st_size
            if got is None:
                with open(part, "rb") as g:
                    got, n = sha256_stream(g)
            _raise_if_corrupt(label, n, got, nbytes, sha)
        except BaseException:
            # part first: once the reservation is gone another process may start writing a new part
            for p in (part, res_path):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            res.close()
            raise
        with self._locked():
            os.replace(part, self.path(sha))
            res_path.unlink()
            f = self._hold(sha)
        res.close()
        return f

    def remove_corrupt(self, sha: str) -> None:
        """Remove a file that failed verification, held or not (it must not be served again)."""
        self.release(sha)
        with self._locked(), contextlib.suppress(FileNotFoundError):
            self.path(sha).unlink()

    def _scan(self) -> tuple[int, list[tuple[float, str, int]]]:
        """Bytes in the directory (files + live reservations) and its files as (mtime, sha, size).
        Reservations of crashed fetches are removed on the way."""
        total, files = 0, []
        for sub in os.scandir(self.root):
            if not sub.is_dir():
                continue
            for ent in os.scandir(sub.path):
                name = ent.name
                try:
                    st = ent.stat()
                except FileNotFoundError:
                    continue
                if len(name) == 64:
                    total += st.st_size
                    files.append((st.st_mtime, name, st.st_size))
                elif name.endswith(".fetching"):
                    with open(ent.path, "rb") as res:
                        if not _try_lock(res, fcntl.LOCK_EX):
                            total += st.st_size
                            continue
                    for stale in (ent.path, ent.path[:-len(".fetching")] + ".part"):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(stale)
        return total, files

    def _remove_if_unheld(self, sha: str) -> bool:
        try:
            f = open(self.path(sha), "rb")
        except FileNotFoundError:
            return True
        with f:
            if not _try_lock(f, fcntl.LOCK_EX):
                return False
            self.path(sha).unlink()
            log.debug("evicted %s", sha)
            return True

    def _make_room(self, need: int, keep: str, owner: _Shards | None) -> bool:
        """Remove files until `need` more bytes fit; whether they do."""
        total, files = self._scan()
        size = {sha: n for _, sha, n in files}
        # Files nobody holds first (oldest first), then this reader's own holds (least recently used first).
        unheld = [sha for _, sha, _ in sorted(files) if sha != keep and sha not in self.held]
        own = [] if owner is None else [sha for sha in owner.own() if sha != keep and sha in size]
        for sha in unheld + own:
            if total + need <= self.budget:
                return True
            if sha in self.held:
                owner.drop(sha)  # unmapped and released (unless pinned)
            if sha not in self.held and self._remove_if_unheld(sha):
                total -= size[sha]
        if total + need > self.budget:
            log.debug("cache %s: %d bytes (+%d) over the budget of %d: the rest is held by readers",
                      self.root, total, need, self.budget)
            return False
        return True

    def make_room(self, need: int, keep: str, owner: _Shards | None) -> None:
        with self._locked():
            self._make_room(need, keep, owner)

    def resident_bytes(self) -> int:
        with self._locked():
            return self._scan()[0]


# -- one job's global steps over ranks and workers ----------------------------------------------------------
@dataclass(frozen=True)
class StepPlan:
    """Which samples each rank and worker of one job reads at each global step (no torch needed).

    The job resumed at (start_consumed, start_step) of a state. Global step s reads the global batch
    [g, g + B), g = start_consumed + (s - start_step) * B: the single-process reader's batch s. Rank r of
    world_size W reads the contiguous slice [g + r*b, g + (r+1)*b), b = B / W, so the ranks' slices in rank
    order are that batch. Worker w of n (of one rank's DataLoader) serves the steps with
    (s - start_step) % n == w, whole; the DataLoader takes one from each worker in turn, so a rank sees its
    steps in order. Nothing here depends on W or n but the slicing: resume with any of them (elastic).
    """

    start_consumed: int
    start_step: int
    global_batch: int
    rank: int = 0
    world_size: int = 1
    end_step: int | None = None  # exclusive; None: unbounded

    def __post_init__(self) -> None:
        if self.global_batch < 1 or self.world_size < 1:
            raise ValueError(f"global_batch ({self.global_batch}) and world_size ({self.world_size}) must be >= 1")
        if self.global_batch % self.world_size:
            raise ValueError(f"global batch {self.global_batch} is not divisible by world_size {self.world_size}: "
                             f"each rank reads global_batch / world_size samples per step")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in [0, world_size={self.world_size})")

    @property
    def rank_batch(self) -> int:
        return self.global_batch // self.world_size

    def consumed_at(self, step: int) -> int:
        """samples_consumed once the steps before `step` are done."""
        if step < self.start_step:
            raise PositionError(f"step {step} is before this job's resume point (step {self.start_step})")
        return self.start_consumed + (step - self.start_step) * self.global_batch

    def positions(self, step: int) -> range:
        """This rank's train-sample positions at global step `step`."""
        g = self.consumed_at(step) + self.rank * self.rank_batch
        return range(g, g + self.rank_batch)

    def steps(self, worker: int = 0, num_workers: int = 1) -> range:
        """The global steps worker `worker` of `num_workers` serves, in order."""
        if not 0 <= worker < num_workers:
            raise ValueError(f"worker {worker} is not in [0, num_workers={num_workers})")
        stop = self.end_step if self.end_step is not None else 1 << 62
        return range(self.start_step + worker, max(stop, self.start_step + worker), num_workers)


# -- the reader -------------------------------------------------------------------------------------------------
class _Shards:
    """The shards of one split: memmaps opened on demand; remote files held in a _SharedCache."""

    def __init__(self, backend, entries: list[dict], sample_len: int, dtype: np.dtype, cache_bytes: int,
                 cache_dir: Path):
        self.backend = backend
        self.entries = entries
        self.sample_len = sample_len
        self.dtype = dtype
        self.maps: list[np.ndarray | None] = [None] * len(entries)
        self.lru: collections.OrderedDict[int, None] = collections.OrderedDict()  # mapped remote shards
        self.fetched: list[str] = []  # relative paths fetched by this reader, in order
        self.verified: set[str] = set()  # sha256 of the files this reader has checked
        self.pinned: set[str] = set()  # non-shard files handed out by path: held until close()
        self.private: set[int] = set()  # shards read into memory because the cache had no room
        self.private_reads = 0
        self.disk_full = 0  # cache misses because its disk had no space (not the budget): warned once
        self.budget_warned = False
        self.ahead: dict[int, int] = {}  # shard -> bytes: held by the prefetcher, not yet opened by a read
        self.opening: int | None = None  # the shard a read is opening (the prefetcher must not release it)
        self.prefetch_errors: dict[int, BaseException] = {}
        biggest = max((e["bytes"] for e in entries), default=0)
        if backend.remote and biggest > cache_bytes:
            raise ReaderError(f"cache_bytes={cache_bytes} cannot hold one shard ({biggest} bytes); raise it")
        self.cache = _SharedCache(cache_dir, cache_bytes) if backend.remote else None
        # One lock for the holds of this process's threads (the cache's): no lock-order question between them.
        self.ahead_lock = self.cache._tlock if self.cache is not None else threading.RLock()

    def own(self) -> list[str]:
        """This reader's holds, the first to give up first: mapped shards least recently used first, then
        shards prefetched ahead, the furthest ahead first."""
        with self.ahead_lock:
            ahead = list(self.ahead)[::-1]
        return list(dict.fromkeys(self.entries[i]["sha256"] for i in [*self.lru, *ahead]))

    def drop(self, sha: str) -> None:
        for i in [i for i in self.lru if self.entries[i]["sha256"] == sha]:
            del self.lru[i]
            self.maps[i] = None
        with self.ahead_lock:
            for i in [i for i in self.ahead if self.entries[i]["sha256"] == sha]:
                del self.ahead[i]
        if sha not in self.pinned:
            self.cache.release(sha)

    def _held(self, rel: str, sha: str, nbytes: int, owner: _Shards | None, over_ok: bool = False) -> BinaryIO | None:
        """A remote file, held in the cache (fetched if missing) and verified once by this reader; None when
        the cache has no room for it (see _SharedCache.fetch)."""
        label = f"{self.backend.label}/{rel}"
        f = self.cache.adopt(sha)
        if f is None:
            try:
                f = self.cache.fetch(sha, nbytes, lambda dest: self.backend.download(rel, dest), label, owner,
                                     over_ok)
            except OSError as e:
                if e.errno not in _DISK_FULL:
                    raise
                if not self.disk_full:
                    log.warning("cache %s: no space left on its disk for %s (%s): reading into memory "
                                "instead; free space there or pass another cache_dir", self.cache.root, label,
                                e.strerror or e)
                self.disk_full += 1
                return None
            if f is None:
                return None
            self.fetched.append(rel)
            self.verified.add(sha)
            log.debug("fetched %s (%d bytes)", rel, nbytes)
        else:  # adding nothing, but the directory may still be over from files others held until now
            self.cache.make_room(0, sha, owner)
        if sha not in self.verified:
            try:
                self._verify(label, f.name, nbytes, sha)
            except ShardCorruptError:
                self.drop(sha)
                self.cache.remove_corrupt(sha)
                raise
        return f

    def open(self, i: int) -> np.ndarray:
        e = self.entries[i]
        if self.cache is None:
            path = self.backend.local_path(e["path"])
            if e["sha256"] not in self.verified:
                self._verify(f"{self.backend.label}/{e['path']}", path, e["bytes"], e["sha256"])
            src: Any = path
        else:
            err = self.prefetch_errors.pop(i, None)
            if err is not None:  # the prefetch thread's failure, raised where the shard is read
                raise err
            with self.ahead_lock:
                self.ahead.pop(i, None)  # from now on a read's hold, in the LRU order
                self.opening = i
            try:
                full = self.disk_full
                src = self._held(e["path"], e["sha256"], e["bytes"], self)
                self.lru[i] = None
                self.lru.move_to_end(i)
                if src is None:
                    return self._read_private(i, disk_full=self.disk_full > full)
                return self._map(i, src)
            finally:
                self.opening = None
        return self._map(i, src)

    def _map(self, i: int, src: Any) -> np.ndarray:
        e = self.entries[i]
        mm = np.memmap(src, dtype=self.dtype, mode="r", shape=(e["samples"], self.sample_len))
        self.maps[i] = mm.view(np.ndarray)  # plain ndarray view: same mapping, cheaper indexing
        return self.maps[i]

    def _read_private(self, i: int, disk_full: bool = False) -> np.ndarray:
        """Shard i into this process's memory, verified, outside the cache (which other readers fill, or whose
        disk is full: `disk_full`, warned about in _held): at most one such shard per reader; the next shard
        tries the cache again."""
        e = self.entries[i]
        label = f"{self.backend.label}/{e['path']}"
        if not disk_full and not self.budget_warned:
            self.budget_warned = True
            log.warning("cache %s is full of files other readers hold (budget %d bytes): reading %s into memory "
                        "instead; raise cache_bytes to share it", self.cache.root, self.cache.budget, label)
        for j in self.private - {i}:
            self.lru.pop(j, None)
            self.maps[j] = None
        data = self.backend.read_private(e["path"])
        _raise_if_corrupt(label, len(data), hashlib.sha256(data).hexdigest(), e["bytes"], e["sha256"])
        self.private, self.private_reads = {i}, self.private_reads + 1
        self.maps[i] = np.frombuffer(data, dtype=self.dtype).reshape(e["samples"], self.sample_len)
        return self.maps[i]

    def prefetch_one(self, i: int) -> bool:
        """Hold shard i in the cache for a coming read (prefetch thread): never evicting a hold of this or any
        reader; False when the directory has no room."""
        e = self.entries[i]
        if self._held(e["path"], e["sha256"], e["bytes"], None) is None:
            return False
        with self.ahead_lock:
            if self.maps[i] is None and self.opening != i:  # else a read has it already: not ahead
                self.ahead[i] = e["bytes"]
        return True

    def unhold_ahead(self, keep: set[int]) -> None:
        """Release prefetched shards no longer wanted (not opened by a read meanwhile)."""
        with self.ahead_lock:  # a read opening one of them waits for this, or is skipped (opening)
            gone = [i for i in self.ahead if i not in keep]
            for i in gone:
                del self.ahead[i]
            busy = {self.entries[j]["sha256"] for j, m in enumerate(self.maps) if m is not None}
            if self.opening is not None:
                busy.add(self.entries[self.opening]["sha256"])
            for i in gone:
                sha = self.entries[i]["sha256"]
                if sha not in busy and sha not in self.pinned:
                    self.cache.release(sha)

    def file(self, rel: str, sha: str, nbytes: int) -> str:
        """A non-shard file as a local path, verified; a remote one stays held until close()."""
        if self.cache is None:
            path = self.backend.local_path(rel)
            self._verify(f"{self.backend.label}/{rel}", path, nbytes, sha)
            return path
        held = self._held(rel, sha, nbytes, self, over_ok=True)  # a path must exist: may go over the budget
        if held is None:  # only when the cache's disk is full (warned)
            raise ReaderError(f"{self.backend.label}/{rel}: no space left in the cache {self.cache.root} "
                              "to keep it; free space there or pass another cache_dir")
        path = held.name
        self.pinned.add(sha)
        return path

    def _verify(self, label: str, path: str, nbytes: int, sha: str) -> None:
        _raise_if_corrupt(label, os.path.getsize(path), None, nbytes, sha)
        with open(path, "rb") as f:
            got, n = sha256_stream(f)
        _raise_if_corrupt(label, n, got, nbytes, sha)
        self.verified.add(sha)

    def close(self) -> None:
        self.lru.clear()
        self.private.clear()
        with self.ahead_lock:
            self.ahead.clear()
        self.maps[:] = [None] * len(self.maps)
        if self.cache is not None:
            self.cache.close()
        self.pinned.clear()


class _Prefetcher:
    """A daemon thread that holds, in the shared cache, the shards of the positions a reader will read next
    (given by `want`, in reading order) while the reader reads the current ones: at most `limit` bytes of
    shards ahead (fetched or adopted, verified, not yet opened by a read). It never evicts a hold of any
    reader and skips when the directory has no room. A failure is kept and raised by the read of that shard.
    It refers to the reader only weakly (`locate`), so dropping the reader stops it (see MixReader)."""

    MAX_RANGES = 4096  # positions ranges looked at per want: enough ahead, bounded work when all is held

    def __init__(self, shards: _Shards, locate: Callable[[range], list[int]], limit: int):
        self.shards, self.locate, self.limit = shards, locate, limit
        self.cv = threading.Condition()
        self.pending: Iterator[range] | None = None
        self.generation = 0
        self.stopping = False
        self.peak_ahead_bytes = 0
        self.thread: threading.Thread | None = None

    def want(self, ranges: Iterable[range]) -> None:
        with self.cv:
            if self.stopping:
                return
            self.pending, self.generation = iter(ranges), self.generation + 1
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="mix-reader-prefetch", daemon=True)
                self.thread.start()
            self.cv.notify()

    def stop(self, timeout: float = 60.0) -> None:
        with self.cv:
            self.stopping, self.pending = True, None
            self.cv.notify()
        t = self.thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
            if t.is_alive():  # pragma: no cover - a download that does not return
                log.warning("prefetch thread still fetching after %.0f s; left as a daemon", timeout)

    def _plan(self, ranges: Iterator[range]) -> tuple[list[int], set[int]]:
        """(shards to hold ahead, in first-use order over the ranges after the first, until `limit` bytes of
        unopened ones; the first range's shards, which the read opens itself and which stay held)."""
        order: dict[int, None] = {}
        current: set[int] = set()
        need = 0
        for n, rng in zip(range(self.MAX_RANGES), ranges):
            try:
                ids = self.locate(rng)
            except (IndexError, ReaderError):  # past the last allowed pass, or the reader is gone
                break
            if n == 0:
                current.update(ids)
                continue
            for si in ids:
                if si in order or si in current:
                    continue
                order[si] = None
                if self.shards.maps[si] is None:
                    need += self.shards.entries[si]["bytes"]
                    if need > self.limit:
                        return list(order)[:-1], current
        return list(order), current

    def _run(self) -> None:
        while True:
            with self.cv:
                while self.pending is None and not self.stopping:
                    self.cv.wait()
                if self.stopping:
                    return
                ranges, gen, self.pending = self.pending, self.generation, None
            plan, current = self._plan(ranges)
            del ranges
            self.shards.unhold_ahead(set(plan) | current)
            for si in plan:
                with self.cv:
                    if self.stopping or self.generation != gen:
                        break
                if self.shards.maps[si] is not None or si in self.shards.ahead:
                    continue
                with self.shards.ahead_lock:
                    ahead = sum(self.shards.ahead.values())
                if ahead + self.shards.entries[si]["bytes"] > self.limit:
                    break
                try:
                    if not self.shards.prefetch_one(si):
                        break  # no room in the directory: the reads fetch for themselves
                except Exception as e:  # raised by the read that needs this shard (the message names it)
                    self.shards.prefetch_errors[si] = e
                    break
                with self.shards.ahead_lock:
                    self.peak_ahead_bytes = max(self.peak_ahead_bytes, sum(self.shards.ahead.values()))


def _stride(start: int, count: int) -> Iterator[range]:
    """[start, start + count), then the next count, and so on (a sequential reader's batches)."""
    while True:
        yield range(start, start + count)
        start += count


class MixReader:
    """Positional reader over one split of a mix. Build with `open_mix`."""

    def __init__(self, backend, manifest: dict, *, split: str, shuffle_seed: int, shuffle: bool,
                 epochs: int | None, cache_bytes: int, cache_dir: Path, shuffle_window: int | None = None,
                 prefetch_bytes: int = 0):
        if split not in manifest["splits"]:
            raise ReaderError(f"{backend.label}: no split {split!r} in manifest (has {sorted(manifest['splits'])})")
        self._backend = backend
        self._cache_dir = cache_dir
        self._cache_bytes = cache_bytes
        self._prefetch_bytes = prefetch_bytes
        self.manifest = manifest
        self.split = split
        self.fingerprint: str = manifest["fingerprint"]
        self.seq_len: int = manifest["packing"]["seq_len"]
        self.sample_len: int = manifest["packing"]["sample_len"]
        self.dtype = np.dtype(manifest["dtype"]).newbyteorder("<")
        self.shuffle_seed = int(shuffle_seed)
        self.shuffle = bool(shuffle)
        if shuffle_window is not None and (not _is_int(shuffle_window) or shuffle_window < 1):
            raise ValueError(f"shuffle_window must be a number of shards >= 1 or None, got {shuffle_window!r}")
        if shuffle_window is not None and not self.shuffle:
            raise ValueError("shuffle_window applies to a shuffled reader; this one reads storage order")
        self.shuffle_window = None if shuffle_window is None else int(shuffle_window)
        self.shuffle_scheme = "global" if shuffle_window is None else "shard_window"
        if epochs is not None and epochs < 1:
            raise ValueError(f"epochs must be >= 1 or None (unbounded), got {epochs}")
        self.epochs = epochs
        entries = manifest["splits"][split]["shards"]
        self._n = sum(e["samples"] for e in entries)
        if self._n == 0:
            raise ReaderError(f"{backend.label}: split {split!r} has no samples")
        self._starts = [0]
        for e in entries[:-1]:
            self._starts.append(self._starts[-1] + e["samples"])
        self._shards = _Shards(backend, entries, self.sample_len, self.dtype, cache_bytes, cache_dir)
        self._starts_arr = np.asarray(self._starts, dtype=np.int64)
        self._maps = self._shards.maps  # the same list object: hot-path alias
        self._remote = backend.remote
        self._perm_cache: dict[int, np.ndarray] = {}
        self._perm_lock = threading.Lock()
        self._prefetcher: _Prefetcher | None = None
        if prefetch_bytes < 0:
            raise ValueError(f"prefetch_bytes must be >= 0, got {prefetch_bytes}")
        if prefetch_bytes and backend.remote:
            me = weakref.ref(self)
            self._prefetcher = _Prefetcher(self._shards, lambda rng: _shards_of(me, rng), prefetch_bytes)
            weakref.finalize(self, self._prefetcher.stop)  # dropping the reader stops its thread
        self._doc_indexes: dict[int, np.ndarray] = {}  # shard -> its document starts, loaded on first use
        self._perm0 = self._perm(0)
        self.shuffle_perm_sha = perm_sha(self._perm0)
        self.samples_consumed = 0
        self.step = 0

    # -- order ---------------------------------------------------------------------------------------------
    def _perm(self, epoch: int) -> np.ndarray:
        with self._perm_lock:  # the prefetch thread locates shards too
            return self._perm_locked(epoch)

    def _perm_locked(self, epoch: int) -> np.ndarray:
        p = self._perm_cache.get(epoch)
        if p is None:
            if not self.shuffle:
                p = np.arange(self._n, dtype=np.int64)
            elif self.shuffle_window is None:
                p = permutation(self._n, self.shuffle_seed, epoch)
            else:
                p = shard_window_permutation([e["samples"] for e in self._shards.entries], self.shuffle_seed,
                                             epoch, self.shuffle_window)
            if len(self._perm_cache) >= 2:  # current epoch and epoch 0 are enough
                self._perm_cache.pop(max(k for k in self._perm_cache if k != 0))
            self._perm_cache[epoch] = p
        return p

    def epoch_perm_sha(self, epoch: int) -> str:
        return perm_sha(self._perm(epoch))

    def shards_of(self, positions: range) -> list[int]:
        """The split's shard indices that train positions `positions` read, in first-use order."""
        if not len(positions):
            return []
        self._check_range(positions.start, len(positions))
        return list(dict.fromkeys(self._shard_index(self._storage(positions.start, len(positions))).tolist()))

    def prefetch(self, ranges: Iterable[range]) -> None:
        """Tell the prefetch thread which positions are read from now on, in reading order, the first range
        being the read about to happen (replacing what it was told before): it holds the shards of the later
        ranges up to prefetch_bytes ahead, and keeps holding the first range's. A no-op without
        prefetch_bytes or when local. `batch`/`next_batch` call it themselves from the cursor on."""
        if self._prefetcher is not None:
            self._prefetcher.want(ranges)

    @property
    def prefetched_bytes(self) -> int:
        """Bytes of shards the prefetch thread holds that no read has opened yet."""
        with self._shards.ahead_lock:
            return sum(self._shards.ahead.values())

    def _check_range(self, k: int, count: int = 1) -> None:
        if k < 0:
            raise IndexError(f"sample index {k} is negative")
        end = None if self.epochs is None else self.epochs * self._n
        if end is not None and k + count > end:
            raise EndOfMix(
                f"{self.split}: samples [{k}, {k + count}) go past the end of {self.epochs} pass(es) of "
                f"{self._n} samples ({max(0, end - k)} left). Pass epochs=N to open_mix for more passes "
                f"(epoch e reads the permutation seeded by (shuffle_seed, e))")

    def storage_index(self, k: int) -> int:
        """The storage-order index (over the split's shards) of sample k."""
        self._check_range(k)
        e, i = divmod(k, self._n)
        return int(self._perm(e)[i])

    # -- reads (pure) --------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Samples in one pass of the split."""
        return self._n

    def sample(self, k: int) -> np.ndarray:
        """Sample k (a copy, shape (sample_len,)); pure: does not move the cursor."""
        # The hot path of random access: epoch-0 index, shard by bisection, one row copy out of the memmap.
        g = self._perm0.item(k) if 0 <= k < self._n else self.storage_index(k)
        si = bisect_right(self._starts, g) - 1
        mm = self._maps[si]
        if mm is None:
            mm = self._shards.open(si)
        elif self._remote:
            self._shards.lru.move_to_end(si)
        return mm[g - self._starts[si]].copy()

    def _storage(self, start: int, count: int) -> np.ndarray:
        """Storage indices of train positions [start, start + count)."""
        idx = np.empty(count, dtype=np.int64)
        pos = 0
        while pos < count:  # one slice per epoch touched
            e, i = divmod(start + pos, self._n)
            take = min(count - pos, self._n - i)
            idx[pos:pos + take] = self._perm(e)[i:i + take]
            pos += take
        return idx

    def _shard_index(self, idx: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._starts_arr, idx, side="right") - 1

    def samples(self, start: int, count: int) -> np.ndarray:
        """Samples [start, start + count) as one (count, sample_len) array; pure."""
        self._check_range(start, count)
        idx = self._storage(start, count)
        shard = self._shard_index(idx)
        rows = idx - self._starts_arr[shard]
        out = np.empty((count, self.sample_len), dtype=self.dtype)
        shard_list = shard.tolist()
        maps = self._maps
        uniq = dict.fromkeys(shard_list)
        if any(maps[si] is None for si in uniq):
            # Shard by shard, each opened (fetched) once: a batch may touch more shards than the cache holds.
            for si in uniq:
                m = maps[si]
                if m is None:
                    m = self._shards.open(si)
                elif self._remote:
                    self._shards.lru.move_to_end(si)
                sel = shard == si
                out[sel] = m[rows[sel]]
            return out
        if self._remote:
            for si in uniq:  # mark recently used
                self._shards.lru.move_to_end(si)
        # Row by row: one copy per sample straight into `out` (cheaper than masks + fancy indexing).
        for j, si, row in zip(range(count), shard_list, rows.tolist()):
            out[j] = maps[si][row]
        return out

    # -- document boundaries (packing.doc_index, format/docindex.py) ----------------------------------------------
    @property
    def has_doc_index(self) -> bool:
        """Whether this revision carries a document index (every shard has one, or none does)."""
        return all("doc_index" in e for e in self._shards.entries)

    def doc_starts(self, k: int) -> np.ndarray:
        """Offsets inside sample k where a document starts (int64, ascending; 0 when one starts at the
        sample's first token); pure. The shard's index is fetched and verified (size, sha256) once."""
        g = self.storage_index(k)
        si = bisect_right(self._starts, g) - 1
        return docindex.sample_starts(self.shard_doc_index(si), g - self._starts[si], self.sample_len)

    def segment_ids(self, k: int) -> np.ndarray:
        """Per token of sample k, its document's number within the sample (int32; see docindex.segment_ids)."""
        return docindex.segment_ids(self.doc_starts(k), self.sample_len)

    def shard_doc_index(self, si: int) -> np.ndarray:
        """Document starts of the split's shard `si` (token offsets in the shard, uint32): its index file,
        verified (size, sha256, shape) on first use; NoDocIndexError when the revision has none."""
        starts = self._doc_indexes.get(si)
        if starts is not None:
            return starts
        e = self._shards.entries[si]
        ix = e.get("doc_index")
        if ix is None:
            raise NoDocIndexError(
                f"{self._backend.label}: revision {self.fingerprint[:12]} has no document index ({e['path']} has "
                "none): it was built with packing.doc_index: false or before the option; rebuild with "
                "packing.doc_index: true, or take boundaries from the separator token")
        path = self._shards.file(ix["path"], ix["sha256"], ix["bytes"])
        with open(path, "rb") as f:
            data = f.read()
        try:
            starts = docindex.from_bytes(data, f"{self._backend.label}/{ix['path']}", e["samples"] * self.sample_len)
        except ValueError as err:
            raise ShardCorruptError(str(err)) from None
        self._doc_indexes[si] = starts
        return starts

    # -- reads that consume ----------------------------------------------------------------------------------
    def batch(self, step: int, batch_size: int) -> np.ndarray:
        """Batch `step` = samples [step*batch_size, (step+1)*batch_size); must start at the cursor; advances it."""
        start = step * batch_size
        if start != self.samples_consumed:
            verb = "re-read consumed samples" if start < self.samples_consumed else "skip unread samples"
            raise PositionError(
                f"batch(step={step}, batch_size={batch_size}) starts at sample {start}, but the cursor is at "
                f"{self.samples_consumed} (state step {self.step}); this would {verb}. "
                f"Use next_batch(batch_size) when the batch size changed")
        return self._consume(batch_size)

    def next_batch(self, batch_size: int) -> np.ndarray:
        """The next batch_size samples from the cursor; advances it and the step."""
        return self._consume(batch_size)

    def _consume(self, count: int) -> np.ndarray:
        if count < 1:
            raise ValueError(f"batch_size must be >= 1, got {count}")
        if self._prefetcher is not None:  # from this batch on: its shards stay held, the next ones come
            self.prefetch(_stride(self.samples_consumed, count))
        out = self.samples(self.samples_consumed, count)
        self.samples_consumed += count
        self.step += 1
        return out

    def __iter__(self) -> Iterator[np.ndarray]:
        """Samples from the cursor, one at a time, until the last allowed pass ends; each yield consumes one."""
        while self.epochs is None or self.samples_consumed < self.epochs * self._n:
            x = self.sample(self.samples_consumed)
            self.samples_consumed += 1
            yield x

    def iter_batches(self, batch_size: int) -> Iterator[np.ndarray]:
        """next_batch(batch_size) until fewer than batch_size samples remain in the allowed passes."""
        while self.epochs is None or self.samples_consumed + batch_size <= self.epochs * self._n:
            yield self.next_batch(batch_size)

    # -- state -------------------------------------------------------------------------------------------------
    @property
    def tokens_consumed(self) -> int:
        return self.samples_consumed * self.sample_len

    @property
    def epoch(self) -> int:
        return self.samples_consumed // self._n

    def state_dict(self) -> dict:
        return self.state_at(self.samples_consumed, self.step)

    def state_at(self, samples_consumed: int, step: int) -> dict:
        """The state_dict this reader would have with its cursor at (samples_consumed, step), without moving it:
        the checkpoint of a job whose ranks and workers read the batches (torch_data.py)."""
        if not 0 <= step <= samples_consumed:
            raise ValueError(f"state_at: need 0 <= step <= samples_consumed, got step {step}, "
                             f"samples_consumed {samples_consumed}")
        epoch = samples_consumed // self._n
        return {
            "format": STATE_FORMAT,
            "split": self.split,
            "seq_len": self.seq_len,
            "sample_len": self.sample_len,
            "num_samples": self._n,
            "samples_consumed": samples_consumed,
            "step": step,
            "tokens_consumed": samples_consumed * self.sample_len,
            "shuffle": self.shuffle,
            "shuffle_seed": self.shuffle_seed,
            "shuffle_perm_sha": self.shuffle_perm_sha,
            "shuffle_scheme": self.shuffle_scheme,
            "shuffle_window": self.shuffle_window,
            "epochs": self.epochs,
            "epoch": epoch,
            "epoch_perm_sha": self.epoch_perm_sha(epoch),
            "dataset_files_sha": self.fingerprint,
            INTERPRETATION_KEY: self.manifest[INTERPRETATION_KEY],
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume at the state's position; raises ResumeMismatchError (naming the field) when the state is
        malformed or inconsistent, or belongs to anything else; PositionError when it would move back."""
        st = _checked_state(state)
        mine = self.state_dict()
        why = {
            "dataset_files_sha": "resuming into a different dataset (fingerprint of the mix files)",
            INTERPRETATION_KEY: "the mix files read another way (dtype, packing, tokenizer or shard samples)",
            "split": "a state of another split",
            "seq_len": "a different seq_len",
            "sample_len": "a different sample length",
            "num_samples": "a different number of samples",
            "shuffle": "shuffling switched on/off",
            "shuffle_seed": "a different shuffle seed",
            "shuffle_scheme": "a different shuffle scheme (global / shard_window)",
            "shuffle_window": "a different shuffle window (shards per window)",
            "shuffle_perm_sha": "a different permutation (same seed, other algorithm or sample count)",
        }
        diffs = [f"{k}: checkpoint {st[k]!r}, this reader {mine[k]!r} ({reason})"
                 for k, reason in why.items() if st[k] != mine[k]]
        if diffs:
            raise ResumeMismatchError("refusing to resume, the checkpoint's data state does not match this reader:\n  "
                                      + "\n  ".join(diffs))
        consumed, step = st["samples_consumed"], st["step"]
        if st["tokens_consumed"] != consumed * self.sample_len:
            raise ResumeMismatchError(f"reader state field 'tokens_consumed': {st['tokens_consumed']} != "
                                      f"samples_consumed {consumed} x sample_len {self.sample_len}: the state is "
                                      f"inconsistent")
        if step > consumed:
            raise ResumeMismatchError(f"reader state field 'step': {step} batches cannot have read only {consumed} "
                                      f"samples (each step reads at least one): the state is inconsistent")
        e = consumed // self._n
        if st["epoch"] != e:
            raise ResumeMismatchError(f"reader state field 'epoch': {st['epoch']}, but samples_consumed {consumed} "
                                      f"of {self._n} per pass is epoch {e}: the state is inconsistent")
        if st["epochs"] is not None and consumed > st["epochs"] * self._n:
            raise ResumeMismatchError(f"reader state field 'epochs': {st['epochs']} pass(es) of {self._n} cannot have "
                                      f"read samples_consumed {consumed}: the state is inconsistent")
        if st["epoch_perm_sha"] != self.epoch_perm_sha(e):
            raise ResumeMismatchError(f"reader state field 'epoch_perm_sha' of epoch {e}: checkpoint "
                                      f"{st['epoch_perm_sha']}, this reader {self.epoch_perm_sha(e)} (a different "
                                      f"permutation for that pass)")
        if self.epochs is not None and consumed > self.epochs * self._n:
            raise ResumeMismatchError(f"samples_consumed {consumed} is past {self.epochs} pass(es) of {self._n}; "
                                      f"open with a larger epochs=")
        if consumed < self.samples_consumed:
            raise PositionError(f"load_state_dict would move this reader back from sample {self.samples_consumed} "
                                f"to {consumed}; open a new reader to roll back deliberately")
        self.samples_consumed, self.step = consumed, step

    def plan(self, global_batch: int, rank: int = 0, world_size: int = 1, steps: int | None = None) -> StepPlan:
        """The job's global steps from this reader's cursor, sliced for one rank (see StepPlan). It ends before
        step `steps` (the job's total, if given) and before the first global batch the allowed passes cannot
        fill (a partial last batch is never read)."""
        p = StepPlan(self.samples_consumed, self.step, global_batch, rank, world_size, steps)
        if self.epochs is not None:
            full = self.step + (self.epochs * self._n - self.samples_consumed) // global_batch
            p = replace(p, end_step=full if steps is None else min(steps, full))
        return p

    # -- misc ---------------------------------------------------------------------------------------------------
    @property
    def fetched(self) -> list[str]:
        """Relative paths of the shards this reader fetched from a remote location, in order."""
        return list(self._shards.fetched)

    @property
    def cache_resident_bytes(self) -> int:
        """Bytes in the shared cache directory (every process's files and fetches in progress); 0 if local."""
        return 0 if self._shards.cache is None else self._shards.cache.resident_bytes()

    def close(self) -> None:
        """Stop the prefetch thread and release this reader's hold on cached files (they become evictable);
        reads after this re-open them (without prefetch)."""
        if self._prefetcher is not None:
            self._prefetcher.stop()
        self._shards.close()

    def __enter__(self) -> MixReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def file_path(self, rel: str) -> str:
        """A non-shard file of the revision (e.g. "tokenizer/tokenizer.json") as a local path, fetched
        from this location like a shard and checked against its manifest size and sha256."""
        entry = next((f for f in self.manifest["files"] if f["path"] == rel), None)
        if entry is None:
            raise ReaderError(f"{self._backend.label}: {rel} is not listed in the manifest's files")
        return self._shards.file(rel, entry["sha256"], entry["bytes"])

    def validation_reader(self, shuffle: bool = False, shuffle_seed: int | None = None) -> MixReader:
        """A separate reader over the val split (storage order, one pass) sharing this location and cache dir."""
        return MixReader(self._backend, self.manifest, split="val",
                         shuffle_seed=self.shuffle_seed if shuffle_seed is None else shuffle_seed,
                         shuffle=shuffle, epochs=1, cache_bytes=self._cache_bytes, cache_dir=self._cache_dir,
                         prefetch_bytes=self._prefetch_bytes)

    def __repr__(self) -> str:
        return (f"MixReader({self._backend.label!r}, split={self.split!r}, samples={self._n}, "
                f"sample_len={self.sample_len}, fingerprint={self.fingerprint[:12]}…, "
                f"cursor={self.samples_consumed})")


def _shards_of(reader_ref: weakref.ref, positions: range) -> list[int]:
    r = reader_ref()
    if r is None:
        raise ReaderError("the reader is gone")
    return r.shards_of(positions)


def _default_cache_dir() -> Path:
    env = os.environ.get("MIX_READER_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "mix_assets" / "reader"


def open_mix(
    location: Any,
    cache_dir: str | os.PathLike | None = None,
    shuffle_seed: int = 0,
    split: str = "train",
    *,
    shuffle: bool | None = None,
    shuffle_window: int | None = None,
    epochs: int | None = 1,
    prefetch_bytes: int = 0,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    expected_fingerprint: str | None = None,
    s3_endpoint_url: str | None = None,
    anonymous: bool | None = None,
    hub_endpoint: str | None = None,
    s3_client: Any = None,
) -> MixReader:
    """Open one split of a published mix (see the module doc).

    shuffle: default True for train, False for val. shuffle_window: None for one global permutation, or K for
    the shard_window scheme (windows of K shards; a batch touches at most 2K shards). prefetch_bytes: bound on
    shards a background thread fetches ahead of the reads (0: no thread). epochs: passes allowed (None: unbounded).
    cache_bytes: bound on remote shards kept in cache_dir (default $MIX_READER_CACHE or
    ~/.cache/mix_assets/reader). expected_fingerprint: refuse any other mix. s3_client: a ready boto3
    S3 client (tests, custom sessions).
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else _default_cache_dir()
    backend = _backend(location, cache, s3_endpoint_url, anonymous, hub_endpoint, s3_client)
    raw = backend.read_manifest()
    try:
        manifest = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ManifestError([f"{MANIFEST_NAME}: not valid JSON ({e})"], origin=backend.label) from None
    # Structure, totals and fingerprint need no file; local files also get their sizes checked (cheap).
    # Shard hashes are checked as each shard arrives, which is what lets remote readers fetch lazily.
    source = None if backend.remote else _SizesOnly(backend.root)
    problems = check_manifest(manifest, source, verify_hashes=False, strict=False)
    if problems:
        raise ManifestError(problems, origin=f"{backend.label}/{MANIFEST_NAME}")
    if manifest["dtype"] not in DTYPES:  # pragma: no cover - the checker refuses it
        raise ReaderError(f"unsupported dtype {manifest['dtype']}")
    if expected_fingerprint is not None and manifest["fingerprint"] != expected_fingerprint:
        raise ResumeMismatchError(f"{backend.label}: fingerprint {manifest['fingerprint']}, expected "
                                  f"{expected_fingerprint} (a different dataset)")
    reader = MixReader(backend, manifest, split=split, shuffle_seed=shuffle_seed,
                       shuffle=(split == "train") if shuffle is None else shuffle,
                       epochs=epochs, cache_bytes=cache_bytes, cache_dir=cache, shuffle_window=shuffle_window,
                       prefetch_bytes=prefetch_bytes)
    if backend.remote:  # a local config was checked above; the fingerprinted config binds the interpretation
        problems = interpretation_problems(manifest, lambda rel: io.BytesIO(backend.read_small(rel)))
        if problems:
            raise ManifestError(problems, origin=f"{backend.label}/{MANIFEST_NAME}")
    return reader




class _SizesOnly:
    """Local files for the checker, without the directory-listing check (a mix dir may hold extra files)."""

    def __init__(self, root: Path):
        self.root = root

    def open(self, path: str):
        return open(safe_path(path, self.root), "rb")

    def size(self, path: str) -> int:
        return safe_path(path, self.root).stat().st_size

    def __repr__(self) -> str:
        return str(self.root)
