"""Texts to token ids: the one function whose code decides the ids token_shards packs (no storage here).

Kept apart from shards.py on purpose: its source (and that of every project module it imports: none)
is the code identity of the token-id cache (stages/tokens/idcache.py), so an edit to packing or to the
map/reduce plumbing does not invalidate cached ids, while any edit here does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

import numpy as np
from tokenizers import Tokenizer

ADD_SPECIAL_TOKENS = False  # the tokenizer's post-processor (BOS/EOS templates) is not applied


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


def encode_texts(tok: Tokenizer, texts: list[str], dtype: np.dtype, separator_id: Optional[int],
                 batch_docs: int, batch_chars: int) -> tuple[np.ndarray, np.ndarray]:
    """(every document's ids back to back, each followed by `separator_id` when set; lengths per document,
    separator included). A document's ids do not depend on the batching nor on the other documents."""
    flats, lens = [], []
    for batch in text_batches(texts, batch_docs, batch_chars):
        # one flat list per batch, separators appended in place: each document's id list is freed
        # at once (no list of lists for the cyclic GC to walk, no np.insert copy)
        ids: list[int] = []
        for e in tok.encode_batch_fast(batch, add_special_tokens=ADD_SPECIAL_TOKENS):
            doc = e.ids
            ids += doc
            lens.append(len(doc))
            if separator_id is not None:
                ids.append(separator_id)
        flats.append(np.array(ids, dtype))
    n = np.array(lens, np.int64)
    if separator_id is not None:
        n += 1
    return (np.concatenate(flats) if flats else np.zeros(0, dtype)), n
