"""token_shards' persistent token-id cache: a document whose text was encoded before is not encoded again.

A document's ids depend only on its text and on what encodes it, so the cache is keyed by
  `cache_key` = hash(the tokenizer file's sha256, the encoding code (encoding.py's source), the
  `tokenizers` version, the mix dtype, add_special_tokens)
and, within it, by the blake2b-128 of each document's UTF-8 text (`text_keys`): the same text under the
same key always gives the same ids, wherever it sits in the raw file and whatever its doc_id.

Stored per source as immutable Parquet parts (layout.TOKEN_CACHE_PART): each encoded chunk's documents (or,
with shards.CACHE_PART_DOCS > 1, a round's chunks gathered into parts of at least that many documents), each written atomically by the
reduce's writer thread once complete, named by a hash of its keys (so a part is never overwritten: the same
name means the same bytes) and never modified; a killed build leaves only whole parts, which the next build
reads. Columns: key (fixed_size_binary(16)), n_bytes (int64), ids (binary: the
tokenizer's ids of the document, no separator, little-endian in the mix dtype), row groups of GROUP_ROWS
documents so a lookup reads only the groups it needs.

Lookup (`locate`) works one source at a time: the source's part keys are sorted once (`_KeyIndex`: 32 B per
cached document, only during the lookup), and the raw file's text keys, hashed by map tasks (`hash_chunk`),
are matched a chunk at a time as they arrive, leaving one int64 position per raw row (8 B per raw document
while the source is read). `SourceHits.read` streams the hits part by part (one part's ids in memory at a time).

The text keys of a raw file are a pure function of its bytes and of this module's hashing code, so once hashed
they are filed in the object store (core/objects.py: keyed record `keyed/token_text_keys/<key>.json`, key =
hash(the file's sha256, this module's source version), naming one blob: keys, then a state byte per row): a
rebuild reads the unchanged sources' keys from it instead of reading and hashing their text again. A build
that hashed every row (a source with cache parts) files every key; one that found no part files the keys of
the rows it encoded (encode_chunk hashes them), the others marked not hashed: a later build looks those up as
misses and encodes them if it wants them (their ids are the same either way). A blob that does not hash to its
name, or whose size does not fit the file's row count, is never used (the text is hashed).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import tokenizers

from mix_assets.core import engine, imports, keys as artifact_keys, layout, objects, tables
from mix_assets.format.shards import token_dtype
from mix_assets.stages.tokens import encoding

FORMAT = "mix_assets.token_ids/1"
META_KEY = b"mix_assets.token_ids"
KEY_BYTES = 16
GROUP_ROWS = 1024  # documents per row group of a part (~2 MB of ids at 1 k tokens a document)
SCHEMA = pa.schema([("key", pa.binary(KEY_BYTES)), ("n_bytes", pa.int64()), ("ids", pa.binary())])
_PART = re.compile(r"part-[0-9a-f]{16}\.parquet")

# The code that decides a document's ids (encoding.py and every project module it imports): an edit there
# starts a new cache key (the old one is left for gc).
_CODE = imports.source_version(encoding.__name__)[:16]
TEXT_KEYS_ASSET = "token_text_keys"
KNOWN, NULL_TEXT, NOT_HASHED = 0, 1, 2  # a filed text key's row state
_KEYS_CODE = imports.source_version(__name__)[:16]  # text_keys and hash_chunk are this module's


def text_keys_key(file_sha256: str) -> str:
    """The artifact key of a raw file's text keys: its bytes and the hashing code, not where it is."""
    return artifact_keys.artifact_key(TEXT_KEYS_ASSET, _KEYS_CODE, {"file": file_sha256})


def describe(tokenizer_sha256: str, dtype: str) -> dict:
    """What the ids under one cache key are computed from (its hash is the key; stored in every part)."""
    return {"format": FORMAT, "tokenizer_sha256": tokenizer_sha256, "code": _CODE,
            "tokenizers": tokenizers.__version__, "dtype": dtype,
            "add_special_tokens": encoding.ADD_SPECIAL_TOKENS}


def cache_key(meta: dict) -> str:
    return hashlib.sha256(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def text_keys(texts: pa.Array) -> np.ndarray:
    """(n, KEY_BYTES) uint8: blake2b-128 of each text's UTF-8 bytes (a null text: zeros, never looked up)."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    raw = texts.cast(pa.large_binary() if pa.types.is_large_string(texts.type) else pa.binary())
    out = bytearray()
    zero = bytes(KEY_BYTES)
    for i in range(0, len(raw), 65536):
        out += b"".join(zero if v is None else hashlib.blake2b(v, digest_size=KEY_BYTES).digest()
                        for v in raw.slice(i, 65536).to_pylist())
    return np.frombuffer(bytes(out), np.uint8).reshape(len(raw), KEY_BYTES)


def hash_chunk(rows: engine.RowRange) -> tuple[np.ndarray, np.ndarray]:
    """The map task of a lookup: (text keys, is-null mask) of every row of the range (pure)."""
    texts = engine.read_rows(rows, ["text"]).column("text").combine_chunks()
    out = text_keys(texts), texts.is_null().to_numpy(zero_copy_only=False)
    del texts
    tables.release_unused()
    return out


class _KeyIndex:
    """The cached keys sorted by their first 8 bytes (numpy, no hash table): 32 B per cached document.
    A lookup compares all 16 bytes; should two keys share their first 8 (odds ~ n^2 / 2^64), the later one
    only misses (is encoded again), never matches the wrong document."""

    def __init__(self, keys: np.ndarray):
        self.keys = np.ascontiguousarray(keys, np.uint8)
        head = self.keys[:, :8].copy().view("<u8").ravel()
        self.order = np.argsort(head, kind="stable")
        self.head = head[self.order]

    def lookup(self, keys: np.ndarray, null: np.ndarray) -> np.ndarray:
        """Each key's position among the cached keys, -1 when absent (or its text is null)."""
        keys = np.ascontiguousarray(keys, np.uint8)
        if not len(self.head) or not len(keys):
            return np.full(len(keys), -1, np.int64)
        head = keys[:, :8].copy().view("<u8").ravel()
        i = np.minimum(np.searchsorted(self.head, head), len(self.head) - 1)
        cand = self.order[i]
        hit = (self.head[i] == head) & (self.keys[cand] == keys).all(axis=1) & ~np.asarray(null, bool)
        return np.where(hit, cand, -1).astype(np.int64)


def _fixed(keys: np.ndarray) -> pa.Array:
    keys = np.ascontiguousarray(keys, np.uint8)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(KEY_BYTES), len(keys), [None, pa.py_buffer(keys.tobytes())])


@contextlib.contextmanager
def _open_part(storage, key: str) -> Iterator[pq.ParquetFile]:
    """A part read in place (S3: range GETs of the footer and the row groups read), closed after."""
    if storage.is_s3:
        with storage.open(key) as f:
            yield pq.ParquetFile(f)
    else:
        yield pq.ParquetFile(storage.local_path(key))


@dataclass
class SourceHits:
    """Where each raw row of one source sits in its cache: `pos` = row in the parts concatenated (-1: miss)."""

    parts: list[str]  # storage keys, in the order their rows are numbered
    starts: np.ndarray  # int64 first position of each part, + the total
    pos: np.ndarray  # int64 per raw row

    def read(self, storage, rows: np.ndarray, dtype: np.dtype, separator_id: Optional[int]
             ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
        """For raw `rows` that are all hits, part after part: (indices into `rows`, their ids back to back
        each followed by the separator when set, lengths with it, text bytes)."""
        pos = self.pos[rows]
        part = np.searchsorted(self.starts, pos, side="right") - 1
        for p in np.unique(part).tolist():
            at = np.flatnonzero(part == p)
            local = pos[at] - self.starts[p]
            with _open_part(storage, self.parts[p]) as f:
                ends = np.cumsum([f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)])
                groups = np.unique(np.searchsorted(ends, local, side="right")).tolist()
                t = f.read_row_groups(groups, columns=["n_bytes", "ids"], use_threads=False)
            first = np.concatenate([[0], ends])[groups]  # the kept groups' first rows
            within = np.concatenate([np.arange(a, a + ends[g] - a) for g, a in zip(groups, first)])
            got = t.take(pa.array(np.searchsorted(within, local).astype(np.int64)))
            ids = got.column("ids").combine_chunks()
            off = np.frombuffer(ids.buffers()[1], np.int32)[ids.offset: ids.offset + len(ids) + 1]
            data = np.frombuffer(ids.buffers()[2], np.uint8)[off[0]: off[-1]].view(dtype)
            lens = np.diff(off).astype(np.int64) // dtype.itemsize
            if separator_id is not None:
                data = np.insert(data, np.cumsum(lens), np.asarray(separator_id, dtype))
                lens = lens + 1
            yield at, data, lens, int(pc.sum(got.column("n_bytes")).as_py() or 0)
            del t, got, ids, data


class TokenCache:
    """One cache key's parts under a storage root (layout.TOKEN_CACHE_PART)."""

    def __init__(self, storage, tokenizer_sha256: str, dtype: str):
        self.storage, self.dtype = storage, token_dtype(dtype)
        self.meta = describe(tokenizer_sha256, dtype)
        self.key = cache_key(self.meta)
        self._schema = SCHEMA.with_metadata({META_KEY: json.dumps(self.meta, sort_keys=True).encode()})

    def folder(self, source: str) -> str:
        return layout.TOKEN_CACHE_PART.format(key=self.key, source=source, name="x").rsplit("/", 1)[0]

    def parts(self, source: str) -> list[str]:
        """The source's complete parts (a killed write's temporary file is not one), sorted."""
        return [k for k in self.storage.list(self.folder(source)) if _PART.fullmatch(k.rsplit("/", 1)[-1])]

    def locate(self, source: str, parts: list[str], chunks: Iterable[tuple[np.ndarray, np.ndarray]]) -> SourceHits:
        """Match the raw rows' text keys, given a chunk at a time as (keys, null mask) in row order
        (`hash_chunk`'s results), against the source's parts (`parts`, from `parts`)."""
        cached, starts = [], [0]
        for k in parts:
            with _open_part(self.storage, k) as f:
                md = (f.schema_arrow.metadata or {}).get(META_KEY)
                if md is None or json.loads(md) != self.meta:
                    raise ValueError(f"{self.storage.uri(k)}: not a token-id part of cache key {self.key} "
                                     f"(its metadata: {md!r}); delete {self.storage.uri(self.folder(source))}")
                col = f.read(columns=["key"], use_threads=False).column("key").combine_chunks()
            cached.append(np.frombuffer(col.buffers()[1], np.uint8)[col.offset * KEY_BYTES:][: len(col) * KEY_BYTES])
            starts.append(starts[-1] + len(col))
        index = _KeyIndex(np.concatenate(cached).reshape(-1, KEY_BYTES) if cached else np.zeros((0, KEY_BYTES), np.uint8))
        del cached
        pos = [index.lookup(keys, null) for keys, null in chunks]
        return SourceHits(list(parts), np.asarray(starts, np.int64),
                          np.concatenate(pos) if pos else np.zeros(0, np.int64))

    def stored_text_keys(self, file_sha256: str, rows: int) -> Optional[tuple[np.ndarray, np.ndarray]]:
        """(text keys, not-to-look-up mask) of the `rows` rows of the file whose bytes hash to `file_sha256`, as
        filed by `file_text_keys` (a row whose text is null or was not hashed is never looked up: a miss);
        None when none is filed, or its blob is missing, changed or of another size."""
        key = text_keys_key(file_sha256)
        try:
            rec = objects.read_keyed(self.storage, TEXT_KEYS_ASSET, key)
            if rec is None:
                return None
            (sha,) = rec["outputs"].values()
            data = self.storage.store.read_bytes(objects.object_key(sha))
        except (OSError, ValueError, KeyError):
            data = None
        if data is None or len(data) != rows * (KEY_BYTES + 1) or hashlib.sha256(data).hexdigest() != sha:
            # a missing or changed blob goes with its record, so the keys hashed now are filed in their place
            store = self.storage.store
            if data is not None:
                store.delete(objects.object_key(sha))
            store.delete(objects.keyed_key(TEXT_KEYS_ASSET, key))
            return None
        state = np.frombuffer(data, np.uint8, rows, offset=rows * KEY_BYTES)
        return np.frombuffer(data, np.uint8, rows * KEY_BYTES).reshape(rows, KEY_BYTES), state != KNOWN

    def file_text_keys(self, source: str, file_sha256: str, keys: np.ndarray, state: np.ndarray) -> None:
        """File the text keys of the rows of the file whose bytes hash to `file_sha256` (see the module doc);
        `state` per row: KNOWN, NULL_TEXT or NOT_HASHED (its key bytes are then zeros, never looked up)."""
        work = layout.TOKEN_TEXT_KEYS.format(source=source)
        data = np.ascontiguousarray(keys, np.uint8).tobytes() + np.ascontiguousarray(state, np.uint8).tobytes()
        self.storage.write_bytes(work, data)
        try:
            objects.stash(self.storage, TEXT_KEYS_ASSET, text_keys_key(file_sha256),
                          {work: hashlib.sha256(data).hexdigest()}, input_keys={"file": file_sha256},
                          code_version=_KEYS_CODE, run_id="", dagster=None)
        finally:
            self.storage.delete(work)

    def write(self, source: str, keys: np.ndarray, n_bytes: np.ndarray, tokens: np.ndarray, lengths: np.ndarray,
              separator_id: Optional[int]) -> Optional[str]:
        """Store one encode chunk's documents (ids as the spill holds them: separator included when set) as a
        new part; None when there is nothing to store or an identical part exists."""
        if not len(keys):
            return None
        lens = np.asarray(lengths, np.int64)
        flat = np.asarray(tokens).astype(self.dtype, copy=False)
        if separator_id is not None:  # drop each document's trailing separator
            keep = np.ones(len(flat), bool)
            keep[np.cumsum(lens) - 1] = False
            flat, lens = flat[keep], lens - 1
        name = hashlib.blake2b(np.ascontiguousarray(keys, np.uint8).tobytes(), digest_size=8).hexdigest()
        key = layout.TOKEN_CACHE_PART.format(key=self.key, source=source, name=name)
        if self.storage.exists(key):
            return None
        off = np.concatenate([[0], np.cumsum(lens * self.dtype.itemsize)])
        if off[-1] >= 2**31:
            raise ValueError(f"{source}: an encode chunk of {off[-1]:,} id bytes is too large for one cache part; "
                             "lower engine.chunk_rows")
        ids = pa.Array.from_buffers(pa.binary(), len(lens), [None, pa.py_buffer(off.astype(np.int32).tobytes()),
                                                             pa.py_buffer(flat.tobytes())])
        t = pa.Table.from_arrays([_fixed(keys), pa.array(np.asarray(n_bytes, np.int64)), ids], schema=self._schema)
        with self.storage.writing(key) as tmp:
            with pq.ParquetWriter(tmp, self._schema, compression="zstd", use_dictionary=False,
                                  write_statistics=False) as w:
                w.write_table(t, row_group_size=GROUP_ROWS)
        return key
