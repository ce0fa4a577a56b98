"""Tokenise kept documents once and write train/val token shards with bounded memory.

Pass 1 (map/reduce on `core/engine`): per source and round, the wanted rows of its raw Parquet
(val documents, then the train prefix the budget needs) are cut into `chunk_rows` row ranges;
`encode_chunk` runs on each as a map task (in process or on Ray: pure, it loads the tokenizer by
path + sha256 once per process) and returns the wanted documents' ids as one flat array + lengths;
results come back in chunk order and the reduce appends them to a local spill file (one dtype array).
A document whose text is in the token-id cache (idcache.py) is read from it instead of encoded, and each
encoded chunk is stored there as it arrives: the same ids per document, so the same bytes, with or without it.
Train documents are read in rounds: only as many as the budget fill needs (estimated from byte
counts, then corrected with the observed bytes/token), so the excess headroom is not encoded;
the final selection depends only on true token counts, never on the estimate.
Pass 2 spills each split's appearances to local files by key range of their stream-order key
(BUCKET_APPEARANCES per bucket), then per bucket in key order: sorts it, gathers its documents' ids from
the spill (GATHER_TOKENS at a time, one pread per document into one buffer) and feeds them to the packer
(packing.py, `feed_many`: numpy work per gather, not Python work per document), whose shards
format/shards.ShardWriter writes atomically through `Storage` (the one encoder of the shard bytes); the stream docs are written a
row group at a time. Equal keys share a bucket, so the bytes do not depend on the bucket count.
Peak memory: the engine's window of chunk results + one shard buffer + one bucket + one gather (GATHER_TOKENS
ids) + O(documents)
numpy/Arrow columns per source (doc ids stay in Arrow string arrays; raw rows, offsets, lengths and the
budget fill's appearances are int64 arrays, a few tens of bytes per document): no Python object is held
per document.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from tokenizers import Tokenizer

from mix_assets.core import engine, layout, scratch, tables, transport
from mix_assets.core.seeded import unit_hash
from mix_assets.format.shards import ShardWriter, dtype_for_vocab, shard_bytes, token_dtype
from mix_assets.stages.lines import lines as lines_lib
from mix_assets.stages.quality import tiers as quality_tiers
from mix_assets.stages.tokens import encoding, idcache
from mix_assets.stages.tokens.packing import (
    Appearances,
    Packer,
    SplitStats,
    fill_budget,
    fill_tiered,
    order_from_keys,
    order_keys,
)
from mix_assets.core.progress import Progress
from mix_assets.core.transport import UPLOAD
from mix_assets.stages.tokens.tokenizer import separator_id


@dataclass(frozen=True)
class SourceBudget:
    name: str
    unique_budget: int  # N x share
    stream_budget: int  # N x share x epochs
    epochs: float
    # quality tiers (stages/quality/tiers.py), best first: names and effective epochs (source x tier); () = none
    tier_names: tuple[str, ...] = ()
    tier_epochs: tuple[float, ...] = ()


@dataclass(frozen=True)
class PackingPlan:
    seq_len: int
    sample_len: int
    shard_tokens: int
    separator_id: Optional[int]
    encode_batch_docs: int = 1000
    seed: int = 0
    separator: Optional[str] = None
    shifted_targets: bool = False
    doc_index: bool = False  # write layout.DOC_INDEX beside each shard (not part of how samples are read)

    def to_json(self) -> dict:
        """The manifest's `packing` section."""
        return {
            "rule": "contiguous",
            "separator": self.separator,
            "separator_id": self.separator_id,
            "seq_len": self.seq_len,
            "sample_len": self.sample_len,
            "shifted_targets": self.shifted_targets,
        }

    @property
    def shard_samples(self) -> int:
        return max(1, self.shard_tokens // self.sample_len)


@dataclass
class SourceResult:
    unique_documents: int = 0
    budget_tokens: int = 0
    epochs: float = 1.0
    train_tokens: int = 0
    val_tokens: int = 0
    encoded_train_documents: int = 0  # how many were encoded to find the unique set (>= unique)
    tiers: Optional[dict[str, dict]] = None  # per quality tier: epochs, documents, unique and train tokens


@dataclass
class ShardsResult:
    dtype: str
    splits: dict[str, SplitStats]
    sources: dict[str, SourceResult]
    encoded_bytes: int = 0  # UTF-8 bytes of text encoded
    encoded_tokens: int = 0  # ids produced by the tokenizer (separators excluded)
    rounds: dict[str, int] = field(default_factory=dict)
    cache_key: Optional[str] = None  # the token-id cache used (idcache.cache_key), None without one
    tokenizer_sha256: Optional[str] = None
    # per source: documents whose ids came from the token-id cache and documents encoded
    cache_docs: dict[str, tuple[int, int]] = field(default_factory=dict)
    backend: str = "hf"  # the encoder that ran (backends: tiktoken | hf); never in shard_stats.json
    backend_reason: str = ""  # why HF when it was not the fast backend
    text_keys_reused: list[str] = field(default_factory=list)  # sources whose text keys came from the store

    def cache_line(self) -> str:
        """What the token-id cache saved, for the log."""
        hit, miss = (sum(v[i] for v in self.cache_docs.values()) for i in (0, 1))
        under = f"tokenizer {(self.tokenizer_sha256 or '?')[:12]}"
        if self.cache_key is None:
            return f"encoded {miss:,} documents (no token cache)"
        return (f"encoded {miss:,} documents, {hit:,} from the token cache (ids of unchanged text under {under}, "
                f"cache key {self.cache_key[:12]}); per source: "
                + ", ".join(f"{s} {h:,} cached / {m:,} encoded" for s, (h, m) in sorted(self.cache_docs.items()))
                + (f"; text keys of {', '.join(sorted(self.text_keys_reused))} read from the object store (same file "
                   "bytes), not hashed again" if self.text_keys_reused else ""))

    def to_json(self, packing: Optional[dict] = None) -> dict:
        return {
            "dtype": self.dtype,
            "packing": packing,
            "splits": {k: v.to_json() for k, v in self.splits.items()},
            "sources": {
                k: {
                    "train_tokens": v.train_tokens,
                    "val_tokens": v.val_tokens,
                    "budget_tokens": v.budget_tokens,
                    "epochs": v.epochs,
                    "unique_documents": v.unique_documents,
                    **({"tiers": v.tiers} if v.tiers else {}),
                }
                for k, v in sorted(self.sources.items())
            },
        }


class _Spill:
    """Append-only local file of token ids; documents addressed by (offset, length) in tokens."""

    def __init__(self, path: str, dtype: np.dtype):
        self.path, self.dtype = path, dtype
        self.f = open(path, "wb")
        self.n = 0

    def append(self, flat: np.ndarray) -> int:
        off = self.n
        self.f.write(flat.astype(self.dtype, copy=False).tobytes())
        self.n += len(flat)
        return off

    def reader(self) -> "_SpillReader":
        """A reader over the closed (flushed) spill."""
        if not self.f.closed:
            self.f.flush()
        return _SpillReader(self.path, self.dtype)

    def close(self) -> None:
        self.f.close()


@dataclass
class _SourceDocs:
    """One source's documents as columns: val documents first, then train in selection order."""

    ids: pa.Array  # doc_id strings (Arrow: no Python object per document)
    n_val: int
    n_bytes: np.ndarray  # int64 UTF-8 bytes per document (val, then train in selection order)
    rows: Optional[np.ndarray] = None  # int64 row of each document in the raw Parquet (read once)
    name: Optional[str] = None  # the source (the token-id cache is per source)
    offset: np.ndarray = field(init=False)  # int64 spill offset per document (-1 = not encoded)
    length: np.ndarray = field(init=False)  # int64 tokens per document, separator included
    apps: Optional[Appearances] = None  # the budget fill, positions in the train documents
    tier: Optional[np.ndarray] = None  # int64 quality tier of each train document (selection order); None: untiered

    def __post_init__(self):
        self.offset = np.full(len(self.ids), -1, np.int64)
        self.length = np.zeros(len(self.ids), np.int64)

    @property
    def sel_bytes(self) -> np.ndarray:
        """n_bytes of the train documents, selection order."""
        return self.n_bytes[self.n_val :]


_CHUNK = 65536


def _strings(arr) -> Iterator[str]:
    """The values of an Arrow string array as Python str, converted one slice at a time."""
    for i in range(0, len(arr), _CHUNK):
        yield from arr.slice(i, _CHUNK).to_pylist()


def _stable_rank(arr) -> np.ndarray:
    """Each element's position in a stable sort of the strings (Arrow sorts UTF-8 bytes, which is
    code point order, the order Python compares str in)."""
    order = pc.sort_indices(arr).to_numpy()
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank


def _selection_order(seed: int, ids: pa.Array) -> np.ndarray:
    """Train documents sorted by (unit_hash(seed, "sel:" + doc_id), doc_id), stable."""
    u = np.fromiter((unit_hash(seed, f"sel:{d}") for d in _strings(ids)), np.float64, len(ids))
    order = np.argsort(u, kind="stable")
    su = u[order]
    if len(su) > 1 and bool((su[1:] == su[:-1]).any()):  # equal hashes: doc_id decides
        order = np.lexsort((_stable_rank(ids), u))
    return order


# Over-encoding margin of a round. Round 1 estimates bytes/token from the source's val documents
# (hundreds of them at any real size, so the estimate is within ~1 %); every document encoded past
# the budget is tokenised for nothing, which at +10 % cost a tenth of token_shards. A short round
# is followed by a small one sized from the train documents' own ratio.
ROUND_MARGIN = 1.02


def _round_estimate(sd: _SourceDocs, done: int, val: tuple[int, int], mix_val: tuple[int, int],
                    guess: float) -> float:
    """Bytes per token for a source's next round: its own train documents' once some are encoded, else
    its own val documents' (encoded in round 0), else every source's val documents', else the guess.
    Never another source's train documents, so a source's rounds do not depend on the other sources."""
    have = int(sd.length[sd.n_val : sd.n_val + done].sum())
    if have:
        return float(sd.sel_bytes[:done].sum()) / have
    for nbytes, tokens in (val, mix_val):
        if tokens:
            return nbytes / tokens
    return guess


def _encode_sources(budgets, per_source: dict[str, _SourceDocs], raw_paths, enc: _EncodeMap,
                    bytes_per_token_guess, result) -> None:
    """Pass 1, in rounds, each ONE map over every source still short (chunks in source order, so
    2 workers are not left idle at a source's tail): round 0 encodes every source's val documents;
    round k >= 1 each source's next train prefix, sized from its own bytes/token estimate
    (`_round_estimate`). A source whose kept train documents cannot fill its budget fails with
    ShortfallError at the end of the round that exhausted it."""
    names = sorted(budgets)
    val = dict(zip(names, _read_sources(
        [(raw_paths[s], per_source[s], np.arange(per_source[s].n_val, dtype=np.int64)) for s in names], enc)))
    mix_val = tuple(int(sum(v[i] for v in val.values())) for i in (0, 1))
    done, rounds, active = dict.fromkeys(names, 0), dict.fromkeys(names, 0), list(names)
    while active:
        reads = []
        for s in active:
            sd, n_sel = per_source[s], len(per_source[s].ids) - per_source[s].n_val
            bpt = _round_estimate(sd, done[s], val[s], mix_val, bytes_per_token_guess)
            if sd.tier is None:
                need = budgets[s].unique_budget - int(sd.length[sd.n_val : sd.n_val + done[s]].sum())
            else:  # tiered: a document's tokens count its effective epochs (packing.fill_tiered)
                w = np.asarray(budgets[s].tier_epochs, np.float64)[sd.tier]
                need = budgets[s].stream_budget - float((sd.length[sd.n_val : sd.n_val + done[s]] * w[: done[s]]).sum())
            if need <= 0 or done[s] == n_sel:
                continue
            # estimated docs to reach the budget, with a margin (ROUND_MARGIN); the final cut uses
            # true counts only, never this estimate
            est = np.cumsum(sd.sel_bytes[done[s]:] / bpt) if sd.tier is None else \
                np.cumsum(sd.sel_bytes[done[s]:] / bpt * w[done[s]:])
            k = int(np.searchsorted(est, need * ROUND_MARGIN + 64, side="left")) + 1
            upto = min(n_sel, done[s] + max(k, 16))
            reads.append((s, upto, np.arange(sd.n_val + done[s], sd.n_val + upto, dtype=np.int64)))
        if reads:
            _read_sources([(raw_paths[s], per_source[s], wanted) for s, _, wanted in reads], enc)
        for s, upto, _ in reads:
            done[s], rounds[s] = upto, rounds[s] + 1
        for s in [s for s in active if s not in {r[0] for r in reads}]:  # finished: budget met or exhausted
            active.remove(s)
            enc.forget(s)
            sd, b = per_source[s], budgets[s]
            result.rounds[s] = rounds[s]
            tiers = None
            if sd.tier is None:
                n_unique, sd.apps = fill_budget(s, sd.length[sd.n_val : sd.n_val + done[s]], b.unique_budget,
                                                b.stream_budget, n_docs_available=len(sd.ids) - sd.n_val)
            else:
                n_unique, sd.apps, fill = fill_tiered(s, sd.length[sd.n_val : sd.n_val + done[s]], sd.tier[: done[s]],
                                                      list(b.tier_epochs), b.stream_budget,
                                                      n_docs_available=len(sd.ids) - sd.n_val)
                tiers = {name: {"epochs": fill.epochs[t], "documents": fill.documents[t],
                                "unique_tokens": fill.unique_tokens[t], "train_tokens": fill.train_tokens[t]}
                         for t, name in enumerate(b.tier_names)}
            result.sources[s] = SourceResult(unique_documents=n_unique, budget_tokens=b.stream_budget,
                                             epochs=b.epochs, encoded_train_documents=done[s], tiers=tiers)


class _SpillReader:
    def __init__(self, path: str, dtype: np.dtype):
        self.fd = os.open(path, os.O_RDONLY)
        self.dtype = dtype

    def gather(self, offsets: np.ndarray, takes: np.ndarray) -> np.ndarray:
        """The first `takes[i]` tokens of the documents at spill `offsets[i]`, back to back (one pread per document
        into one buffer)."""
        takes = np.asarray(takes, np.int64)
        total = int(takes.sum())
        if not total:
            return np.zeros(0, self.dtype)
        # pread, not a memory map: the appearances are in hash order, so a gather's documents are spread over the
        # whole spill, and the kernel maps ~64 KB around each faulted page (fault-around): a mapped gather put most
        # of the spill in the process's RSS (peak RSS grew with the corpus); read pages stay in the page cache
        out = np.empty(total, self.dtype)
        buf = memoryview(out).cast("B")
        isz, pos = self.dtype.itemsize, 0
        for o, t in zip(np.asarray(offsets).tolist(), takes.tolist()):
            nb = t * isz
            if nb and os.preadv(self.fd, [buf[pos : pos + nb]], o * isz) != nb:
                raise IOError(f"spill file short read at token {o} (+{t})")
            pos += nb
        return out

    def read(self, offset: int, n: int) -> np.ndarray:
        isz = self.dtype.itemsize
        b = os.pread(self.fd, n * isz, offset * isz)
        if len(b) != n * isz:
            raise IOError(f"spill file short read at token {offset} (+{n})")
        return np.frombuffer(b, dtype=self.dtype)

    def close(self) -> None:
        os.close(self.fd)


# An encode batch is also capped in characters: the tokenizer's Encoding objects cost ~100 bytes
# per token, so a batch of 1,000 long documents would otherwise set the peak memory. 500 k rather than
# 2 M: ~100 MB lower peak RSS, half the page faults and no more CPU at 400 MB (bench/results/token_shards.md).
ENCODE_BATCH_CHARS = 500_000


# -- the map: tokenise the wanted rows of one row range (core/engine.py) ------------------------------
@dataclass(frozen=True)
class TokenizerFile:
    """Where a map task loads the tokenizer from: a tokenizer.json path and its sha256 (the key of the
    per-process cache). Small and picklable; the tokenizer itself is never shipped."""

    path: str  # a local path, or an s3:// URL (read through core/transport on any node)
    sha256: str
    endpoint_url: Optional[str] = None  # of an s3:// path

    @classmethod
    def of(cls, path: str, endpoint_url: Optional[str] = None) -> "TokenizerFile":
        with transport.open_url(path, endpoint_url) as f:
            return cls(path, hashlib.sha256(f.read()).hexdigest(), endpoint_url)


_TOKENIZER_LOCK = threading.Lock()
_TOKENIZER_CACHE: dict[TokenizerFile, Tokenizer] = {}  # one tokenizer per process (a Ray worker's too)


def tokenizer_at(loc: TokenizerFile) -> Tokenizer:
    """The tokenizer at `loc`, loaded once per process and reused by every later task."""
    with _TOKENIZER_LOCK:
        tok = _TOKENIZER_CACHE.get(loc)
        if tok is None:
            with transport.open_url(loc.path, loc.endpoint_url) as f:
                data = f.read()
            got = hashlib.sha256(data).hexdigest()
            if got != loc.sha256:
                raise ValueError(f"{loc.path}: sha256 {got} is not the tokenizer this build started with "
                                 f"({loc.sha256}): the file changed during the build")
            _TOKENIZER_CACHE.clear()
            _ENCODER_CACHE.clear()
            tok = _TOKENIZER_CACHE[loc] = Tokenizer.from_str(data.decode("utf-8"))
        return tok


_ENCODER_CACHE: dict[tuple[TokenizerFile, str], object] = {}


def encoder_at(loc: TokenizerFile, backend: str = "auto"):
    """The encoder (backends.encoder_for) of the tokenizer at `loc`, built once per process and backend."""
    tok = tokenizer_at(loc)
    with _TOKENIZER_LOCK:
        enc = _ENCODER_CACHE.get((loc, backend))
        if enc is None:
            enc = _ENCODER_CACHE[(loc, backend)] = encoding.encoder_for(tok, backend)
        return enc


def encode_threads() -> int:
    """Threads one encode call may use: the process's Rust thread count (RAYON_NUM_THREADS), one while
    TOKENIZERS_PARALLELISM is off (parallel local tasks, `_one_rust_thread_per_task`)."""
    if os.environ.get("TOKENIZERS_PARALLELISM", "").lower() in ("0", "false", "no"):
        return 1
    try:
        return max(1, int(os.environ.get("RAYON_NUM_THREADS", "1")))
    except ValueError:
        return 1


@dataclass(frozen=True)
class EncodeParams:
    """What every encode task shares (bound once with functools.partial)."""

    tokenizer: TokenizerFile
    dtype: str  # the mix's token dtype (uint16 / uint32)
    separator_id: Optional[int]
    batch_docs: int
    batch_chars: int = ENCODE_BATCH_CHARS
    backend: str = "auto"  # tokenizer.backend (backends.encoder_for): which encoder, never which ids
    text_keys: bool = False  # also return each document's text key and bytes (for the token-id cache)


@dataclass(frozen=True)
class EncodeChunk:
    """One map task of token_shards: the wanted rows of a row range (offsets from `rows.start`, ascending)."""

    rows: engine.RowRange
    wanted: np.ndarray  # int64


@dataclass
class EncodedChunk:
    """The wanted documents' token ids in row order: each document's ids (+ separator) back to back."""

    tokens: np.ndarray  # the mix's dtype, little-endian
    lengths: np.ndarray  # int64 per document, separator included
    text_bytes: int  # UTF-8 bytes encoded
    encoded_tokens: int  # ids from the tokenizer (separators excluded)
    keys: Optional[np.ndarray] = None  # (documents, 16) uint8 text keys (idcache.text_keys), with text_keys
    doc_bytes: Optional[np.ndarray] = None  # int64 UTF-8 bytes per document, with text_keys


def encode_chunk(chunk: EncodeChunk, params: EncodeParams) -> EncodedChunk:
    """The per-document map work of token_shards: read the row range, tokenise its wanted rows (pure).

    The Rust thread count is the process's (RAYON_NUM_THREADS / TOKENIZERS_PARALLELISM): one on Ray
    workers and while `build_shards` runs chunks on parallel local threads; token ids never depend on it."""
    enc = encoder_at(params.tokenizer, params.backend)
    t = engine.read_rows(chunk.rows, ["doc_id", "text"]).take(pa.array(chunk.wanted))
    texts = t.column("text")
    if texts.null_count:
        i = int(np.flatnonzero(texts.is_null().to_numpy(zero_copy_only=False))[0])
        raise ValueError(f"{chunk.rows.path}: document {t.column('doc_id')[i].as_py()!r}: field text is null")
    flat, n = encoding.encode_texts(enc, texts.to_pylist(), token_dtype(params.dtype), params.separator_id,
                                    params.batch_docs, params.batch_chars, encode_threads())
    out = EncodedChunk(flat, n, int(pc.sum(pc.binary_length(texts)).as_py() or 0),
                       len(flat) - (len(n) if params.separator_id is not None else 0))
    if params.text_keys:  # what the token-id cache stores the documents under
        out.keys = idcache.text_keys(texts)
        out.doc_bytes = pc.binary_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
    del t, texts
    tables.release_unused()  # the encoder's freed pages, kept per thread by glibc, else grow with the run
    return out


# -- the reduce side of the map: spill the results in chunk order ------------------------------------
# Documents per token-cache part at least (the last of a source's round shorter). 1: every encoded chunk is a
# part of its own as soon as it is encoded, so a killed run resumes at the first chunk it had not finished (issue
# 27; test_killed_runs). A larger value gathers a round's small chunks into fewer files (i27-tokens measured no
# gain from it) but a killed run then loses the encoded documents of its unwritten part.
CACHE_PART_DOCS = 1

class _EncodeMap:
    """Runs `encode_chunk` over a file's wanted rows on the engine, appends the ids to the spill.

    With a `cache` (idcache.TokenCache), rows whose text is in the source's cache are read from it instead
    (looked up once per source, at its first read), and the encoded documents are stored there as new parts
    as their results arrive: a source's chunks are gathered into parts of >= CACHE_PART_DOCS documents (the
    last of each `encode` call shorter), written on `writes` when given (a killed build loses at most the
    documents of the parts not yet written)."""

    def __init__(self, spill: _Spill, params: EncodeParams, eng: engine.Engine, log=None,
                 cache: Optional[idcache.TokenCache] = None, writes: Optional[_Writes] = None):
        self.spill, self.eng, self.cache, self.writes = spill, eng, cache, writes
        self.unstored: dict[str, list] = {}  # source -> encoded chunks not yet in a cache part
        self.params = params = dataclasses.replace(params, text_keys=cache is not None)
        self.fn = functools.partial(encode_chunk, params=params)
        self.bytes = 0
        self.tokens = 0
        self.row_ranges: dict = {}
        self.hits: dict[str, Optional[idcache.SourceHits]] = {}  # per source, while it is read
        self.cache_docs: dict[str, list[int]] = {}  # per source: [documents from the cache, documents encoded]
        self.text_keys_reused: list[str] = []  # sources whose raw text keys were read from the store, not hashed
        self.learned: dict[str, tuple] = {}  # source -> (raw path, [raw rows], [their text keys]) while it is read
        self.progress = Progress(log, "token_shards encode", total_docs=0, total_bytes=0) if log else None

    def encode(self, jobs: list[tuple]) -> list[tuple[np.ndarray, np.ndarray, int, int]]:
        """For each (file, rows (raw rows, ascending, unique), their n_bytes, source): (spill offset and length
        of each row, text bytes, tokens). ONE map over the jobs' chunks, in job order then file order."""
        out = [(np.empty(len(r), np.int64), np.empty(len(r), np.int64), [0, 0, 0]) for _, r, _, _ in jobs]
        misses = [self._from_cache(job, out[j]) for j, job in enumerate(jobs)]
        chunks, job_of = [], []
        for j, ((path, rows, _, _), miss) in enumerate(zip(jobs, misses)):
            for rng in self._ranges(path):
                lo, hi = np.searchsorted(rows, [rng.start, rng.stop])
                m = miss[(miss >= lo) & (miss < hi)]
                if len(m):
                    chunks.append(EncodeChunk(rng, rows[m] - rng.start))
                    job_of.append((j, m))
        if self.progress:  # the ETA covers the rounds planned so far
            self.progress.total_docs += sum(len(m) for m in misses)
            self.progress.total_bytes += sum(int(n[m].sum()) for (_, _, n, _), m in zip(jobs, misses))
        for (j, m), got in zip(job_of, engine.map_chunks(self.fn, chunks, self.eng)):
            offsets, lengths, acc = out[j]
            offsets[m] = self.spill.append(got.tokens) + np.cumsum(got.lengths) - got.lengths
            lengths[m] = got.lengths
            acc[1], acc[2] = acc[1] + got.text_bytes, acc[2] + got.encoded_tokens
            self.bytes += got.text_bytes
            self.tokens += got.encoded_tokens
            if self.cache is not None:
                self._store(jobs[j][3], got)
                self._learn(jobs[j][3], jobs[j][0], jobs[j][1][m], got.keys)
            if self.progress:
                self.progress.update(docs=len(m), bytes=got.text_bytes, tokens=got.encoded_tokens)
        for source in list(self.unstored):
            self._store(source, None)
        return [(o, n, acc[1], acc[2]) for o, n, acc in out]

    def _store(self, source: str, got: Optional[EncodedChunk]) -> None:
        """Add a chunk's documents to the source's next cache part; write the part once it holds
        CACHE_PART_DOCS documents, or (got None) now."""
        chunks = self.unstored.setdefault(source, [])
        if got is not None:
            chunks.append(got)
            if sum(len(c.lengths) for c in chunks) < CACHE_PART_DOCS:
                return
        del self.unstored[source]
        if not chunks:
            return
        cat = (lambda f: np.concatenate([getattr(c, f) for c in chunks]))  # noqa: E731
        args = (source, cat("keys"), cat("doc_bytes"), cat("tokens"), cat("lengths"), self.params.separator_id)
        if self.writes is None:
            self.cache.write(*args)
        else:
            self.writes.submit(functools.partial(self.cache.write, *args))

    def _from_cache(self, job: tuple, into: tuple) -> np.ndarray:
        """Fill `into` for the job's rows found in the cache; the indices (into the job's rows) of the rest."""
        path, rows, _, source = job
        every = np.arange(len(rows), dtype=np.int64)
        counts = self.cache_docs.setdefault(source, [0, 0])
        if self.cache is None:
            counts[1] += len(rows)
            return every
        if source not in self.hits:
            parts = self.cache.parts(source)
            if parts:  # every raw row's text key, matched a chunk at a time as the hash tasks return
                self.hits[source] = self.cache.locate(source, parts, self._text_keys(source, path))
            else:
                self.hits[source] = None
        hits = self.hits[source]
        hit = np.zeros(len(rows), bool) if hits is None else hits.pos[rows] >= 0
        counts[0] += int(hit.sum())
        counts[1] += int(len(rows) - hit.sum())
        if hit.any():
            offsets, lengths, acc = into
            sep = self.params.separator_id
            hit_at = np.flatnonzero(hit)
            for at, ids, lens, nbytes in hits.read(self.cache.storage, rows[hit_at], self.cache.dtype, sep):
                at = hit_at[at]
                offsets[at] = self.spill.append(ids) + np.cumsum(lens) - lens
                lengths[at] = lens
                acc[1] += nbytes
                acc[2] += len(ids) - (len(lens) if sep is not None else 0)
        return every[~hit]

    def _file_sha(self, path) -> Optional[str]:
        """sha256 of a raw file read locally (lineage has just hashed it: remembered), None for an S3 object."""
        local = path if isinstance(path, str) else (
            path.path if isinstance(path, engine.FileAt) and path.endpoint_url is None else None)
        return transport.sha256_file_remembered(local) if local else None

    def _rows(self, path) -> int:
        return sum(r.stop - r.start for r in self._ranges(path))

    def _text_keys(self, source: str, path) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(text keys, not-to-look-up) of every row of the raw file, in row order: the ones filed for the file's
        bytes (idcache.TokenCache.stored_text_keys), else hashed by map tasks a chunk at a time (then filed)."""
        sha = self._file_sha(path)
        if sha is not None:
            got = self.cache.stored_text_keys(sha, self._rows(path))
            if got is not None:
                self.text_keys_reused.append(source)
                yield got
                return
        got = []
        for chunk in engine.map_chunks(idcache.hash_chunk, self._ranges(path), self.eng):
            got.append(chunk)
            yield chunk
        if sha is not None and got:
            null = np.concatenate([n for _, n in got])
            self._file_keys(source, sha, np.concatenate([k for k, _ in got]),
                            np.where(null, idcache.NULL_TEXT, idcache.KNOWN).astype(np.uint8))

    def _file_keys(self, source: str, sha: str, keys: np.ndarray, state: np.ndarray) -> None:
        try:
            self.cache.file_text_keys(source, sha, keys, state)
        except OSError:  # a cache beside the cache: the next build hashes the text again
            pass

    def _learn(self, source: str, path, rows: np.ndarray, keys: Optional[np.ndarray]) -> None:
        """Keep the text keys encode_chunk computed for raw `rows` of a source that had no cache part."""
        if keys is not None and self.hits.get(source, 0) is None:
            got = self.learned.setdefault(source, (path, [], []))
            got[1].append(np.asarray(rows, np.int64))
            got[2].append(keys)

    def forget(self, source: str) -> None:
        """The source is read: drop its cache positions; file the text keys its encodes computed when it had no
        cache part (its other rows marked not hashed)."""
        self.hits.pop(source, None)
        learned = self.learned.pop(source, None)
        sha = self._file_sha(learned[0]) if learned else None
        if sha is not None:
            n = self._rows(learned[0])
            keys = np.zeros((n, idcache.KEY_BYTES), np.uint8)
            state = np.full(n, idcache.NOT_HASHED, np.uint8)
            rows = np.concatenate(learned[1])
            keys[rows] = np.concatenate(learned[2])
            state[rows] = idcache.KNOWN
            self._file_keys(source, sha, keys, state)

    def _ranges(self, path) -> list[engine.RowRange]:
        """The file's row ranges (its footer read once per build, not once per round)."""
        if path not in self.row_ranges:
            self.row_ranges[path] = engine.row_ranges(path, self.eng.chunk_rows)
        return self.row_ranges[path]

    def done(self) -> None:
        if self.progress:
            self.progress.done()


@contextlib.contextmanager
def _one_rust_thread_per_task(eng: engine.Engine):
    """Parallel local tasks encode with one Rust thread each (the engine's threads are the parallelism);
    set before the pool starts and restored after it has joined."""
    if eng.kind != "local" or eng.num_cpus <= 1:
        yield
        return
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TOKENIZERS_PARALLELISM"]
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = saved


def _raw_rows(path, ids: pa.Array) -> np.ndarray:
    """Each doc_id's row in the raw Parquet (-1 when absent; a doc_id twice in the file: its last row)."""
    with engine.open_parquet(path) as f:
        raw = f.read(columns=["doc_id"]).column(0).combine_chunks()
    n = len(raw)
    at = pc.index_in(ids, value_set=raw.take(pa.array(np.arange(n - 1, -1, -1, dtype=np.int64))))
    return np.where(at.is_null().to_numpy(zero_copy_only=False), -1,
                    n - 1 - at.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64))


def _read_sources(reads: list[tuple], enc: _EncodeMap) -> list[tuple[int, int]]:
    """Encode the wanted documents (positions in `sd.ids`) of each (file, sd, wanted), as ONE map in
    read order then file order; record their spill offsets and lengths in each `sd`. Returns each
    read's (text bytes, tokens)."""
    jobs, plans = [], []
    for path, sd, wanted in reads:
        if not len(wanted):
            plans.append(None)
            continue
        if sd.rows is None:
            sd.rows = _raw_rows(path, sd.ids)
        rows = sd.rows[wanted]
        if (rows < 0).any():
            missing = pc.unique(sd.ids.take(pa.array(wanted[rows < 0])))
            raise ValueError(f"{path}: {len(missing)} document(s) of the validation split are not in this "
                             f"file (e.g. {sorted(missing.to_pylist())[:3]}); the split is older than the raw "
                             f"documents: rebuild validation_split")
        unique_rows, first = np.unique(rows, return_index=True)
        plans.append((unique_rows, rows))
        jobs.append((path, unique_rows, sd.n_bytes[wanted[first]], sd.name))
    got = iter(enc.encode(jobs))
    out = []
    for (_, sd, wanted), plan in zip(reads, plans):
        if plan is None:
            out.append((0, 0))
            continue
        offsets, lengths, nbytes, tokens = next(got)
        at = np.searchsorted(plan[0], plan[1])
        sd.offset[wanted] = offsets[at]
        sd.length[wanted] = lengths[at]
        out.append((nbytes, tokens))
    return out


SPILL = "token_spill"


class _Writes:
    """token_shards' file writes (shards, document indexes, token-cache parts) run one at a time on a thread of
    their own, so their I/O (fsync, S3 uploads) and hashing overlap the encode and the packing instead of
    stopping them. At most `depth` writes are pending (each holds its bytes): `submit` waits for the oldest
    beyond that. An error is raised by the `submit` or `drain` that collects it, or on leaving the block."""

    def __init__(self, depth: int = 2):
        self.depth = depth
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="token-writes")
        self.pending: collections.deque = collections.deque()

    def submit(self, fn: Callable[[], object]) -> None:
        while len(self.pending) >= self.depth:
            self.pending.popleft().result()
        self.pending.append(self.pool.submit(fn))

    def drain(self) -> None:
        """Wait for every pending write (raising the first error)."""
        while self.pending:
            self.pending.popleft().result()

    def __enter__(self) -> "_Writes":
        return self

    def __exit__(self, kind, *_) -> None:
        try:
            if kind is None:
                self.drain()
        finally:
            self.pool.shutdown(wait=True)  # after an error: the writes in flight end before the scratch goes


def build_shards(
    tokenizer: TokenizerFile,
    split_path: str,
    raw_paths: dict[str, str],
    budgets: dict[str, SourceBudget],
    plan: PackingPlan,
    dtype: str,
    storage,
    scratch_dir: Optional[str] = None,
    bytes_per_token_guess: float = 4.0,
    eng: engine.Engine = engine.Engine(),
    log=None,
    cache: Optional[idcache.TokenCache] = None,
    backend: str = "auto",
    tiers: Optional[dict] = None,
) -> ShardsResult:
    """Encode (map tasks on `eng`), fill budgets, pack and write `mix/train/*.bin` and `mix/val/*.bin`
    through `storage`. `raw_paths` values are local paths or `engine.FileAt`s (every task opens its own
    file; an s3:// object is read by range GETs of the row groups its range needs). `tiers`: source ->
    quality_tiers.TierPlan for the sources whose budget is filled by quality tier."""
    tiers = tiers or {}
    np_dtype = token_dtype(dtype)
    # a batch at a time, not pq.read_table: that imports pyarrow.dataset and decodes row groups on threads,
    # and the step's peak before the encode grew 26 MB from 38 k to 150 k kept documents (stop 23)
    f = tables.parquet_file(split_path)
    cols = ["doc_id", "source", "n_bytes", "split"]
    split = pa.Table.from_batches(list(tables.iter_batches(f, cols, 8192)),
                                  pa.schema([f.schema_arrow.field(c) for c in cols]))
    missing = sorted(set(budgets) - set(raw_paths))
    if missing:
        raise ValueError(f"no raw documents for source(s) {missing}")
    result = ShardsResult(dtype=dtype, splits={}, sources={})
    encoder = encoder_at(tokenizer, backend)  # here, so a bad backend fails before any work; tasks reuse it
    result.backend, result.backend_reason = encoder.name, encoder.reason
    if log is not None:
        log.info(f"token_shards: encoder {encoder.name}" + (f" ({encoder.reason})" if encoder.reason else ""))
    # A rebuild never leaves shards of an older build beside the new ones, and the old manifest
    # (the completion marker of the mix directory) goes first.
    storage.delete(layout.MANIFEST)
    for split_name in ("train", "val"):  # (with any .tmp shard a killed build left)
        storage.delete_prefix(f"{layout.MIX_DIR}/{split_name}/")
    storage.delete_prefix(f"{layout.DOC_INDEX_DIR}/")
    # the stream docs are written while packing (a row group per bucket): a killed build's partial file goes too
    storage.delete_prefix(layout.STREAM_DOCS.format(split="x").rsplit("/", 1)[0] + "/")
    # spill folders of killed builds (a concurrent build's is kept: its process is alive)
    scratch.sweep(scratch_dir or tempfile.gettempdir(), SPILL)
    with tempfile.TemporaryDirectory(prefix=scratch.owner_prefix(SPILL), dir=scratch_dir) as tmp, _Writes() as writes:
        spill = _Spill(os.path.join(tmp, "spill.bin"), np_dtype)
        params = EncodeParams(tokenizer, dtype, plan.separator_id, plan.encode_batch_docs, backend=backend)
        enc = _EncodeMap(spill, params, eng, log, cache, writes)

        # per source: val documents (all), then train documents in selection order, as columns
        per_source: dict[str, _SourceDocs] = {}
        for s in sorted(budgets):
            rows = split.filter(pc.equal(split.column("source"), s))
            is_val = pc.equal(rows.column("split"), "val")
            val_ids = rows.filter(is_val).column("doc_id").combine_chunks()
            tr = rows.filter(pc.invert(is_val))
            ids = tr.column("doc_id").combine_chunks()
            nb = np.asarray(tr.column("n_bytes").to_numpy(zero_copy_only=False), np.int64)
            val_nb = np.asarray(rows.filter(is_val).column("n_bytes").to_numpy(zero_copy_only=False),
                                np.int64)
            order = _selection_order(plan.seed, ids)
            per_source[s] = _SourceDocs(pa.concat_arrays([val_ids, ids.take(pa.array(order))]), len(val_ids),
                                        np.concatenate([val_nb, nb[order]]), name=s)
            if s in tiers:  # train documents only: validation documents are never repeated
                per_source[s].tier = tiers[s].of(per_source[s].ids.slice(len(val_ids)))
        del split
        tables.release_unused()  # the split table's and the selection sort's freed pages, before the encode

        # pass 1: encode val + the train prefix the budget needs, round by round
        try:
            with _one_rust_thread_per_task(eng):
                _encode_sources(budgets, per_source, raw_paths, enc, bytes_per_token_guess, result)
            enc.done()
        finally:
            spill.close()
        result.encoded_bytes, result.encoded_tokens = enc.bytes, enc.tokens
        result.cache_docs = {s: (h, m) for s, (h, m) in sorted(enc.cache_docs.items())}
        result.text_keys_reused = sorted(set(enc.text_keys_reused))
        if cache is not None:
            result.cache_key, result.tokenizer_sha256 = cache.key, cache.meta["tokenizer_sha256"]
        reader = spill.reader()

        try:
            # pass 2: train stream (budget fill) and val stream (all val documents, one epoch)
            names = sorted(budgets)
            train = [(per_source[s].n_val + per_source[s].apps.index, per_source[s].apps.epoch,
                      per_source[s].apps.take) for s in names]
            result.splits["train"] = _pack("train", per_source, names, train, reader, plan, dtype, storage, tmp,
                                           writes)
            val = [(np.arange(per_source[s].n_val, dtype=np.int64), np.zeros(per_source[s].n_val, np.int64),
                    per_source[s].length[: per_source[s].n_val]) for s in names]
            result.splits["val"] = _pack("val", per_source, names, val, reader, plan, dtype, storage, tmp, writes)
        finally:
            reader.close()

    for s, r in result.sources.items():
        r.train_tokens = result.splits["train"].sources.get(s, 0)
        r.val_tokens = result.splits["val"].sources.get(s, 0)
    return result


STREAM_DOCS_SCHEMA = pa.schema([("start", pa.int64()), ("tokens", pa.int64()),
                                ("source", pa.dictionary(pa.int32(), pa.string())), ("doc_id", pa.string())])

# Appearances per bucket of pass 2's stream-order sort: the split's appearances are spilled to local files by
# key range (their order keys' top bits) and each bucket is sorted and packed alone, so pass 2 holds one
# bucket's records and ids, not the split's. Key ranges in key order give the global order exactly (equal
# keys share a bucket), so the bytes do not depend on it.
BUCKET_APPEARANCES = 1 << 18
_REC = np.dtype([("key", "<u8"), ("src", "<i4"), ("pos", "<i8"), ("epoch", "<i8"), ("take", "<i8"),
                 ("offset", "<i8")])


def _bucket_bits(n: int) -> int:
    """log2 of the bucket count for n appearances (buckets of <= ~BUCKET_APPEARANCES when keys are uniform)."""
    return max(0, math.ceil(math.log2(n / BUCKET_APPEARANCES))) if n > BUCKET_APPEARANCES else 0


def _spill_buckets(seed: int, per_source: dict[str, _SourceDocs], names: list[str], parts, tmp: str,
                   bits: int) -> list[str]:
    """Every appearance as a _REC record, appended to the file of its key range (the key's top `bits` bits),
    in concatenation order (source, then appearance), a chunk at a time."""
    paths = [os.path.join(tmp, f"bucket-{b:05d}.rec") for b in range(1 << bits)]
    files = [open(p, "wb") for p in paths]
    try:
        for i, (pos, ep, take) in enumerate(parts):
            sd = per_source[names[i]]
            for c in range(0, len(pos), _CHUNK):
                p, e = pos[c : c + _CHUNK], np.asarray(ep[c : c + _CHUNK], np.int64)
                rec = np.empty(len(p), _REC)
                rec["key"] = order_keys(seed, _strings(sd.ids.take(pa.array(p))), e.tolist(), len(p))
                rec["src"], rec["pos"], rec["epoch"], rec["take"] = i, p, e, take[c : c + _CHUNK]
                rec["offset"] = sd.offset[p]
                if not bits:
                    files[0].write(rec.tobytes())
                    continue
                b = (rec["key"] >> np.uint64(64 - bits)).astype(np.int64)
                by = np.argsort(b, kind="stable")  # stable: concatenation order within a bucket
                cuts = np.searchsorted(b[by], np.arange((1 << bits) + 1))
                for k in np.flatnonzero(cuts[1:] > cuts[:-1]):
                    files[k].write(rec[by[cuts[k] : cuts[k + 1]]].tobytes())
    finally:
        for f in files:
            f.close()
    return paths


# Tokens per gather of pass 2 (the appearances' ids concatenated from the spill, then Packer.feed_many): bounds
# the copy; an appearance longer than this is gathered alone.
GATHER_TOKENS = 1 << 22


def _gather_slices(takes: np.ndarray, limit: int) -> Iterator[tuple[int, int]]:
    """[a, b) ranges of consecutive appearances holding <= `limit` tokens each (or a single appearance)."""
    cum = np.cumsum(np.asarray(takes, np.int64))
    a = 0
    while a < len(cum):
        base = cum[a - 1] if a else 0
        b = max(a + 1, int(np.searchsorted(cum, base + limit, side="right")))
        yield a, b
        a = b


def _pack(split_name, per_source: dict[str, _SourceDocs], names: list[str], parts, reader, plan: PackingPlan,
          dtype, storage, tmp: Optional[str] = None, writes: Optional["_Writes"] = None):
    """Pack one split. parts[i] = (document positions in per_source[names[i]], epochs, takes): the
    appearances of source names[i], concatenated in `names` order before the stream-order sort (hash key,
    then doc_id, then that concatenation order). Sorted and packed one key-range bucket at a time
    (BUCKET_APPEARANCES), spilled under `tmp`."""
    n = sum(len(p[0]) for p in parts)
    with contextlib.ExitStack() as stack:
        if tmp is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=scratch.owner_prefix(SPILL)))
        tmp = tempfile.mkdtemp(prefix=f"pack-{split_name}-", dir=tmp)
        paths = _spill_buckets(plan.seed, per_source, names, parts, tmp, _bucket_bits(n))
        writer = ShardWriter(storage, split_name, plan.sample_len, dtype, writes)
        packer = Packer(plan.sample_len, plan.shard_samples, dtype, writer.shard,
                        writer.doc_index if plan.doc_index else None)
        docs = _StreamDocs(names)

        def row_groups():  # packs bucket by bucket as the Parquet writer asks for the stream docs' row groups
            for path in paths:
                rec = np.fromfile(path, _REC)
                os.unlink(path)
                if not len(rec):
                    continue
                ids = _record_ids(per_source, names, rec)
                order = order_from_keys(rec["key"], rec["epoch"], lambda: _stable_rank(ids))
                rec = rec[order]
                for a, b in _gather_slices(rec["take"], GATHER_TOKENS):
                    packer.feed_many(reader.gather(rec["offset"][a:b], rec["take"][a:b]), rec["take"][a:b],
                                     rec["src"][a:b], names)
                docs.add(rec["take"], rec["src"], ids.take(pa.array(order)))
                del rec, ids, order
                yield from docs.full()
            yield from docs.rest()

        tables.write_parquet_groups(storage, layout.STREAM_DOCS.format(split=split_name), STREAM_DOCS_SCHEMA,
                                    row_groups())
        stats = packer.finish()
        if writes is not None:  # every shard written and hashed before its record is read
            writes.drain()
    stats.documents = _count_distinct([per_source[names[i]].ids.take(pa.array(np.unique(p[0])))
                                       for i, p in enumerate(parts)])
    return stats


def _count_distinct(arrays: list[pa.Array]) -> int:
    """Distinct strings over `arrays`, exactly, one group of a hash of the string at a time (equal strings
    share a group; a group is counted by sorting it, not with a hash table: pc.count_distinct's took
    ~220 B per document)."""
    n = sum(len(a) for a in arrays)
    bits = _bucket_bits(n)
    if bits:
        shift = np.uint64(64 - bits)
        group = [np.fromiter((xxhash.xxh64_intdigest(x.encode("utf-8")) for x in _strings(a)), np.uint64, len(a)) >> shift
                 for a in arrays]
    total = 0
    for g in range(1 << bits):
        parts = [x for x in ([a.filter(pa.array(h == g)) for a, h in zip(arrays, group)] if bits else arrays) if len(x)]
        if not parts:
            continue
        a = pa.concat_arrays(parts)
        srt = a.take(pc.sort_indices(a))
        total += len(a) - (int(pc.sum(pc.equal(srt.slice(1), srt.slice(0, len(a) - 1))).as_py() or 0) if len(a) > 1 else 0)
    return total


def _record_ids(per_source: dict[str, _SourceDocs], names: list[str], rec: np.ndarray) -> pa.Array:
    """The doc_id of each record, in record order."""
    src = rec["src"]
    by = np.argsort(src, kind="stable")
    cuts = np.searchsorted(src[by], np.arange(len(names) + 1))
    parts = [per_source[names[i]].ids.take(pa.array(rec["pos"][by[cuts[i] : cuts[i + 1]]]))
             for i in range(len(names)) if cuts[i + 1] > cuts[i]]
    back = np.empty(len(by), np.int64)
    back[by] = np.arange(len(by))
    return pa.concat_arrays(parts).take(pa.array(back))


class _StreamDocs:
    """layout.STREAM_DOCS rows (start, tokens, source, doc_id) of a split's appearances fed in stream order,
    handed out as row groups of exactly tables.ROW_GROUP_ROWS rows (the last shorter): the bytes one
    `write_parquet` of the whole table gives, holding one row group's worth."""

    def __init__(self, names: list[str]):
        self.names = pa.array(names, pa.string())
        self.start = 0
        self.pending: list[pa.Table] = []
        self.rows = 0
        self.yielded = 0  # row groups handed out

    def add(self, takes: np.ndarray, src: np.ndarray, ids: pa.Array) -> None:
        take = np.asarray(takes, np.int64)
        start = self.start + np.concatenate([[0], np.cumsum(take)[:-1]]).astype(np.int64)
        self.start += int(take.sum())
        keep = take > 0  # empty appearances left out
        t = pa.table({"start": start[keep], "tokens": take[keep],
                      "source": pa.DictionaryArray.from_arrays(pa.array(np.asarray(src, np.int32)[keep]), self.names),
                      "doc_id": ids.cast(pa.string()).filter(pa.array(keep))}, schema=STREAM_DOCS_SCHEMA)
        self.pending.append(t)
        self.rows += t.num_rows

    def full(self):
        """The complete row groups added so far."""
        R = tables.ROW_GROUP_ROWS
        while self.rows >= R:
            t = pa.concat_tables(self.pending)
            self.pending, self.rows = [t.slice(R)], t.num_rows - R
            self.yielded += 1
            yield t.slice(0, R).combine_chunks()

    def rest(self):
        """The last, shorter row group (an empty table when no row was added: the file has the schema)."""
        if self.rows or not self.yielded:
            yield pa.concat_tables(self.pending).combine_chunks() if self.pending else STREAM_DOCS_SCHEMA.empty_table()
        self.pending, self.rows = [], 0


def packing_plan(spec, tok: Tokenizer) -> PackingPlan:
    p = spec.packing
    return PackingPlan(
        seq_len=p.seq_len,
        sample_len=p.sample_len,
        shard_tokens=p.shard_tokens,
        separator_id=separator_id(tok, p.separator),
        encode_batch_docs=p.encode_batch_docs,
        seed=spec.seed,
        separator=p.separator,
        shifted_targets=p.shifted_targets,
        doc_index=p.doc_index,
    )


def build_token_shards(storage, spec, scratch_dir: Optional[str] = None, eng: engine.Engine = engine.Engine(),
                       log=None, token_cache: bool = True) -> ShardsResult:
    """Shards of the mix described by `spec` (a MixSpec) and `tokens/shard_stats.json`.

    The per-document work runs as map tasks on `eng` (core/engine.py); with `log` (an object with
    `info`) it logs progress lines. In-process tasks use `spec.packing.threads` Rust threads unless
    RAYON_NUM_THREADS is already set (it only takes effect before the process's first parallel
    encode), one each when the engine runs them in parallel; outputs do not depend on either.
    Documents whose ids are in the token-id cache under the storage root (idcache.py; `token_cache=False`:
    not used) are read from it, not encoded; the outputs are the same bytes either way.
    """
    os.environ.setdefault("RAYON_NUM_THREADS", str(spec.packing.threads))
    tok_at = tables.file_at(storage, layout.TOKENIZER_FILE)
    tokenizer = TokenizerFile.of(tok_at.path, tok_at.endpoint_url)
    tok = tokenizer_at(tokenizer)  # loaded here once: the in-process engine's tasks reuse it
    plan = packing_plan(spec, tok)
    plans = quality_tiers.TierPlan.read(storage, spec)  # {} unless a source's filters.quality has tiers
    budgets = {
        s.name: SourceBudget(s.name, spec.unique_budget(s.name), spec.stream_budget(s.name), s.epochs,
                             *((plans[s.name].names, tuple(s.epochs * e for e in plans[s.name].epochs))
                               if s.name in plans else ()))
        for s in spec.sources
    }
    # where any worker reads each raw file: a local path, or the s3:// object (range GETs, no download)
    raw = lines_lib.text_files(storage, spec, [s.name for s in spec.sources])  # line_dedup's text where it ran
    # local copies of S3 uploads a killed build left behind
    scratch.sweep(storage.cache_dir or tempfile.gettempdir(), UPLOAD)
    dtype = dtype_for_vocab(tok.get_vocab_size(with_added_tokens=True))
    cache = idcache.TokenCache(storage, tokenizer.sha256, dtype) if token_cache else None
    result = build_shards(
        tokenizer, storage.source(layout.VALIDATION_SPLIT), raw, budgets, plan, dtype, storage, scratch_dir,
        bytes_per_token_guess=spec.tokenizer.bytes_per_token_fallback, eng=eng, log=log, cache=cache,
        backend=spec.tokenizer.backend, tiers=plans,
    )
    if log is not None:
        log.info(f"token_shards: {result.cache_line()}")
    storage.write_text(layout.SHARD_STATS, json.dumps(result.to_json(plan.to_json()), indent=1) + "\n")
    return result


# -- the checks on shard_stats.json -----------------------------------------------------------------


def shard_problems(stats: dict, exists: Callable[[str], bool]) -> list[str]:
    """Why shard_stats.json's shards are not all present, non-empty and of their recorded size."""
    L = stats["packing"]["sample_len"]
    problems = []
    for split in ("train", "val"):
        shards = stats["splits"][split]["shards"]
        if not shards:
            problems.append(f"{split}: no shard (0 samples)")
        for sh in shards:
            if sh["samples"] < 1:
                problems.append(f"{sh['path']}: empty shard")
            elif not exists(f"{layout.MIX_DIR}/{sh['path']}"):
                problems.append(f"{sh['path']}: missing")
            elif sh["bytes"] != shard_bytes(sh["samples"], L, stats["dtype"]):
                problems.append(f"{sh['path']}: {sh['bytes']} bytes for {sh['samples']} samples")
            ix = sh.get("doc_index")
            if ix is not None and not exists(f"{layout.MIX_DIR}/{ix['path']}"):
                problems.append(f"{ix['path']}: document index missing")
    return problems


def tail_and_seam_problems(stats: dict) -> list[str]:
    """Per split: dropped tail < one sample, emitted = tokens + tail, seam rate = seam samples / samples."""
    L = stats["packing"]["sample_len"]
    problems = []
    for split in ("train", "val"):
        sp = stats["splits"][split]
        if not 0 <= sp["dropped_tail_tokens"] < L:
            problems.append(f"{split}: dropped tail {sp['dropped_tail_tokens']} not in [0, {L})")
        if sp["emitted_tokens"] != sp["tokens"] + sp["dropped_tail_tokens"]:
            problems.append(f"{split}: emitted {sp['emitted_tokens']} != tokens + dropped tail")
        want = sp["seam_samples"] / sp["samples"] if sp["samples"] else 0.0
        if not (0.0 <= sp["seam_rate"] <= 1.0 and abs(sp["seam_rate"] - want) < 1e-12):
            problems.append(f"{split}: seam_rate {sp['seam_rate']} != {sp['seam_samples']}/{sp['samples']}")
    return problems


def shard_files(stats: dict) -> dict[str, str]:
    """shard_stats.json's shards as storage keys with their sha256 (hashed as they were written)."""
    return {f"{layout.MIX_DIR}/{f['path']}": f["sha256"]
            for sp in stats["splits"].values() for sh in sp["shards"] for f in (sh, sh.get("doc_index")) if f}
