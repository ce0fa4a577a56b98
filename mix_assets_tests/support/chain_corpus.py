"""A small corpus whose largest cluster is a chain of near-copies across sources (partitioned reduce tests).

Link k of the chain is link k-1 with 5 consecutive words replaced (Jaccard ~0.95 between neighbours on 5-word
shingles), so only the chain joins its ends (ends below the threshold); its documents alternate over three
sources and their doc_ids spread over every partition. Around it: unrelated documents and exact copies.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq

SOURCES = ("a", "b", "c")
CHAIN = 14  # links of the chain


def chain_texts(rng: random.Random, words: int = 400) -> list[str]:
    vocab = [f"w{k}" for k in range(3000)]
    text = [rng.choice(vocab) for _ in range(words)]
    out = [" ".join(text)]
    for _ in range(CHAIN - 1):
        at = rng.randrange(0, words - 5)
        text[at:at + 5] = [rng.choice(vocab) for _ in range(5)]
        out.append(" ".join(text))
    return out


def write(folder, seed: int = 5, others: int = 240) -> dict[str, str]:
    """{source: documents parquet (doc_id, text, n_chars)} in `folder`."""
    rng = random.Random(seed)
    vocab = [f"v{k}" for k in range(5000)]
    docs = {s: [] for s in SOURCES}
    for k, t in enumerate(chain_texts(rng)):
        docs[SOURCES[k % 3]].append((f"chain-{rng.getrandbits(32):08x}", t))
    for k in range(others):
        t = " ".join(rng.choice(vocab) for _ in range(rng.randrange(20, 200)))
        docs[SOURCES[k % 3]].append((f"doc-{rng.getrandbits(32):08x}", t))
        if k % 17 == 0:  # an exact copy in the next source
            docs[SOURCES[(k + 1) % 3]].append((f"copy-{rng.getrandbits(32):08x}", t))
    paths = {}
    for s, rows in docs.items():
        paths[s] = str(folder / f"{s}.parquet")
        pq.write_table(pa.table({"doc_id": [d for d, _ in rows], "text": [t for _, t in rows],
                                 "n_chars": [len(t) for _, t in rows]}), paths[s], row_group_size=50)
    return paths
