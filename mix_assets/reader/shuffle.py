"""The order of a split's samples: the shuffle schemes (SCHEMES), the global permutation of one epoch
(`permutation`, splitmix64 keys, no numpy RNG), the shard_window one (`shard_window_permutation`) and the
hash a state records of one (`perm_sha`)."""

from __future__ import annotations

import hashlib

import numpy as np


SCHEMES = ("global", "shard_window")


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
