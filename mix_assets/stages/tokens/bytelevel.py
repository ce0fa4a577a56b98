"""Byte-level BPE decoding as a table gather: token ids to an Arrow string array, no Python strings.

    dec = ByteDecoder.of(tokenizer)        # None unless decoding is per-token bytes, concatenated
    texts = dec.texts(ids, bounds)         # row i = tokenizer.decode(ids[bounds[i]:bounds[i + 1]])

A `tokenizers` Tokenizer whose decoder is `ByteLevel` alone decodes a sequence by mapping each
token to its bytes (each char of the token through the byte-level alphabet, or the token's own
UTF-8 when a char is outside it) and reading the concatenation as UTF-8 with invalid bytes
replaced. So a sequence whose concatenated bytes are valid UTF-8 decodes to exactly those bytes:
`texts` gathers them from a per-token table with numpy and hands them to Arrow as buffers.
Rows whose bytes are not valid UTF-8 (a multi-byte character cut at the row's edge) are decoded by
the tokenizer itself, so every row equals `decode_batch(..., skip_special_tokens=False)`.

`of` builds the table from the tokenizer's own vocabulary and checks every token against the
tokenizer's decoding of it (and of all tokens in one sequence); any difference, or another decoder,
and it returns None (the caller decodes with the tokenizer).
"""

from __future__ import annotations

import codecs
import json
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _char_bytes() -> dict[str, int]:
    """The byte-level alphabet (GPT-2's bytes_to_unicode), char -> byte."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, n = list(bs), 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _token_bytes(token: Optional[str], alphabet: dict[str, int]) -> bytes:
    if token is None:  # an id the tokenizer does not know decodes to nothing
        return b""
    if all(c in alphabet for c in token):
        return bytes(alphabet[c] for c in token)
    return token.encode("utf-8")


class ByteDecoder:
    """Per token id, its decoded bytes (`data[offsets[i]:offsets[i + 1]]`); id `size` and above: none."""

    def __init__(self, tokenizer, data: np.ndarray, offsets: np.ndarray):
        self.tok = tokenizer
        self.size = len(offsets) - 1
        # one more entry, empty, for every id outside the vocabulary
        offsets = np.append(offsets, offsets[-1]).astype(np.int64)
        self.table = pa.Array.from_buffers(pa.large_binary(), self.size + 1,
                                           [None, pa.py_buffer(offsets), pa.py_buffer(data)])

    @classmethod
    def of(cls, tokenizer) -> Optional["ByteDecoder"]:
        """The table of `tokenizer`, or None when its decoding is not a per-token byte concatenation."""
        decoder = json.loads(tokenizer.to_str()).get("decoder") or {}
        if decoder.get("type") != "ByteLevel":
            return None
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        alphabet = _char_bytes()
        table = [_token_bytes(tokenizer.id_to_token(i), alphabet) for i in range(size + 1)]
        # each token alone, all tokens in one sequence, and one id past the vocabulary, as the tokenizer decodes them
        seqs = [[i] for i in range(size + 1)] + [list(range(size + 1))]
        got = tokenizer.decode_batch(seqs, skip_special_tokens=False)
        want = [b.decode("utf-8", "replace") for b in table] + [b"".join(table).decode("utf-8", "replace")]
        if got != want:
            return None
        offsets = np.zeros(size + 1, np.int64)
        np.cumsum([len(b) for b in table[:size]], out=offsets[1:])
        return cls(tokenizer, np.frombuffer(b"".join(table[:size]), np.uint8), offsets)

    def texts(self, ids: np.ndarray, bounds: np.ndarray) -> pa.LargeStringArray:
        """Row i: the decoding of ids[bounds[i]:bounds[i + 1]] (`bounds` int64, non-decreasing)."""
        ids = np.asarray(ids)
        if ids.dtype.kind == "u":  # token shards: clamped in their own dtype, so no bounds to check
            ids = np.minimum(ids, min(self.size, np.iinfo(ids.dtype).max))
            got = pc.take(self.table, pa.array(ids), boundscheck=False)  # no GIL held
        else:
            ids = np.minimum(ids.astype(np.int64), self.size)
            got = self.table.take(pa.array(ids))
        _, off_buf, data_buf = got.buffers()
        tok_off = np.frombuffer(off_buf, np.int64, got.offset + len(ids) + 1)[got.offset:]
        data = np.frombuffer(data_buf, np.uint8, int(tok_off[-1])) if tok_off[-1] else np.zeros(0, np.uint8)
        offsets = tok_off[bounds]
        out = pa.LargeStringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets), pa.py_buffer(data))
        try:
            out.validate(full=True)  # every row valid UTF-8 (Arrow's check, one pass): the usual case
            return out
        except pa.ArrowInvalid:
            pass
        bad = _invalid_rows(data, offsets)
        if len(bad):
            data, offsets = self._redecode(data, offsets, ids, bounds, bad)
        return pa.LargeStringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets), pa.py_buffer(data))

    def _redecode(self, data, offsets, ids, bounds, bad):
        """Rows `bad` replaced by the tokenizer's own decoding (invalid bytes become U+FFFD there)."""
        fixed = self.tok.decode_batch([ids[bounds[r]:bounds[r + 1]].tolist() for r in bad], skip_special_tokens=False)
        parts, lens, at = [], np.diff(offsets), 0
        for r, text in zip(bad.tolist(), fixed):
            b = np.frombuffer(text.encode("utf-8"), np.uint8)
            parts += [data[offsets[at]:offsets[r]], b]
            lens[r] = len(b)
            at = r + 1
        parts.append(data[offsets[at]:])
        out = np.zeros(len(offsets), np.int64)
        np.cumsum(lens, out=out[1:])
        return np.concatenate(parts), out


def _invalid_rows(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Rows whose bytes are not valid UTF-8 on their own (only rows with a byte >= 0x80 are checked)."""
    high = np.flatnonzero(data >= 0x80)
    if not len(high):
        return np.zeros(0, np.int64)
    rows = np.unique(np.searchsorted(offsets, high, side="right") - 1)
    mv = memoryview(data)
    bad = []
    for r in rows.tolist():
        try:
            codecs.utf_8_decode(mv[offsets[r]:offsets[r + 1]], "strict", True)
        except UnicodeDecodeError:
            bad.append(r)
    return np.array(bad, np.int64)
