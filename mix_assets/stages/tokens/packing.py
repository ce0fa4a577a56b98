"""Budget fill, stream order and contiguous packing of token streams into fixed-length samples.

Pure logic, no I/O besides the `write_shard` callback: the caller owns files.

* Budget fill (per source): train documents in a seeded selection order; the unique set is the
  shortest prefix holding >= N x share tokens; the stream repeats that set for `epochs` (a
  fractional last epoch takes a prefix) and is cut at exactly N x share x epochs tokens, the last
  appearance truncated. A source whose kept train tokens cannot reach N x share is an error.
* Quality tiers (a source whose `filters.quality` has `tiers`, fill_tiered): each document of tier t counts
  E_t = source epochs x tier epochs times; the unique set is the shortest prefix of the selection order whose
  tokens x E_t reach the stream budget N x share x epochs, and each tier's stream walks its unique documents
  E_t times (floor(tokens x E_t); the tier of the document that reached the budget takes what is left, so the
  source's stream is still exactly its budget). Only train documents are ever repeated.
* Stream order: every (document, epoch) appearance sorted by hash(seed, doc_id, epoch), so
  sources and epochs interleave deterministically. Appearances are numpy columns (a few tens of
  bytes each), never per-document Python objects.
* Packing: appearances are concatenated (plus the separator token when configured, counted as
  part of its document), cut into samples of `sample_len` tokens, grouped into shards of
  `shard_samples`; the tail that does not fill a sample is dropped and counted. A sample has a
  seam when a document boundary falls strictly inside it. With `write_index`, each shard's document
  start offsets are written beside it (format/docindex.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

import numpy as np
import xxhash

from mix_assets.format.shards import ShardRecord, token_dtype


class ShortfallError(ValueError):
    """A source whose kept documents cannot fill its token budget."""


@dataclass(frozen=True)
class Appearances:
    """Columns of a source's appearances, in fill order (epoch-major, then selection order)."""

    index: np.ndarray  # int64: position of the document in the source's selection order
    epoch: np.ndarray  # int64
    take: np.ndarray  # int64: tokens used (< the document's length only for the final, truncated one)

    def __len__(self) -> int:
        return len(self.index)


def fill_budget(
    source: str,
    lengths: np.ndarray,
    unique_budget: int,
    stream_budget: int,
    n_docs_available: Optional[int] = None,
) -> tuple[int, Appearances]:
    """(unique documents used, appearances) for one source; `lengths` in selection order."""
    lengths = np.asarray(lengths, dtype=np.int64)
    cum = np.cumsum(lengths)
    have = int(cum[-1]) if len(cum) else 0
    if have < unique_budget:
        raise ShortfallError(
            f"source {source!r} cannot fill its token budget: it needs {unique_budget:,} unique train "
            f"tokens (N x share; {stream_budget:,} with epochs) but has {have:,} in "
            f"{n_docs_available if n_docs_available is not None else len(lengths):,} kept train documents "
            f"after dedup, exclusion masks and the validation split. The mix cannot be topped up after "
            f"publication: raise the source's raw sample (headroom, or lower filters.keep_share to what "
            f"its filters really keep) or lower its share."
        )
    n_unique = int(np.searchsorted(cum, unique_budget, side="left")) + 1 if unique_budget > 0 else 0
    return n_unique, _passes(lengths, np.flatnonzero(lengths[:n_unique] > 0), stream_budget)


def _passes(lengths: np.ndarray, nz: np.ndarray, budget: int) -> Appearances:
    """`budget` tokens of passes over the documents at positions `nz` (non-empty, selection order): every
    pass walks them in order; the last (partial) pass takes the prefix reaching the budget, its final
    document truncated."""
    per_epoch = int(lengths[nz].sum())
    full, rem = (divmod(max(budget, 0), per_epoch) if per_epoch else (0, 0))
    k = int(np.searchsorted(np.cumsum(lengths[nz]), rem, side="left")) + 1 if rem else 0
    index = np.concatenate([np.tile(nz, full), nz[:k]])
    epoch = np.concatenate([np.repeat(np.arange(full, dtype=np.int64), len(nz)), np.full(k, full, np.int64)])
    take = lengths[index]
    if k:
        take[-1] = rem - (int(lengths[nz[: k - 1]].sum()))
    return Appearances(index.astype(np.int64, copy=False), epoch, take)


@dataclass(frozen=True)
class TierFill:
    """Per tier (best first) of a tiered source's fill: unique documents, their tokens, the tokens its
    stream holds and the effective epochs it was filled with."""

    documents: list[int]
    unique_tokens: list[int]
    train_tokens: list[int]
    epochs: list[float]


def fill_tiered(
    source: str,
    lengths: np.ndarray,
    tier: np.ndarray,
    epochs: list[float],
    stream_budget: int,
    n_docs_available: Optional[int] = None,
) -> tuple[int, Appearances, TierFill]:
    """(unique documents used, appearances, per-tier figures) for a source split in quality tiers;
    `lengths` and `tier` (int64 tier index per document) in selection order, `epochs[t]` the effective epochs
    of tier t (source epochs x tier epochs, each >= 1)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    tier = np.asarray(tier, dtype=np.int64)
    e = np.asarray(epochs, dtype=np.float64)
    cum = np.cumsum(lengths * e[tier]) if len(lengths) else np.zeros(0)
    have = float(cum[-1]) if len(cum) else 0.0
    if have < stream_budget:
        raise ShortfallError(
            f"source {source!r} cannot fill its token budget: it needs {stream_budget:,} train tokens (N x share x "
            f"epochs) with each quality tier repeated its epochs, but its "
            f"{n_docs_available if n_docs_available is not None else len(lengths):,} kept train documents give "
            f"{int(have):,} after dedup, exclusion masks and the validation split. The mix cannot be topped up "
            f"after publication: raise the source's raw sample (headroom, or lower filters.keep_share to what its "
            f"filters really keep) or lower its share.")
    n_unique = int(np.searchsorted(cum, stream_budget, side="left")) + 1 if stream_budget > 0 else 0
    n_tiers = len(e)
    nz = [np.flatnonzero((lengths[:n_unique] > 0) & (tier[:n_unique] == t)) for t in range(n_tiers)]
    unique = [int(lengths[x].sum()) for x in nz]
    budget = [int(math.floor(u * float(e[t]))) for t, u in enumerate(unique)]
    if n_unique:
        # the tier of the document that reached the budget takes what the others leave: the stream is exact
        last = int(tier[n_unique - 1])
        budget[last] = stream_budget - sum(b for t, b in enumerate(budget) if t != last)
    parts = [_passes(lengths, nz[t], budget[t]) for t in range(n_tiers)]
    apps = Appearances(np.concatenate([p.index for p in parts]), np.concatenate([p.epoch for p in parts]),
                       np.concatenate([p.take for p in parts]))
    fill = TierFill(np.bincount(tier[:n_unique], minlength=n_tiers).astype(int).tolist(), unique,
                    [int(p.take.sum()) for p in parts], [float(x) for x in e])
    return n_unique, apps, fill


def order_key(seed: int, doc_id: str, epoch: int) -> int:
    return xxhash.xxh64_intdigest(f"{doc_id}\x00{epoch}".encode("utf-8"), seed=seed & 0xFFFFFFFFFFFFFFFF)


def order_keys(seed: int, doc_ids: Iterable[str], epochs: Iterable[int], n: int) -> np.ndarray:
    """uint64 stream-order keys of n (doc_id, epoch) appearances (iterables, consumed lazily)."""
    return np.fromiter((order_key(seed, d, e) for d, e in zip(doc_ids, epochs)), np.uint64, n)


def order_from_keys(keys: np.ndarray, epochs: np.ndarray, doc_id_rank: Callable[[], np.ndarray]) -> np.ndarray:
    """Permutation sorting by (key, doc_id, epoch); `doc_id_rank()` -> each appearance's position in a
    stable sort by doc_id, only called when two keys collide."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    if len(sk) > 1 and bool((sk[1:] == sk[:-1]).any()):
        order = np.lexsort((np.asarray(epochs), doc_id_rank(), keys))
    return order


def stream_order(seed: int, doc_ids: list[str], epochs: np.ndarray) -> np.ndarray:
    """Permutation putting appearances in stream order (hash, then doc_id and epoch on ties)."""
    epochs = np.asarray(epochs, np.int64)
    keys = order_keys(seed, doc_ids, epochs.tolist(), len(doc_ids))

    def rank() -> np.ndarray:
        r = np.empty(len(doc_ids), np.int64)
        r[sorted(range(len(doc_ids)), key=doc_ids.__getitem__)] = np.arange(len(doc_ids))
        return r

    return order_from_keys(keys, epochs, rank)


@dataclass
class SplitStats:
    sample_len: int
    samples: int = 0
    emitted_tokens: int = 0
    dropped_tail_tokens: int = 0
    seam_samples: int = 0
    documents: int = 0
    sources: dict[str, int] = field(default_factory=dict)
    shards: list[ShardRecord] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.samples * self.sample_len

    @property
    def seam_rate(self) -> float:
        return self.seam_samples / self.samples if self.samples else 0.0

    def to_json(self) -> dict:
        return {
            "samples": self.samples,
            "tokens": self.tokens,
            "emitted_tokens": self.emitted_tokens,
            "dropped_tail_tokens": self.dropped_tail_tokens,
            "seam_rate": self.seam_rate,
            "seam_samples": self.seam_samples,
            "documents": self.documents,
            "sources": dict(sorted(self.sources.items())),
            "shards": [{k: v for k, v in vars(s).items() if v is not None} for s in self.shards],
        }


# write_shard(index, tokens) -> ShardRecord; tokens is a 1-D array of whole samples (format/shards.ShardWriter.shard).
ShardWriter = Callable[[int, np.ndarray], ShardRecord]
# write_index(index, starts) -> the record's doc_index entry; starts: int64 offsets of document starts
#   (format/shards.ShardWriter.doc_index)
IndexWriter = Callable[[int, np.ndarray], dict]


class Packer:
    """Streaming contiguous packer: memory is one shard buffer, whatever the stream length."""

    def __init__(self, sample_len: int, shard_samples: int, dtype: str, write_shard: ShardWriter,
                 write_index: Optional[IndexWriter] = None):
        if shard_samples < 1:
            raise ValueError("shard_samples must be >= 1")
        self.L = sample_len
        self.buf = np.empty(sample_len * shard_samples, dtype=token_dtype(dtype))
        self.fill = 0
        self.pos = 0  # tokens fed so far (global stream position)
        self.write_shard = write_shard
        self.write_index = write_index
        self.starts: list[int] = []  # offsets in the shard buffer of the documents starting in it
        self.stats = SplitStats(sample_len)
        self._last_seam = -1
        self._finished = False

    def feed(self, tokens: np.ndarray, source: str) -> None:
        """Append one document appearance."""
        n = len(tokens)
        if n == 0:
            return
        if self.pos and self.pos % self.L:  # a boundary strictly inside sample pos // L
            s = self.pos // self.L
            if s != self._last_seam:
                self.stats.seam_samples += 1
                self._last_seam = s
        if self.write_index is not None:
            self.starts.append(self.fill)  # < len(buf): a full buffer is flushed at once
        self.stats.sources[source] = self.stats.sources.get(source, 0) + n
        self.stats.emitted_tokens += n
        self.pos += n
        off = 0
        while off < n:
            k = min(n - off, len(self.buf) - self.fill)
            self.buf[self.fill : self.fill + k] = tokens[off : off + k]
            self.fill += k
            off += k
            if self.fill == len(self.buf):
                self._flush(self.fill)

    def feed_many(self, tokens: np.ndarray, lengths: np.ndarray, sources: np.ndarray, names: list[str]) -> None:
        """Append appearances back to back (`tokens`: their ids concatenated; per appearance its length and its
        source as an index into `names`): the same shards, stats and document index as `feed` on each in turn,
        with numpy work per call instead of Python work per appearance."""
        lengths = np.asarray(lengths, np.int64)
        if len(tokens) != int(lengths.sum()):
            raise ValueError(f"feed_many: {len(tokens)} tokens for lengths summing to {int(lengths.sum())}")
        nz = lengths > 0
        lens, src = lengths[nz], np.asarray(sources, np.int64)[nz]
        if not len(lens):
            return
        starts = self.pos + np.cumsum(lens) - lens  # stream position of each appearance's first token
        inside = starts[starts % self.L != 0] // self.L  # samples a boundary falls strictly inside (ascending)
        if len(inside):
            seams = np.unique(inside)
            self.stats.seam_samples += len(seams) - int(seams[0] == self._last_seam)
            self._last_seam = int(seams[-1])
        per_source = np.bincount(src, weights=lens, minlength=len(names))
        for i in np.flatnonzero(per_source).tolist():
            self.stats.sources[names[i]] = self.stats.sources.get(names[i], 0) + int(per_source[i])
        total = int(lens.sum())
        self.stats.emitted_tokens += total
        S = len(self.buf)
        rel = starts - (self.pos - self.fill)  # from the start of the current shard buffer
        self.pos += total
        cut = 0  # appearances whose start is already recorded in self.starts
        off, n = 0, len(tokens)
        while off < n:
            k = min(n - off, S - self.fill)
            self.buf[self.fill : self.fill + k] = tokens[off : off + k]
            self.fill += k
            off += k
            if self.fill == S:
                if self.write_index is not None:
                    end = int(np.searchsorted(rel, S, side="left"))
                    self.starts.extend(rel[cut:end].tolist())
                    rel, cut = rel - S, end
                self._flush(self.fill)
            elif self.write_index is not None:
                self.starts.extend(rel[cut:].tolist())
                cut = len(rel)

    def _flush(self, n_tokens: int) -> None:
        rec = self.write_shard(len(self.stats.shards), self.buf[:n_tokens])
        if rec.samples * self.L != n_tokens or rec.samples == 0:
            raise RuntimeError(f"{rec.path}: writer recorded {rec.samples} samples for {n_tokens} tokens")
        if self.write_index is not None:
            starts = np.asarray(self.starts, np.int64)
            rec.doc_index = self.write_index(len(self.stats.shards), starts[starts < n_tokens])  # tail dropped
            self.starts = []
        self.stats.shards.append(rec)
        self.stats.samples += rec.samples
        self.fill = 0

    def finish(self) -> SplitStats:
        if self._finished:
            return self.stats
        self._finished = True
        whole = (self.fill // self.L) * self.L
        if whole:
            self._flush(whole)
        self.stats.dropped_tail_tokens = self.pos - self.stats.samples * self.L
        if self._last_seam >= self.stats.samples:  # the seam fell in the dropped tail
            self.stats.seam_samples -= 1
        return self.stats
