"""The trainer's reader: sample k of a published mix as a pure function of (fingerprint, shuffle_seed, k).

    from mix_assets.reader import open_mix
    r = open_mix("build/published/mix", cache_dir="/scratch/mixcache", shuffle_seed=1234)
    x = r.batch(step, batch_size)          # (batch_size, sample_len) tokens; advances the cursor
    ckpt["data"] = r.state_dict()          # ... later, in a new process:
    r.load_state_dict(ckpt["data"])        # raises ResumeMismatchError on any other dataset/permutation

Locations: a local mix directory; `s3://bucket/prefix` (boto3; endpoint from `s3_endpoint_url=` or
AWS_ENDPOINT_URL[_S3]; unsigned requests when `anonymous=True`, or when no credentials are configured);
`hf://datasets/org/name@revision[/subdir]` (huggingface_hub `hf_hub_download`, so HF_HUB_OFFLINE and a
pre-populated cache work; `hub_endpoint=` or HF_ENDPOINT for mirrors).

Fetching: manifest.json is read and checked (structure, totals, fingerprint) at open; a shard is fetched
only when a requested sample lives in it, and its size and sha256 are verified when it arrives (once per
reader for files found already cached or local). Remote shards live in `cache_dir`, bounded by
`cache_bytes` (least recently used shards are evicted); local shards are read in place. Every shard is
read through `numpy.memmap`.

Order: train sample k is storage sample perm_e[k mod N] with e = k // N (N = len(r), samples per pass).
perm_e is the argsort of splitmix64(i XOR base(shuffle_seed, e)) over i < N, a bijection, so no ties and
nothing depends on numpy's RNG algorithms; `shuffle_perm_sha` = sha256 of perm_0 as little-endian uint64.
Past one pass: by default (`epochs=1`) reading sample N raises `EndOfMix` (iteration stops); with
`epochs=E` (None = unbounded) epoch e uses perm_e, and the state records `epoch` and `epoch_perm_sha`.
The validation reader (`split="val"`, or `r.validation_reader()`) reads storage order unless asked to
shuffle, one pass.

State: `state_dict()` = {seq_len, samples_consumed, shuffle_seed, shuffle_perm_sha, dataset_files_sha,
step, tokens_consumed} + format, split, sample_len, num_samples, shuffle, epochs, epoch, epoch_perm_sha,
interpretation_sha256.
tokens_consumed = samples_consumed x sample_len (tokens read from the mix). Nothing is re-shuffled
on resume: every field is recomputed and compared, and any difference raises.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import json
import logging
import os
import tempfile
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mix_assets.lib.manifest import (
    DTYPES,
    INTERPRETATION_KEY,
    MANIFEST_NAME,
    ManifestError,
    check_manifest,
    interpretation_problems,
    safe_path,
    sha256_stream,
)

log = logging.getLogger("mix_assets.reader")

STATE_FORMAT = "mix_assets.reader_state/1"
DEFAULT_CACHE_BYTES = 8 << 30
_STATE_KEYS = ("seq_len", "samples_consumed", "shuffle_seed", "shuffle_perm_sha", "dataset_files_sha", "step",
               "tokens_consumed")


class ReaderError(RuntimeError):
    """The reader cannot serve what was asked."""


class ShardCorruptError(ReaderError):
    """A shard whose bytes differ from the manifest (size or sha256); the message names the file."""


class ResumeMismatchError(ValueError):
    """A state_dict that belongs to another dataset, permutation, seq_len or seed."""


class PositionError(ReaderError):
    """A read that would re-read consumed samples or skip unconsumed ones."""


class EndOfMix(IndexError):
    """Reading past the last allowed pass of the split."""


# -- the permutation ----------------------------------------------------------------------------------------
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic; a bijection of uint64)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def permutation(n: int, seed: int, epoch: int = 0) -> np.ndarray:
    """The epoch's order of n samples: argsort of splitmix64(i ^ base), base = f(seed, epoch). int64 array."""
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"shuffle_seed must be in [0, 2**64), got {seed}")
    with np.errstate(over="ignore"):
        base = _splitmix64(_splitmix64(np.array([seed], dtype=np.uint64)) ^ np.array([epoch], dtype=np.uint64))
        keys = _splitmix64(np.arange(n, dtype=np.uint64) ^ base[0])
    return np.argsort(keys, kind="stable").astype(np.int64)


def perm_sha(perm: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(perm, dtype="<u8").tobytes()).hexdigest()


# -- locations and backends -----------------------------------------------------------------------------------
def _atomic_move_into(tmp: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, dest)


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

    def cached(self, rel: str, sha: str) -> str | None:
        p = self.root / rel
        return str(p) if p.exists() else None

    def fetch(self, rel: str, sha: str, nbytes: int) -> str:
        raise ReaderError(f"{self.root / rel}: listed in the manifest but not found")

    def evict(self, rel: str, path: str) -> None:
        pass  # the source itself: nothing to delete


class _S3Backend:
    """Objects under s3://bucket/prefix, cached content-addressed (by sha256) under cache_dir/objects."""

    remote = True

    def __init__(self, url: str, cache_dir: Path, endpoint_url: str | None, anonymous: bool | None,
                 client: Any = None):
        rest = url[len("s3://"):]
        self.bucket, _, prefix = rest.partition("/")
        if not self.bucket:
            raise ReaderError(f"{url}: an S3 location needs a bucket, e.g. s3://bucket/prefix")
        self.prefix = prefix.strip("/")
        self.label = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        self.store = cache_dir / "objects"
        self.client = client if client is not None else self._client(endpoint_url, anonymous)

    @staticmethod
    def _client(endpoint_url: str | None, anonymous: bool | None) -> Any:
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config

        endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        session = boto3.session.Session()
        if anonymous is None:
            anonymous = session.get_credentials() is None
        config = Config(signature_version=UNSIGNED) if anonymous else None
        return session.client("s3", endpoint_url=endpoint_url, config=config)

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _get(self, rel: str) -> Any:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(rel))["Body"]
        except Exception as e:  # botocore ClientError carries the S3 error code
            code = getattr(e, "response", {}).get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound"):
                raise ReaderError(f"{self.label}/{rel}: not found") from None
            raise ReaderError(f"{self.label}/{rel}: cannot read ({type(e).__name__}: {e})") from e

    def read_manifest(self) -> bytes:
        with contextlib.closing(self._get(MANIFEST_NAME)) as body:
            return body.read()

    def _path(self, sha: str) -> Path:
        return self.store / sha[:2] / sha

    def cached(self, rel: str, sha: str) -> str | None:
        p = self._path(sha)
        return str(p) if p.exists() else None

    def fetch(self, rel: str, sha: str, nbytes: int) -> str:
        dest = self._path(sha)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".fetch.", dir=dest.parent)
        try:
            h = hashlib.sha256()
            n = 0
            with os.fdopen(fd, "wb") as out, contextlib.closing(self._get(rel)) as body:
                while chunk := body.read(1 << 22):
                    h.update(chunk)
                    out.write(chunk)
                    n += len(chunk)
            _raise_if_corrupt(f"{self.label}/{rel}", n, h.hexdigest(), nbytes, sha)
            _atomic_move_into(tmp, dest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return str(dest)

    def evict(self, rel: str, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class _HubBackend:
    """A hub dataset repo at a revision, through huggingface_hub's own download and cache (cache_dir/hub)."""

    remote = True

    def __init__(self, url: str, cache_dir: Path, endpoint: str | None):
        rest = url[len("hf://"):]
        if not rest.startswith("datasets/"):
            raise ReaderError(f"{url}: expected hf://datasets/org/name@revision[/subdir]")
        parts = rest[len("datasets/"):].split("/")
        if len(parts) < 2 or "@" not in parts[1]:
            raise ReaderError(f"{url}: a hub location needs a pinned revision: hf://datasets/org/name@revision")
        name, _, self.revision = parts[1].partition("@")
        self.repo_id = f"{parts[0]}/{name}"
        self.subdir = "/".join(p for p in parts[2:] if p)
        if not self.revision:
            raise ReaderError(f"{url}: empty revision after '@'")
        self.label = url
        self.hub_cache = str(cache_dir / "hub")
        self.endpoint = endpoint

    def _filename(self, rel: str) -> str:
        return f"{self.subdir}/{rel}" if self.subdir else rel

    def _download(self, rel: str) -> str:
        from huggingface_hub import hf_hub_download

        try:
            return hf_hub_download(self.repo_id, self._filename(rel), repo_type="dataset", revision=self.revision,
                                   cache_dir=self.hub_cache, endpoint=self.endpoint)
        except Exception as e:
            raise ReaderError(f"{self.label}: cannot fetch {rel} ({type(e).__name__}: {e})") from e

    def read_manifest(self) -> bytes:
        return Path(self._download(MANIFEST_NAME)).read_bytes()

    def cached(self, rel: str, sha: str) -> str | None:
        from huggingface_hub import try_to_load_from_cache

        p = try_to_load_from_cache(self.repo_id, self._filename(rel), cache_dir=self.hub_cache,
                                   revision=self.revision, repo_type="dataset")
        return p if isinstance(p, str) and os.path.exists(p) else None

    def fetch(self, rel: str, sha: str, nbytes: int) -> str:
        return self._download(rel)

    def evict(self, rel: str, path: str) -> None:
        # The snapshot entry is a symlink to a blob: remove both so the hub cache stays coherent.
        blob = os.path.realpath(path)
        for p in (path, blob):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)


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


# -- the reader -------------------------------------------------------------------------------------------------
class _Shards:
    """The shards of one split: memmaps opened on demand, remote files kept within a byte budget (LRU)."""

    def __init__(self, backend, entries: list[dict], sample_len: int, dtype: np.dtype, cache_bytes: int):
        self.backend = backend
        self.entries = entries
        self.sample_len = sample_len
        self.dtype = dtype
        self.budget = cache_bytes
        self.maps: list[np.ndarray | None] = [None] * len(entries)
        self.lru: collections.OrderedDict[int, str] = collections.OrderedDict()  # shard -> local path
        self.resident_bytes = 0
        self.fetched: list[str] = []  # relative paths fetched by this reader, in order
        self.verified: set[int] = set()
        biggest = max((e["bytes"] for e in entries), default=0)
        if backend.remote and biggest > cache_bytes:
            raise ReaderError(f"cache_bytes={cache_bytes} cannot hold one shard ({biggest} bytes); raise it")
        if backend.remote:  # account for shards a previous reader left in the cache, oldest first
            found = []
            for i, e in enumerate(entries):
                p = backend.cached(e["path"], e["sha256"])
                if p is not None:
                    found.append((os.path.getmtime(p), i, p))
            for _, i, p in sorted(found):
                self.lru[i] = p
                self.resident_bytes += entries[i]["bytes"]

    def open(self, i: int) -> np.ndarray:
        e = self.entries[i]
        path = self.lru.get(i) or self.backend.cached(e["path"], e["sha256"])
        if path is None:
            self._make_room(e["bytes"], keep=i)
            path = self.backend.fetch(e["path"], e["sha256"], e["bytes"])
            self.fetched.append(e["path"])
            log.debug("fetched %s (%d bytes)", e["path"], e["bytes"])
        if i not in self.verified:
            self._verify(i, path)
        if self.backend.remote:
            if i not in self.lru:
                self.resident_bytes += e["bytes"]
            self.lru[i] = path
            self.lru.move_to_end(i)
            with contextlib.suppress(OSError):
                os.utime(path)
            self._make_room(0, keep=i)
        mm = np.memmap(path, dtype=self.dtype, mode="r", shape=(e["samples"], self.sample_len))
        self.maps[i] = mm.view(np.ndarray)  # plain ndarray view: same mapping, cheaper indexing
        return self.maps[i]

    def _verify(self, i: int, path: str) -> None:
        e = self.entries[i]
        label = f"{self.backend.label}/{e['path']}"
        n = os.path.getsize(path)
        try:
            _raise_if_corrupt(label, n, None, e["bytes"], e["sha256"])
            with open(path, "rb") as f:
                sha, _ = sha256_stream(f)
            _raise_if_corrupt(label, n, sha, e["bytes"], e["sha256"])
        except ShardCorruptError:
            if self.backend.remote:  # a bad cached copy must not be served again
                self.backend.evict(e["path"], path)
                if self.lru.pop(i, None) is not None:
                    self.resident_bytes -= e["bytes"]
            raise
        self.verified.add(i)

    def _make_room(self, need: int, keep: int) -> None:
        while self.resident_bytes + need > self.budget:
            victim = next((j for j in self.lru if j != keep), None)
            if victim is None:
                return
            path = self.lru.pop(victim)
            self.maps[victim] = None
            self.verified.discard(victim)
            self.resident_bytes -= self.entries[victim]["bytes"]
            self.backend.evict(self.entries[victim]["path"], path)
            log.debug("evicted %s", self.entries[victim]["path"])


class MixReader:
    """Positional reader over one split of a mix. Build with `open_mix`."""

    def __init__(self, backend, manifest: dict, *, split: str, shuffle_seed: int, shuffle: bool,
                 epochs: int | None, cache_bytes: int, cache_dir: Path):
        if split not in manifest["splits"]:
            raise ReaderError(f"{backend.label}: no split {split!r} in manifest (has {sorted(manifest['splits'])})")
        self._backend = backend
        self._cache_dir = cache_dir
        self._cache_bytes = cache_bytes
        self.manifest = manifest
        self.split = split
        self.fingerprint: str = manifest["fingerprint"]
        self.seq_len: int = manifest["packing"]["seq_len"]
        self.sample_len: int = manifest["packing"]["sample_len"]
        self.dtype = np.dtype(manifest["dtype"]).newbyteorder("<")
        self.shuffle_seed = int(shuffle_seed)
        self.shuffle = bool(shuffle)
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
        self._shards = _Shards(backend, entries, self.sample_len, self.dtype, cache_bytes)
        self._starts_arr = np.asarray(self._starts, dtype=np.int64)
        self._maps = self._shards.maps  # the same list object: hot-path alias
        self._remote = backend.remote
        self._perm_cache: dict[int, np.ndarray] = {}
        self._perm0 = self._perm(0)
        self.shuffle_perm_sha = perm_sha(self._perm0)
        self.samples_consumed = 0
        self.step = 0

    # -- order ---------------------------------------------------------------------------------------------
    def _perm(self, epoch: int) -> np.ndarray:
        p = self._perm_cache.get(epoch)
        if p is None:
            p = permutation(self._n, self.shuffle_seed, epoch) if self.shuffle else np.arange(self._n, dtype=np.int64)
            if len(self._perm_cache) >= 2:  # current epoch and epoch 0 are enough
                self._perm_cache.pop(max(k for k in self._perm_cache if k != 0))
            self._perm_cache[epoch] = p
        return p

    def epoch_perm_sha(self, epoch: int) -> str:
        return perm_sha(self._perm(epoch))

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

    def samples(self, start: int, count: int) -> np.ndarray:
        """Samples [start, start + count) as one (count, sample_len) array; pure."""
        self._check_range(start, count)
        idx = np.empty(count, dtype=np.int64)
        pos = 0
        while pos < count:  # one slice per epoch touched
            e, i = divmod(start + pos, self._n)
            take = min(count - pos, self._n - i)
            idx[pos:pos + take] = self._perm(e)[i:i + take]
            pos += take
        shard = np.searchsorted(self._starts_arr, idx, side="right") - 1
        rows = idx - self._starts_arr[shard]
        out = np.empty((count, self.sample_len), dtype=self.dtype)
        shard_list = shard.tolist()
        maps = self._maps
        for si in dict.fromkeys(shard_list):  # open (fetch) what is missing, mark the rest recently used
            if maps[si] is None:
                self._shards.open(si)
            elif self._remote:
                self._shards.lru.move_to_end(si)
        if any(maps[si] is None for si in dict.fromkeys(shard_list)):
            # The cache cannot hold every shard of this batch at once: open shard by shard as rows need them.
            for j, si, row in zip(range(count), shard_list, rows.tolist()):
                out[j] = (maps[si] if maps[si] is not None else self._shards.open(si))[row]
            return out
        # Row by row: one copy per sample straight into `out` (cheaper than masks + fancy indexing).
        for j, si, row in zip(range(count), shard_list, rows.tolist()):
            out[j] = maps[si][row]
        return out

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
        return {
            "format": STATE_FORMAT,
            "split": self.split,
            "seq_len": self.seq_len,
            "sample_len": self.sample_len,
            "num_samples": self._n,
            "samples_consumed": self.samples_consumed,
            "step": self.step,
            "tokens_consumed": self.tokens_consumed,
            "shuffle": self.shuffle,
            "shuffle_seed": self.shuffle_seed,
            "shuffle_perm_sha": self.shuffle_perm_sha,
            "epochs": self.epochs,
            "epoch": self.epoch,
            "epoch_perm_sha": self.epoch_perm_sha(self.epoch),
            "dataset_files_sha": self.fingerprint,
            INTERPRETATION_KEY: self.manifest[INTERPRETATION_KEY],
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume at the state's position; raises ResumeMismatchError when it belongs to anything else."""
        if not isinstance(state, dict):
            raise ResumeMismatchError(f"reader state must be a dict, got {type(state).__name__}")
        missing = [k for k in ("format", *_STATE_KEYS) if k not in state]
        if missing:
            raise ResumeMismatchError(f"reader state lacks {missing}; was it written by mix_assets.reader?")
        if state["format"] != STATE_FORMAT:
            raise ResumeMismatchError(f"reader state format {state['format']!r}, expected {STATE_FORMAT!r}")
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
            "shuffle_perm_sha": "a different permutation (same seed, other algorithm or sample count)",
        }
        diffs = [f"{k}: checkpoint {state.get(k)!r}, this reader {mine[k]!r} ({reason})"
                 for k, reason in why.items() if k in state and state[k] != mine[k]]
        if diffs:
            raise ResumeMismatchError("refusing to resume, the checkpoint's data state does not match this reader:\n  "
                                      + "\n  ".join(diffs))
        consumed, step = state["samples_consumed"], state["step"]
        if not (isinstance(consumed, int) and isinstance(step, int) and consumed >= 0 and step >= 0):
            raise ResumeMismatchError(f"samples_consumed {consumed!r} and step {step!r} must be non-negative ints")
        if state["tokens_consumed"] != consumed * self.sample_len:
            raise ResumeMismatchError(f"tokens_consumed {state['tokens_consumed']} != samples_consumed {consumed} x "
                                      f"sample_len {self.sample_len}: the state is inconsistent")
        if self.epochs is not None and consumed > self.epochs * self._n:
            raise ResumeMismatchError(f"samples_consumed {consumed} is past {self.epochs} pass(es) of {self._n}; "
                                      f"open with a larger epochs=")
        e = consumed // self._n
        if "epoch_perm_sha" in state and state.get("epoch") == e and state["epoch_perm_sha"] != self.epoch_perm_sha(e):
            raise ResumeMismatchError(f"epoch_perm_sha of epoch {e}: checkpoint {state['epoch_perm_sha']}, this reader "
                                      f"{self.epoch_perm_sha(e)} (a different permutation for that pass)")
        if consumed < self.samples_consumed:
            raise PositionError(f"load_state_dict would move this reader back from sample {self.samples_consumed} "
                                f"to {consumed}; open a new reader to roll back deliberately")
        self.samples_consumed, self.step = consumed, step

    # -- misc ---------------------------------------------------------------------------------------------------
    @property
    def fetched(self) -> list[str]:
        """Relative paths of the shards this reader fetched from a remote location, in order."""
        return list(self._shards.fetched)

    @property
    def cache_resident_bytes(self) -> int:
        return self._shards.resident_bytes

    def file_path(self, rel: str) -> str:
        """A non-shard file of the revision (e.g. "tokenizer/tokenizer.json") as a local path, fetched
        from this location like a shard and checked against its manifest size and sha256."""
        entry = next((f for f in self.manifest["files"] if f["path"] == rel), None)
        if entry is None:
            raise ReaderError(f"{self._backend.label}: {rel} is not listed in the manifest's files")
        path = self._backend.cached(rel, entry["sha256"])
        if path is None:
            path = self._backend.fetch(rel, entry["sha256"], entry["bytes"])
        with open(path, "rb") as f:
            sha, n = sha256_stream(f)
        _raise_if_corrupt(f"{self._backend.label}/{rel}", n, sha, entry["bytes"], entry["sha256"])
        return path

    def validation_reader(self, shuffle: bool = False, shuffle_seed: int | None = None) -> MixReader:
        """A separate reader over the val split (storage order, one pass) sharing this location and cache dir."""
        return MixReader(self._backend, self.manifest, split="val",
                         shuffle_seed=self.shuffle_seed if shuffle_seed is None else shuffle_seed,
                         shuffle=shuffle, epochs=1, cache_bytes=self._cache_bytes, cache_dir=self._cache_dir)

    def __repr__(self) -> str:
        return (f"MixReader({self._backend.label!r}, split={self.split!r}, samples={self._n}, "
                f"sample_len={self.sample_len}, fingerprint={self.fingerprint[:12]}…, "
                f"cursor={self.samples_consumed})")


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
    epochs: int | None = 1,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    expected_fingerprint: str | None = None,
    s3_endpoint_url: str | None = None,
    anonymous: bool | None = None,
    hub_endpoint: str | None = None,
    s3_client: Any = None,
) -> MixReader:
    """Open one split of a published mix (see the module doc).

    shuffle: default True for train, False for val. epochs: passes allowed (None: unbounded).
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
                       epochs=epochs, cache_bytes=cache_bytes, cache_dir=cache)
    if backend.remote:  # a local config was checked above; the fingerprinted config binds the interpretation
        problems = interpretation_problems(manifest, lambda rel: io.BytesIO(_read_small(backend, rel)))
        if problems:
            raise ManifestError(problems, origin=f"{backend.label}/{MANIFEST_NAME}")
    return reader


def _read_small(backend, rel: str) -> bytes:
    """A small remote file's bytes (the caller checks its sha256). S3: read in memory, outside the shard
    cache; hub: through huggingface_hub's cache, so an offline reopen finds it."""
    if isinstance(backend, _S3Backend):
        with contextlib.closing(backend._get(rel)) as body:
            return body.read()
    return Path(backend.fetch(rel, "", 0)).read_bytes()


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
