"""token_ids_match_reference: the ids in the shards are HF `tokenizers`' ids, on a seeded, stratified sample.

Whatever encoder built the shards (backends.py), each sampled document is read back from the shards (its first
appearance per split, `tokens/stream_docs/<split>.parquet`, as much of it as the shards hold: a budget's last
appearance is truncated and the dropped tail is not in them) and compared with HF's encode_batch_fast of its raw
text (add_special_tokens=False, then the separator when the packing has one). The sample, per source: every
document when there are at most MIN_DOCS, else the larger of MIN_DOCS and SHARE of them, taken by a seeded hash
of the doc_id, plus always the LONGEST documents (by tokens in the shards). A pure function of the shards, the
raw text and the tokenizer (the token_shards artifact key) and the seed: a reused token_shards re-emits it.
"""

from __future__ import annotations

import bisect
import json
import math
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Optional
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.core import imports, layout, tables, transport
from mix_assets.core.seeded import unit_hash
from mix_assets.format import shards as shards_fmt
from mix_assets.format.shards import token_dtype
from mix_assets.stages.tokens import backends

MIN_DOCS = 1000
SHARE = 0.01
LONGEST = 8
SHOW = 5  # mismatched doc ids named in the result
ENCODE_BATCH = 500
_READER = imports.source_version(__name__)[:16]  # the code that reads the sampled texts (`_texts`, `check`)


@dataclass
class SourceCheck:
    documents: int = 0  # distinct documents of the source in the shards
    sampled: int = 0
    tokens: int = 0  # shard tokens compared
    mismatched: list[str] = field(default_factory=list)  # doc ids (all of them; the result shows SHOW)

    def to_json(self) -> dict:
        return {"documents": self.documents, "sampled": self.sampled, "tokens": self.tokens,
                "mismatches": len(self.mismatched), "first_mismatches": self.mismatched[:SHOW]}


@dataclass
class ExactnessReport:
    sources: dict[str, SourceCheck]

    @property
    def mismatches(self) -> int:
        return sum(len(s.mismatched) for s in self.sources.values())

    @property
    def passed(self) -> bool:
        return self.mismatches == 0 and sum(s.sampled for s in self.sources.values()) > 0

    def first_mismatches(self) -> list[str]:
        return [d for s in sorted(self.sources) for d in self.sources[s].mismatched][:SHOW]


def sample_size(n: int) -> int:
    """Documents drawn from a source of `n` (before its longest are added)."""
    return n if n <= MIN_DOCS else max(MIN_DOCS, math.ceil(SHARE * n))


def _first_rows(ids: pa.Array) -> np.ndarray:
    """Ascending rows of each distinct value's first appearance in `ids` (nulls are one value), by a dictionary
    encoding and numpy, not a hash aggregation (Acero's group_by took ~40 MB over 149,060 rows)."""
    idx = ids.dictionary_encode(null_encoding="encode").indices.to_numpy(zero_copy_only=False)
    return np.sort(np.unique(idx, return_index=True)[1]).astype(np.int64)


def _appearances(storage, stats: dict) -> pa.Table:
    """Every split's first appearance of each document: split, start (in the split's stream), tokens, source, doc_id."""
    parts = []
    for split in ("train", "val"):
        t = tables.read_parquet(storage, layout.STREAM_DOCS.format(split=split))
        # first appearance per doc: the rows are in stream order within a split
        t = t.take(pa.array(_first_rows(t.column("doc_id").combine_chunks())))
        t = t.append_column("split", pa.repeat(pa.scalar(split, pa.string()), len(t)))
        parts.append(t.select(["split", "start", "tokens", "source", "doc_id"]))
    t = pa.concat_tables(parts)
    return t.set_column(3, "source", t.column("source").cast(pa.string()))


def _unit_hashes(seed: int, ids: pa.Array, batch: int = 1 << 13) -> np.ndarray:
    """`unit_hash(seed, "exact:" + id)` of each doc id, converted to Python strings one batch at a time."""
    out = np.empty(len(ids), np.float64)
    for lo in range(0, len(ids), batch):
        part = ids.slice(lo, batch).to_pylist()
        out[lo:lo + len(part)] = np.fromiter((unit_hash(seed, f"exact:{d}") for d in part), np.float64, len(part))
    return out


def choose(app: pa.Table, seed: int) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Per source: rows of `app` to check (seeded draw + the longest), and its distinct documents. On Arrow and
    numpy columns (no Python object per row: the table grows with the corpus)."""
    out, docs = {}, {}
    enc = app.column("source").combine_chunks().dictionary_encode()
    code = enc.indices.to_numpy(zero_copy_only=False)
    ids = app.column("doc_id").combine_chunks()
    tokens = app.column("tokens").to_numpy()
    order = np.argsort(code, kind="stable")  # each source's rows, ascending
    bounds = np.searchsorted(code[order], np.arange(len(enc.dictionary) + 1))
    for c, s in sorted(enumerate(enc.dictionary.to_pylist()), key=lambda x: x[1]):
        rows = order[bounds[c]:bounds[c + 1]]
        if not len(rows):
            continue
        sub = ids.take(pa.array(rows))
        docs[s] = pc.count_distinct(sub).as_py()
        k = sample_size(len(rows))
        h = _unit_hashes(seed, sub)
        del sub
        drawn = rows[np.lexsort((rows, h))[:k]]
        longest = rows[np.argsort(-tokens[rows], kind="stable")[:LONGEST]]
        out[s] = np.unique(np.concatenate([drawn, longest]))
    return out, docs


class _Stream:
    """A split's shards read as one token stream (the concatenation of its shards, in order). A local root's shards
    are read with one pread per read (not memory-mapped: the kernel maps ~64 KB around each faulted page, so the
    sampled reads of a mapped shard put most of it in the process's RSS, which then grew with the corpus); an S3
    root's are read in place, one range per read."""

    def __init__(self, storage, shards: list[dict], sample_len: int, dtype: np.dtype):
        self.storage, self.dtype = storage, dtype
        self.keys = [f"{layout.MIX_DIR}/{sh['path']}" for sh in shards]
        self.tokens = [sh["samples"] * sample_len for sh in shards]
        self.ends = np.cumsum(self.tokens).astype(np.int64).tolist()
        self.files: dict[int, object] = {}
        self.fds: dict[int, int] = {}

    @property
    def size(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def _part(self, k: int, lo: int, n: int) -> np.ndarray:
        if not self.storage.is_s3:
            fd = self.fds.get(k)
            if fd is None:
                path = self.storage.local_path(self.keys[k])
                if os.path.getsize(path) != self.tokens[k] * self.dtype.itemsize:
                    raise ValueError(f"{self.keys[k]}: {os.path.getsize(path)} bytes, the shard stats list "
                                     f"{self.tokens[k]} tokens of {self.dtype.itemsize} bytes")
                fd = self.fds[k] = os.open(path, os.O_RDONLY)
            return shards_fmt.pread_tokens(fd, lo, n, self.dtype, self.keys[k])
        f = self.files.get(k) or self.files.setdefault(k, self.storage.open(self.keys[k]))
        return shards_fmt.read_tokens(f, lo, n, self.dtype, self.keys[k])

    def read(self, start: int, n: int) -> np.ndarray:
        out, pos, end = [], start, min(start + n, self.size)
        while pos < end:
            k = bisect.bisect_right(self.ends, pos)
            first = self.ends[k - 1] if k else 0
            take = min(end, self.ends[k]) - pos
            out.append(self._part(k, pos - first, take))
            pos += take
        if len(out) == 1:
            return out[0]
        return np.concatenate(out) if out else np.zeros(0, self.dtype)

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        for fd in self.fds.values():
            os.close(fd)
        self.files.clear()
        self.fds.clear()


def _texts(path, want: set[str]) -> dict[str, str]:
    """The text of the documents `want` in the documents file `path` (a doc_id twice: its last row, as
    token_shards reads it)."""
    got: dict[str, str] = {}
    wanted = pa.array(sorted(want), pa.string())
    for b in tables.iter_batches(path, ["doc_id", "text"], 8192):
        ids = b.column(0).cast(pa.string())
        sel = pc.is_in(ids, value_set=wanted)
        if pc.any(sel).as_py():
            for d, t in zip(ids.filter(sel).to_pylist(), b.column(1).filter(sel).to_pylist()):
                got[d] = t
    return got


def check(storage, seed: int, tok, paths: Optional[dict] = None, reference=None) -> ExactnessReport:
    """Compare the sampled documents' ids in the shards with HF's (`tok`, a tokenizers.Tokenizer). `paths`:
    {source: its documents file as token_shards read it} (line_dedup's where it ran); None: raw/<source>'s.
    `reference` (reference_ids.ReferenceIds over `tok`): where HF's ids of a source's sample come from, each
    text's ids reused from the keyed store when stored under the same tokenizer and code; None: encoded here.

    The sources' texts are read on a reader thread, in order, and HF-encoded on an encoding thread (Arrow's decode and
    encode_batch_fast release the GIL; HF runs on its Rust threads): the next source is read while one is encoded,
    and encoded while this thread compares the ids of the one before."""
    stats = json.loads(storage.read_text(layout.SHARD_STATS))
    dtype, L = token_dtype(stats["dtype"]), stats["packing"]["sample_len"]
    sep = stats["packing"].get("separator_id")
    app = _appearances(storage, stats)
    picks, docs = choose(app, seed)
    hf = backends.HFEncoder(tok)
    streams = {sp: _Stream(storage, stats["splits"][sp]["shards"], L, dtype) for sp in ("train", "val")}
    report = ExactnessReport({s: SourceCheck(documents=docs[s]) for s in docs})

    def read(source: str, rows: np.ndarray) -> tuple:
        """(sampled doc ids, their (split, start, tokens), their texts, the documents file, its sha256 or None, HF's
        ids of the sample when stored by that file (then no text is read and the texts are None))."""
        sub = app.take(pa.array(rows))
        ids = sub.column("doc_id").to_pylist()
        path = (paths or {}).get(source) or storage.source(layout.RAW_DOCS.format(source=source))
        where = list(zip(*(sub.column(c).to_pylist() for c in ("split", "start", "tokens"))))
        # a local documents file's bytes (and this module's reading code) fix each doc id's text: HF's ids of the
        # same doc ids of the same file are read from the store without reading a text (reference_ids.by_file)
        file_sha = transport.sha256_file_remembered(path) if reference is not None and isinstance(path, str) \
            and not transport.is_s3(path) else None
        if file_sha is not None:
            got = reference.by_file(source, file_sha, ids, _READER)
            if got is not None:
                return ids, where, None, path, file_sha, got
        return ids, where, _texts(path, set(ids)), path, file_sha, None

    def prepare(source: str, reading) -> tuple[str, list, list, list[np.ndarray]]:
        """(source, sampled doc ids, their (split, start, tokens), HF's ids of each)."""
        ids, where, texts, path, file_sha, got = reading.result()
        if got is not None:
            return source, ids, where, got
        missing = [d for d in ids if texts.get(d) is None]
        if missing:
            raise ValueError(f"{path}: no text for document {missing[0]!r} of the shards; the documents "
                             "changed after token_shards")
        sampled = [texts[d] for d in ids]
        del texts
        if reference is not None:
            out = reference.arrays(source, sampled)
            if file_sha is not None:
                reference.file_by_file(source, file_sha, ids, _READER, sampled)
            return source, ids, where, out
        want: list[np.ndarray] = []
        for lo in range(0, len(ids), ENCODE_BATCH):
            want += [np.asarray(w, np.int64) for w in hf.encode(sampled[lo:lo + ENCODE_BATCH])]
        return source, ids, where, want

    def compare(source: str, ids: list, where: list, want: list[np.ndarray]) -> None:
        res = report.sources[source]
        res.sampled = len(set(ids))
        extra = 0 if sep is None else 1
        # each document's shard tokens (as many of its ids as the shards hold) against HF's ids, all at once
        n = np.array([min(take, len(w) + extra) for (_, _, take), w in zip(where, want)], np.int64)
        have = [streams[split].read(start, int(k)) for (split, start, _), k in zip(where, n)]
        got = np.array([len(h) for h in have], np.int64)
        res.tokens += int(got.sum())
        # HF's ids as the shards should hold them: each document's first `got` ids, its separator when they reach it
        sep_row = np.array([0 if sep is None else sep], np.int64)
        parts = []
        for w, k in zip(want, got.tolist()):
            parts.append(w[:k])
            if extra and k > len(w):
                parts.append(sep_row)
        ref = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
        flat = np.concatenate(have).astype(np.int64) if have else np.zeros(0, np.int64)
        bad_at = np.flatnonzero(flat != ref)
        ends = np.cumsum(got)
        bad = np.zeros(len(ids), bool)
        bad[np.searchsorted(ends, bad_at, side="right")] = True
        bad |= np.array([take > len(w) + extra for (_, _, take), w in zip(where, want)], bool)
        res.mismatched += [d for d, b in zip(ids, bad.tolist()) if b]

    try:
        # a reader thread reads the sources' texts in order, ahead of the encoding thread (the encoder's Rust
        # threads would otherwise wait while a documents file is decoded); one encoding thread calls `reference`
        with ThreadPoolExecutor(max_workers=1) as reader, ThreadPoolExecutor(max_workers=1) as pool:
            order = list(picks)
            readings = {s: reader.submit(read, s, picks[s]) for s in order[:1]}
            pending: deque = deque()  # sources prepared (read and encoded) ahead of their comparison
            for i, source in enumerate(order):
                for ahead in order[i + 1:i + 2]:  # at most one source's texts read ahead of its encoding
                    readings[ahead] = reader.submit(read, ahead, picks[ahead])
                pending.append(pool.submit(prepare, source, readings.pop(source)))
                while len(pending) > 1:  # compare a source while the next one is read and encoded
                    compare(*pending.popleft().result())
            while pending:
                compare(*pending.popleft().result())
    finally:
        for s in streams.values():
            s.close()
    return report
