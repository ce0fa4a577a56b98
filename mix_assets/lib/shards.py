"""Tokenise kept documents once and write train/val token shards with bounded memory.

Pass 1 reads each source's Parquet in file order, in record batches, and encodes the documents
it needs with `Tokenizer.encode_batch_fast` (multi-threaded in Rust) in batches of at most
`encode_batch_docs` documents and ENCODE_BATCH_CHARS characters; the next batch encodes (GIL
released) while the previous one's ids go to a local spill file (one dtype array, appended).
Train documents are read in rounds: only as many as the budget fill needs (estimated from byte
counts, then corrected with the observed bytes/token), so the excess headroom is not encoded;
the final selection depends only on true token counts, never on the estimate.
Pass 2 walks the appearances in stream order, reads each document's ids back from the spill
with pread, and feeds the packer, which writes each shard atomically through `Storage`.
Peak memory: two encode batches + one shard buffer + O(documents) numpy/Arrow columns (doc ids
stay in Arrow string arrays; offsets, lengths, appearances and order keys are int64/uint64
arrays, a few tens of bytes per document): no Python object is held per document.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from mix_assets.lib import layout, scratch
from mix_assets.lib.packing import (
    Appearances,
    Packer,
    ShardRecord,
    SplitStats,
    fill_budget,
    order_from_keys,
    order_keys,
)
from mix_assets.lib.split import unit_hash


@dataclass(frozen=True)
class SourceBudget:
    name: str
    unique_budget: int  # N x share
    stream_budget: int  # N x share x epochs
    epochs: float


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


@dataclass
class ShardsResult:
    dtype: str
    splits: dict[str, SplitStats]
    sources: dict[str, SourceResult]
    encoded_bytes: int = 0  # UTF-8 bytes of text encoded
    encoded_tokens: int = 0  # ids produced by the tokenizer (separators excluded)
    rounds: dict[str, int] = field(default_factory=dict)

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
    sel_bytes: np.ndarray  # int64 n_bytes of the train documents, selection order
    offset: np.ndarray = field(init=False)  # int64 spill offset per document (-1 = not encoded)
    length: np.ndarray = field(init=False)  # int64 tokens per document, separator included
    apps: Optional[Appearances] = None  # the budget fill, positions in the train documents

    def __post_init__(self):
        self.offset = np.full(len(self.ids), -1, np.int64)
        self.length = np.zeros(len(self.ids), np.int64)


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


def _encode_sources(budgets, per_source: dict[str, _SourceDocs], raw_paths, enc, bytes_per_token_guess,
                    result) -> None:
    """Pass 1: per source, encode its val documents and the train prefix its budget needs; fail
    with ShortfallError as soon as a source's kept train documents cannot fill its budget."""
    for s in sorted(budgets):
        sd = per_source[s]
        n_val, n_sel, sel_bytes = sd.n_val, len(sd.ids) - sd.n_val, sd.sel_bytes
        b = budgets[s]
        done, rounds, with_val = 0, 0, n_val > 0
        while True:
            have = int(sd.length[n_val : n_val + done].sum())
            # bytes/token: this source's own once some of it is encoded, else the mix's, else the guess
            if have:
                bpt = float(sel_bytes[:done].sum()) / have
            else:
                bpt = (enc.bytes / enc.tokens) if enc.tokens else bytes_per_token_guess
            need = b.unique_budget - have
            if need <= 0 or done == n_sel:
                break
            # estimated docs to reach the budget (+10 % so one round usually suffices); the final
            # cut uses true counts only, never this estimate
            est = np.cumsum(sel_bytes[done:] / bpt)
            k = int(np.searchsorted(est, need * 1.10 + 64, side="left")) + 1
            upto = min(n_sel, done + max(k, 16))
            wanted = np.arange(n_val + done, n_val + upto, dtype=np.int64)
            if with_val:
                wanted = np.concatenate([np.arange(n_val, dtype=np.int64), wanted])
            _read_source(raw_paths[s], sd, wanted, enc)
            with_val, done, rounds = False, upto, rounds + 1
        if with_val:  # budget already met (or no train docs): still encode val
            _read_source(raw_paths[s], sd, np.arange(n_val, dtype=np.int64), enc)
        result.rounds[s] = rounds
        lengths = sd.length[n_val : n_val + done]
        n_unique, sd.apps = fill_budget(s, lengths, b.unique_budget, b.stream_budget, n_docs_available=n_sel)
        result.sources[s] = SourceResult(unique_documents=n_unique, budget_tokens=b.stream_budget,
                                         epochs=b.epochs, encoded_train_documents=done)


class _SpillReader:
    def __init__(self, path: str, dtype: np.dtype):
        self.fd = os.open(path, os.O_RDONLY)
        self.dtype = dtype

    def read(self, offset: int, n: int) -> np.ndarray:
        isz = self.dtype.itemsize
        b = os.pread(self.fd, n * isz, offset * isz)
        if len(b) != n * isz:
            raise IOError(f"spill file short read at token {offset} (+{n})")
        return np.frombuffer(b, dtype=self.dtype)

    def close(self) -> None:
        os.close(self.fd)


# An encode batch is also capped in characters: the tokenizer's Encoding objects cost ~100 bytes
# per token, so a batch of 1,000 long documents would otherwise set the peak memory.
ENCODE_BATCH_CHARS = 2_000_000


class _Encoder:
    """Batches texts, encodes them, appends ids (+ separator) to the spill, records offsets."""

    def __init__(self, tok: Tokenizer, spill: _Spill, batch_docs: int, separator_id: Optional[int],
                 batch_chars: int = ENCODE_BATCH_CHARS):
        self.tok, self.spill, self.batch_docs, self.sep = tok, spill, batch_docs, separator_id
        self.batch_chars = batch_chars
        self.pending_ids: list[int] = []  # positions in the current target's arrays
        self.pending_texts: list[str] = []
        self.pending_chars = 0
        # (offsets, lengths incl. separator): int64 arrays the current _read_source fills
        self.target: Optional[tuple[np.ndarray, np.ndarray]] = None
        self.bytes = 0
        self.tokens = 0
        self.inflight = None
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode")

    def add(self, positions: list[int], texts: list[str]) -> None:
        for d, t in zip(positions, texts):
            self.pending_ids.append(d)
            self.pending_texts.append(t)
            self.pending_chars += len(t)
            if len(self.pending_texts) >= self.batch_docs or self.pending_chars >= self.batch_chars:
                self._encode()

    def flush(self) -> None:
        if self.pending_texts:
            self._encode()
        self._finish_inflight()

    def _encode(self) -> None:
        """Submit the pending batch; while Rust encodes it (GIL released), the previous batch's ids
        are converted and spilled here, and the caller goes on reading Parquet."""
        ids, texts = self.pending_ids, self.pending_texts
        self.pending_ids, self.pending_texts, self.pending_chars = [], [], 0
        fut = self.pool.submit(self.tok.encode_batch_fast, texts, add_special_tokens=False)
        self._finish_inflight()
        self.inflight = (ids, texts, fut, self.target)

    def _finish_inflight(self) -> None:
        if self.inflight is None:
            return
        ids, texts, fut, (offsets, lengths) = self.inflight
        self.inflight = None
        encs = fut.result()
        seqs = [e.ids for e in encs]
        del encs
        lens = np.fromiter((len(s) for s in seqs), np.int64, len(seqs))
        total = int(lens.sum())
        flat = np.fromiter(itertools.chain.from_iterable(seqs), self.spill.dtype, total)
        del seqs
        self.tokens += total
        self.bytes += sum(len(t.encode("utf-8")) for t in texts)
        if self.sep is not None:
            flat = np.insert(flat, np.cumsum(lens), self.sep)
            lens = lens + 1
        off = self.spill.append(flat)
        starts = off + np.concatenate(([0], np.cumsum(lens)[:-1]))
        pos = np.asarray(ids, np.int64)
        offsets[pos] = starts  # a doc_id twice in the file: the last one wins, as it is read last
        lengths[pos] = lens

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def _wanted_batches(pf: pq.ParquetFile, value_set: pa.Array, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """(doc_id, text) batches of the row groups holding a wanted doc_id, in file order. One row group
    at a time: a whole-file iter_batches buffers ahead and its memory grows with the file (measured:
    96 MB of Arrow memory on a 92 MB file, 28 MB row group by row group); groups with no wanted
    document are skipped without decoding their text."""
    for i in range(pf.num_row_groups):
        if not pc.any(pc.is_in(pf.read_row_group(i, columns=["doc_id"]).column(0), value_set=value_set)).as_py():
            continue
        yield from pf.iter_batches(row_groups=[i], columns=["doc_id", "text"], batch_size=batch_rows)


def _read_source(path: str, sd: _SourceDocs, wanted: np.ndarray, enc: _Encoder, batch_rows: int = 2048) -> None:
    """Feed the wanted documents (positions in `sd.ids`) of one Parquet file to the encoder, in
    file order, and record their spill offsets and lengths in `sd`."""
    if not len(wanted):
        return
    wanted_ids = sd.ids.take(pa.array(wanted))
    value_set = pc.unique(wanted_ids)
    offsets = np.full(len(value_set), -1, np.int64)
    lengths = np.zeros(len(value_set), np.int64)
    enc.target = (offsets, lengths)
    found = 0
    pf = pq.ParquetFile(path)
    for batch in _wanted_batches(pf, value_set, batch_rows):
        pos = pc.index_in(batch.column(0), value_set=value_set)
        mask = pc.is_valid(pos)
        if not pc.any(mask).as_py():
            continue
        sel = batch.filter(mask)
        texts = sel.column(1)
        if texts.null_count:
            row = sel.column(0)[int(np.flatnonzero(pc.is_null(texts).to_numpy(zero_copy_only=False))[0])]
            raise ValueError(f"{path}: document {row.as_py()!r}: field text is null")
        found += sel.num_rows
        enc.add(pos.filter(mask).to_numpy().tolist(), texts.to_pylist())
    enc.flush()
    enc.target = None
    if found != len(value_set) or (offsets < 0).any():
        missing = sorted(value_set.filter(pa.array(offsets < 0)).to_pylist())[:3]
        raise ValueError(f"{path}: {len(value_set) - found} document(s) of the validation split are not in this "
                         f"file (e.g. {missing}); the split is older than the raw documents: rebuild validation_split")
    at = pc.index_in(wanted_ids, value_set=value_set).to_numpy()
    sd.offset[wanted] = offsets[at]
    sd.length[wanted] = lengths[at]


SPILL = "token_spill"


def build_shards(
    tok: Tokenizer,
    split_path: str,
    raw_paths: dict[str, str],
    budgets: dict[str, SourceBudget],
    plan: PackingPlan,
    dtype: str,
    storage,
    scratch_dir: Optional[str] = None,
    bytes_per_token_guess: float = 4.0,
) -> ShardsResult:
    """Encode, fill budgets, pack and write `mix/train/*.bin` and `mix/val/*.bin` through `storage`."""
    np_dtype = np.dtype(dtype).newbyteorder("<")
    split = pq.read_table(split_path, columns=["doc_id", "source", "n_bytes", "split"])
    missing = sorted(set(budgets) - set(raw_paths))
    if missing:
        raise ValueError(f"no raw documents for source(s) {missing}")
    result = ShardsResult(dtype=dtype, splits={}, sources={})
    # A rebuild never leaves shards of an older build beside the new ones, and the old manifest
    # (the completion marker of the mix directory) goes first.
    storage.delete(layout.MANIFEST)
    for split_name in ("train", "val"):  # (with any .tmp shard a killed build left)
        storage.delete_prefix(f"{layout.MIX_DIR}/{split_name}/")
    # spill folders of killed builds (a concurrent build's is kept: its process is alive)
    scratch.sweep(scratch_dir or tempfile.gettempdir(), SPILL)
    with tempfile.TemporaryDirectory(prefix=scratch.owner_prefix(SPILL), dir=scratch_dir) as tmp:
        spill = _Spill(os.path.join(tmp, "spill.bin"), np_dtype)
        enc = _Encoder(tok, spill, plan.encode_batch_docs, plan.separator_id)

        # per source: val documents (all), then train documents in selection order, as columns
        per_source: dict[str, _SourceDocs] = {}
        for s in sorted(budgets):
            rows = split.filter(pc.equal(split.column("source"), s))
            is_val = pc.equal(rows.column("split"), "val")
            val_ids = rows.filter(is_val).column("doc_id").combine_chunks()
            tr = rows.filter(pc.invert(is_val))
            ids = tr.column("doc_id").combine_chunks()
            nb = np.asarray(tr.column("n_bytes").to_numpy(zero_copy_only=False), np.int64)
            order = _selection_order(plan.seed, ids)
            per_source[s] = _SourceDocs(pa.concat_arrays([val_ids, ids.take(pa.array(order))]), len(val_ids),
                                        nb[order])
        del split

        # pass 1: encode val + the train prefix the budget needs, round by round
        try:
            _encode_sources(budgets, per_source, raw_paths, enc, bytes_per_token_guess, result)
        finally:
            enc.close()
            spill.close()
        result.encoded_bytes, result.encoded_tokens = enc.bytes, enc.tokens
        reader = spill.reader()

        try:
            # pass 2: train stream (budget fill) and val stream (all val documents, one epoch)
            names = sorted(budgets)
            train = [(per_source[s].n_val + per_source[s].apps.index, per_source[s].apps.epoch,
                      per_source[s].apps.take) for s in names]
            result.splits["train"] = _pack("train", per_source, names, train, reader, plan, dtype, storage)
            val = [(np.arange(per_source[s].n_val, dtype=np.int64), np.zeros(per_source[s].n_val, np.int64),
                    per_source[s].length[: per_source[s].n_val]) for s in names]
            result.splits["val"] = _pack("val", per_source, names, val, reader, plan, dtype, storage)
        finally:
            reader.close()

    for s, r in result.sources.items():
        r.train_tokens = result.splits["train"].sources.get(s, 0)
        r.val_tokens = result.splits["val"].sources.get(s, 0)
    return result


def _pack(split_name, per_source: dict[str, _SourceDocs], names: list[str], parts, reader, plan: PackingPlan,
          dtype, storage):
    """Pack one split. parts[i] = (document positions in per_source[names[i]], epochs, takes): the
    appearances of source names[i], concatenated in `names` order before the stream-order sort."""

    def write(index: int, tokens: np.ndarray) -> ShardRecord:
        key = layout.SHARD.format(split=split_name, index=index)
        data = tokens.tobytes()
        with storage.writing(key) as tmp:
            with open(tmp, "wb") as f:
                f.write(data)
        return ShardRecord(
            path=key.removeprefix(layout.MIX_DIR + "/"),
            samples=len(tokens) // plan.sample_len,
            bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )

    def app_ids(i: int):
        return per_source[names[i]].ids.take(pa.array(parts[i][0]))

    n = sum(len(p[0]) for p in parts)
    keys = np.empty(n, np.uint64)
    at = 0
    for i, (pos, ep, _) in enumerate(parts):
        keys[at : at + len(pos)] = order_keys(plan.seed, _strings(app_ids(i)), ep.tolist(), len(pos))
        at += len(pos)
    epochs = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    offsets = np.concatenate([per_source[names[i]].offset[p[0]] for i, p in enumerate(parts)]) if parts else epochs
    takes = np.concatenate([p[2] for p in parts]) if parts else epochs
    src = np.repeat(np.arange(len(parts), dtype=np.int32), [len(p[0]) for p in parts])
    order = order_from_keys(keys, epochs, lambda: _stable_rank(pa.concat_arrays([app_ids(i) for i in range(len(parts))])))
    del keys

    packer = Packer(plan.sample_len, plan.shard_samples, dtype, write)
    for c in range(0, n, _CHUNK):
        o = order[c : c + _CHUNK]
        for off, take, si in zip(offsets[o].tolist(), takes[o].tolist(), src[o].tolist()):
            packer.feed(reader.read(off, take), names[si])
    stats = packer.finish()
    distinct = [per_source[names[i]].ids.take(pa.array(np.unique(p[0]))) for i, p in enumerate(parts)]
    stats.documents = pc.count_distinct(pa.concat_arrays(distinct)).as_py() if distinct else 0
    return stats


def packing_plan(spec, tok: Tokenizer) -> PackingPlan:
    from mix_assets.lib.tokenizer import separator_id

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
    )


def build_token_shards(storage, spec, scratch_dir: Optional[str] = None) -> ShardsResult:
    """Shards of the mix described by `spec` (a MixSpec) and `tokens/shard_stats.json`.

    The encoder uses `spec.packing.threads` Rust threads unless RAYON_NUM_THREADS is already set
    (it only takes effect before the process's first parallel encode); outputs do not depend on it.
    """
    import json

    from mix_assets.lib.storage import UPLOAD
    from mix_assets.lib.tokenizer import dtype_for_vocab

    os.environ.setdefault("RAYON_NUM_THREADS", str(spec.packing.threads))
    tok = Tokenizer.from_file(storage.local_path(layout.TOKENIZER_FILE))
    plan = packing_plan(spec, tok)
    budgets = {
        s.name: SourceBudget(s.name, spec.unique_budget(s.name), spec.stream_budget(s.name), s.epochs)
        for s in spec.sources
    }
    raw = {s.name: storage.source(layout.RAW_DOCS.format(source=s.name)) for s in spec.sources}
    # local copies of S3 uploads a killed build left behind
    scratch.sweep(storage.cache_dir or tempfile.gettempdir(), UPLOAD)
    result = build_shards(
        tok, storage.source(layout.VALIDATION_SPLIT), raw, budgets, plan,
        dtype_for_vocab(tok.get_vocab_size(with_added_tokens=True)), storage, scratch_dir,
        bytes_per_token_guess=spec.tokenizer.bytes_per_token_fallback,
    )
    storage.write_text(layout.SHARD_STATS, json.dumps(result.to_json(plan.to_json()), indent=1) + "\n")
    return result


# -- the checks on shard_stats.json -----------------------------------------------------------------


def shard_problems(stats: dict, exists: Callable[[str], bool]) -> list[str]:
    """Why shard_stats.json's shards are not all present, non-empty and of their recorded size."""
    isz = 2 if stats["dtype"] == "uint16" else 4
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
            elif sh["bytes"] != sh["samples"] * L * isz:
                problems.append(f"{sh['path']}: {sh['bytes']} bytes for {sh['samples']} samples")
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
    return {f"{layout.MIX_DIR}/{sh['path']}": sh["sha256"]
            for sp in stats["splits"].values() for sh in sp["shards"]}
