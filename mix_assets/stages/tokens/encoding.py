"""Texts to token ids: the one function whose code decides the ids token_shards packs (no storage here).

Kept apart from shards.py on purpose: its source (and that of every project module it imports: backends.py,
bytelevel.py) is the code identity of the token-id cache (stages/tokens/idcache.py), so an edit to packing or
to the map/reduce plumbing does not invalidate cached ids, while any edit here does. Which backend encodes
(backends.encoder_for) is not part of it: both give the same ids (checked every build).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

import numpy as np

from mix_assets.stages.tokens import backends

# the tokenizer's post-processor (BOS/EOS templates) is not applied (backends encode with add_special_tokens=False)
ADD_SPECIAL_TOKENS = backends.ADD_SPECIAL_TOKENS
encoder_for = backends.encoder_for


def text_batches(texts: list[str], batch_docs: int, batch_chars: int) -> Iterator[list[str]]:
    """`texts` cut into batches of at most `batch_docs` documents, closed once `batch_chars` is reached."""
    batch, chars = [], 0
    for t in texts:
        batch.append(t)
        chars += len(t)
        if len(batch) >= batch_docs or chars >= batch_chars:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def encode_texts(encoder, texts: list[str], dtype: np.dtype, separator_id: Optional[int],
                 batch_docs: int, batch_chars: int, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(every document's ids back to back, each followed by `separator_id` when set; lengths per document,
    separator included), `encoder` a backends encoder. A document's ids do not depend on the batching, the
    backend, the threads nor on the other documents."""
    flats, lens = [], []
    for batch in text_batches(texts, batch_docs, batch_chars):
        flat, n = encoder.encode_flat(batch, threads, dtype, separator_id)
        flats.append(flat)
        lens.append(n)
    return ((np.concatenate(flats) if flats else np.zeros(0, dtype)),
            (np.concatenate(lens) if lens else np.zeros(0, np.int64)))
