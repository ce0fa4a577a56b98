"""The reader of one split (MixReader), opening a mix from its location (open_mix: manifest checked, backend
chosen), and the state's format and fields (STATE_FORMAT, _checked_state), as the package doc describes."""

from __future__ import annotations

import io
import json
import os
import threading
import weakref
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from mix_assets.format import docindex
from mix_assets.format.checker import check_manifest
from mix_assets.format.checks.config import interpretation_problems
from mix_assets.format.manifest import DTYPES, INTERPRETATION_KEY, MANIFEST_NAME, ManifestError
from mix_assets.format.paths import safe_path
from mix_assets.format.shards import token_dtype
from mix_assets.reader.backends import _backend
from mix_assets.reader.errors import (
    EndOfMix,
    NoDocIndexError,
    PositionError,
    ReaderError,
    ResumeMismatchError,
    ShardCorruptError,
)
from mix_assets.reader.plan import StepPlan
from mix_assets.reader.prefetch import _Prefetcher
from mix_assets.reader.shards import _Shards
from mix_assets.reader.shuffle import SCHEMES, perm_sha, permutation, shard_window_permutation


STATE_FORMAT = "mix_assets.reader_state/2"
STATE_FORMAT_1 = "mix_assets.reader_state/1"  # before shuffle schemes: read as the global scheme


DEFAULT_CACHE_BYTES = 8 << 30


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
        self.dtype = token_dtype(manifest["dtype"])
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
    """Open one split of a published mix (see the package doc, mix_assets/reader/__init__.py).

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
