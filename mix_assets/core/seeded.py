"""Seeded uniform hashes of string keys: the draws a build must reproduce from its seed alone.

`unit_hash(seed, key)` is the validation split's rule (a document is val when the hash of its cluster
is below `split.val_fraction`: stages/split, recounted by the manifest checker from the review files),
the train selection order (stages/tokens/shards) and the tokenizer's training sample (stages/tokens/tokenizer).
"""

from __future__ import annotations

import xxhash


def unit_hash(seed: int, key: str) -> float:
    """A uniform number in [0, 1) that depends only on (seed, key)."""
    return xxhash.xxh64_intdigest(key.encode("utf-8"), seed=seed & 0xFFFFFFFFFFFFFFFF) / 2.0**64
