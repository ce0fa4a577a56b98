"""fastText's supervised `predict` as one compiled (numba) pass per chunk over the Arrow text buffers: the same
float, bit for bit, that fastText 0.9.2's C++ `predictLine` returns (and datatrove's FastTextClassifierFilter
records), without a Python call, a std::string or a stringstream per document.

What it reproduces (fastText 0.9.2 src/, the code fasttext-predict and fasttext-numpy2-wheel compile):
- the text handed over is datatrove's `text.strip().replace("\\n", r)` (Python's whitespace set for strip),
  optionally cut to its first `max_chars` code points first, then `"\\n"` appended;
- `Dictionary::readWord` / `getLine`: tokens split on ASCII space, \\n \\r \\t \\v \\f and NUL, the first
  newline read as the token `</s>` which ends the line (a literal `</s>` in the text ends it too); in-vocabulary
  words by their id, every word token's 32-bit FNV-1a hash (bytes sign-extended) kept for the word n-grams
  (`h = h * 116049371 + next`, as uint64 over the sign-extended int32 hashes, bucket `h % bucket`);
- `Model::computeHidden`: float32 rows summed in that order, times float32(1.0 / n);
- `SoftmaxLoss::computeOutput`: float32 dot products in column order, the max, `exp` in double of the float
  difference stored as float, the float sum and division; `std_log` (log in double of p + 1e-5, to float) and
  `predictLine`'s float `std::exp` of it.

Only what the graph trains and what DCLM-style classifiers are: supervised, softmax loss, no character
n-grams (maxn 0), not quantized; `supported()` says so, and scoring.score falls back to the C++ predict for
any other model. mix_assets_tests/stages/quality/test_predict.py pins the floats to the C++ predict.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Optional

import numba
import numpy as np

MAGIC, VERSIONS = 793712314, (11, 12)
LOSS_SOFTMAX, MODEL_SUP = 3, 3
EOS = b"</s>"
LABEL_PREFIX = b"__label__"
_JIT = dict(nogil=True, cache=True)


@dataclass(frozen=True)
class Model:
    """A fastText .bin as arrays (the input matrix memory-mapped, not read)."""

    dim: int
    word_ngrams: int
    bucket: int
    loss: int
    model: int
    maxn: int
    nwords: int
    labels: tuple[str, ...]
    pruneidx_size: int
    quantized: bool
    # the vocabulary: every entry's bytes (concatenated, offsets), its FNV-1a hash, type (0 word, 1 label),
    # and an open-addressed table of ids by hash (power-of-two size, -1 empty)
    word_offsets: Optional[np.ndarray] = None
    word_bytes: Optional[np.ndarray] = None
    word_hash: Optional[np.ndarray] = None
    word_type: Optional[np.ndarray] = None
    table: Optional[np.ndarray] = None
    input: Optional[np.ndarray] = None
    output: Optional[np.ndarray] = None

    def supported(self) -> bool:
        return (self.model == MODEL_SUP and self.loss == LOSS_SOFTMAX and self.maxn <= 0 and not self.quantized
                and self.pruneidx_size < 0 and self.input is not None)


def _fnv(word: bytes) -> int:
    h = 2166136261
    for c in word:
        h = ((h ^ ((c - 256) & 0xFFFFFFFF if c >= 128 else c)) * 16777619) & 0xFFFFFFFF
    return h


@numba.njit(**_JIT)
def _entries(buf, pos, size):
    """(start, end) of each entry's word, its type, and the position after the dictionary's entries."""
    starts = np.empty(size, np.int64)
    ends = np.empty(size, np.int64)
    types = np.empty(size, np.int8)
    for i in range(size):
        s = pos
        while buf[pos] != 0:
            pos += 1
        starts[i] = s
        ends[i] = pos
        pos += 1 + 8  # NUL, int64 count
        types[i] = np.int8(buf[pos])
        pos += 1
    return starts, ends, types, pos


@numba.njit(**_JIT)
def _fnv_all(o, b):
    out = np.empty(o.shape[0] - 1, np.uint32)
    for i in range(o.shape[0] - 1):
        out[i] = _fnv_at(b, o[i], o[i + 1])
    return out


@numba.njit(inline="always")
def _fnv_at(b, s, e):
    h = np.uint32(2166136261)
    for i in range(s, e):
        c = np.uint32(np.int32(np.int8(b[i])))  # uint32_t(int8_t(c)): bytes >= 0x80 sign-extended
        h = np.uint32((h ^ c) * np.uint32(16777619))
    return h


@numba.njit(inline="always")
def _same(b, s, e, wb, ws, we):
    if e - s != we - ws:
        return False
    for i in range(e - s):
        if b[s + i] != wb[ws + i]:
            return False
    return True


@numba.njit(**_JIT)
def _build_table(wo, wb, wh):
    n = wo.shape[0] - 1
    size = 1
    while size < 2 * n + 2:
        size <<= 1
    table = np.full(size, -1, np.int32)
    mask = size - 1
    for i in range(n):
        slot = np.int64(wh[i]) & mask
        while table[slot] != -1:
            j = table[slot]
            if wh[j] == wh[i] and _same(wb, wo[i], wo[i + 1], wb, wo[j], wo[j + 1]):
                break  # a repeated entry: fastText's load keeps the last one's id
            slot = (slot + 1) & mask
        table[slot] = i
    return table


def load(path: str) -> Model:
    """The model at `path` (a fastText .bin); the matrices are memory-mapped (processes of a node share the
    pages) and read in once here, as fastText's own load reads them, so no scoring pass waits on the disk."""
    buf = np.memmap(path, np.uint8, mode="r")
    if len(buf):
        int(buf[::4096].sum())  # one byte per page: the file is in memory before any document is scored
    raw = bytes(buf[:8 + 13 * 4 + 8 + 4 * 3 + 16])
    magic, version = struct.unpack_from("<ii", raw, 0)
    if magic != MAGIC or version not in VERSIONS:
        raise ValueError(f"{path}: not a fastText model file (magic {magic}, version {version})")
    dim, _ws, _epoch, _mc, _neg, word_ngrams, loss, model, bucket, _minn, maxn, _lr = struct.unpack_from("<12i", raw, 8)
    if version == 11 and model == MODEL_SUP:
        maxn = 0  # fastText's own backward compatibility rule
    pos = 8 + 12 * 4 + 8
    size, nwords, nlabels, _ntokens, prune = struct.unpack_from("<iiiqq", raw, pos)
    pos += 4 * 3 + 16
    starts, ends, types, pos = _entries(buf, pos, size)
    pos += 8 * max(prune, 0)
    words = [bytes(buf[s:e]) for s, e in zip(starts[nwords:], ends[nwords:])]
    labels = tuple(w.decode("utf-8", "replace") for w in words)
    quantized = bool(buf[pos])
    pos += 1
    common = dict(dim=dim, word_ngrams=word_ngrams, bucket=bucket, loss=loss, model=model, maxn=maxn, nwords=nwords,
                  labels=labels, pruneidx_size=prune, quantized=quantized)
    if quantized:
        return Model(**common)
    m, n = struct.unpack_from("<qq", bytes(buf[pos:pos + 16]))
    pos += 16
    inp = np.ndarray((m, n), np.float32, buffer=buf, offset=pos)
    pos += 4 * m * n
    qout = bool(buf[pos])
    pos += 1
    if qout:
        return Model(**common)
    m2, n2 = struct.unpack_from("<qq", bytes(buf[pos:pos + 16]))
    pos += 16
    out = np.ndarray((m2, n2), np.float32, buffer=buf, offset=pos)
    if n != dim or n2 != dim or m2 != nlabels or m != nwords + bucket:
        raise ValueError(f"{path}: matrices {m}x{n} / {m2}x{n2} do not match dim {dim}, {nwords} words, "
                         f"{nlabels} labels, bucket {bucket}")
    lens = (ends - starts).astype(np.int64)
    wo = np.zeros(size + 1, np.int64)
    np.cumsum(lens, out=wo[1:])
    idx = np.repeat(starts - wo[:-1], lens) + np.arange(int(wo[-1]), dtype=np.int64)
    wb = np.asarray(buf)[idx] if len(idx) else np.zeros(0, np.uint8)
    wh = _fnv_all(wo, wb)
    return Model(**common, word_offsets=wo, word_bytes=wb, word_hash=wh, word_type=types.copy(),
                 table=_build_table(wo, wb, wh), input=inp, output=out)


@functools.lru_cache(maxsize=4)
def loaded(path: str, sha256: str) -> Model:
    """`load`, once per process per model file (keyed by its sha256, checked by the caller)."""
    return load(path)


def score_array(m: Model, arr, label: int, newline: str, max_chars: Optional[int]) -> np.ndarray:
    """`score_texts` over a large_string Arrow array without nulls (its buffers, no copy)."""
    bufs = arr.buffers()
    o = np.frombuffer(bufs[1], np.int64, len(arr) + 1, arr.offset * 8)
    b = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(1, np.uint8)
    return score_texts(o, b, -1 if max_chars is None else int(max_chars), np.frombuffer(newline.encode(), np.uint8),
                       label, m.nwords, m.word_ngrams, m.bucket, m.word_offsets, m.word_bytes, m.word_hash,
                       m.word_type, m.table, m.input, m.output)


# -- the compiled pass ---------------------------------------------------------------------------------------
@numba.njit(inline="always")
def _py_space_at(b, p, end):
    """Byte length of the Python whitespace character (str.isspace) starting at b[p], 0 when none."""
    c = b[p]
    if c == 0x20 or (c >= 0x09 and c <= 0x0D) or (c >= 0x1C and c <= 0x1F):
        return 1
    if c == 0xC2 and p + 1 < end and (b[p + 1] == 0x85 or b[p + 1] == 0xA0):
        return 2
    if p + 2 < end:
        c1, c2 = b[p + 1], b[p + 2]
        if c == 0xE1 and c1 == 0x9A and c2 == 0x80:
            return 3
        if c == 0xE2 and c1 == 0x80 and (c2 <= 0x8A or c2 == 0xA8 or c2 == 0xA9 or c2 == 0xAF):
            return 3
        if c == 0xE2 and c1 == 0x81 and c2 == 0x9F:
            return 3
        if c == 0xE3 and c1 == 0x80 and c2 == 0x80:
            return 3
    return 0


@numba.njit(inline="always")
def _is_sep(c):
    return c == 0x20 or c == 0x0A or c == 0x0D or c == 0x09 or c == 0x0B or c == 0x0C or c == 0x00


@numba.njit(inline="always")
def _lookup(b, s, e, h, wo, wb, wh, table):
    mask = table.shape[0] - 1
    slot = np.int64(h) & mask
    while True:
        j = table[slot]
        if j == -1:
            return -1
        if wh[j] == h and _same(b, s, e, wb, wo[j], wo[j + 1]):
            return j
        slot = (slot + 1) & mask


@numba.njit(**_JIT)
def score_texts(o, b, max_chars, newline, label, nwords, word_ngrams, bucket, wo, wb, wh, wtype, table, inp, out):
    """The probability of label index `label` for every text (o: int64 offsets, b: UTF-8 bytes); 0.0 where
    fastText returns no prediction (no token in the model)."""
    n = o.shape[0] - 1
    dim = inp.shape[1]
    nlab = out.shape[0]
    res = np.zeros(n, np.float64)
    cap = 64
    for d in range(n):
        cap = max(cap, o[d + 1] - o[d])
    size = cap * max(newline.shape[0], 1) + 2
    scratch = np.empty(size, np.uint8)
    ids = np.empty(size, np.int32)  # tokens <= bytes
    hashes = np.empty(size, np.int32)
    grams = np.empty(size * max(word_ngrams - 1, 0) + 1, np.int32)
    hidden = np.empty(dim, np.float32)
    output = np.empty(nlab, np.float32)
    eos0, eos1, eos2, eos3 = np.uint8(0x3C), np.uint8(0x2F), np.uint8(0x73), np.uint8(0x3E)  # "</s>"
    eos_bytes = np.array([0x3C, 0x2F, 0x73, 0x3E], np.uint8)
    eos_hash = _fnv_at(eos_bytes, 0, 4)
    eos_id = _lookup(eos_bytes, 0, 4, eos_hash, wo, wb, wh, table)
    for d in range(n):
        s, e = o[d], o[d + 1]
        if max_chars >= 0:  # the first max_chars code points
            k = 0
            p = s
            while p < e:
                if (b[p] & 0xC0) != 0x80:
                    if k == max_chars:
                        break
                    k += 1
                p += 1
            e = p
        while s < e:  # str.strip()
            w = _py_space_at(b, s, e)
            if w == 0:
                break
            s += w
        while e > s:
            q = e - 1
            while q > s and (b[q] & 0xC0) == 0x80:
                q -= 1
            if _py_space_at(b, q, e) != e - q:
                break
            e = q
        L = 0  # .replace("\n", newline) + "\n"
        for p in range(s, e):
            if b[p] == 0x0A:
                for c in newline:
                    scratch[L] = c
                    L += 1
            else:
                scratch[L] = b[p]
                L += 1
        scratch[L] = 0x0A
        L += 1
        # Dictionary::getLine over readWord
        nid = 0
        nh = 0
        p = 0
        while p < L:
            while p < L and _is_sep(scratch[p]) and scratch[p] != 0x0A:
                p += 1
            if p >= L:
                break
            if scratch[p] == 0x0A:  # an empty word at a newline: the token </s>, the line's end
                ts, te, eos = 0, 0, True
                p += 1
            else:
                ts = p
                while p < L and not _is_sep(scratch[p]):
                    p += 1
                te = p
                eos = (te - ts == 4 and scratch[ts] == eos0 and scratch[ts + 1] == eos1
                       and scratch[ts + 2] == eos2 and scratch[ts + 3] == eos3)
            if eos:  # a newline's </s> or the literal token: the same word
                h = eos_hash
                wid = eos_id
                is_label = False
            else:
                h = _fnv_at(scratch, ts, te)
                wid = _lookup(scratch, ts, te, h, wo, wb, wh, table)
                is_label = te - ts >= 9 and scratch[ts] == 0x5F and scratch[ts + 1] == 0x5F and \
                    scratch[ts + 2] == 0x6C and scratch[ts + 3] == 0x61 and scratch[ts + 4] == 0x62 and \
                    scratch[ts + 5] == 0x65 and scratch[ts + 6] == 0x6C and scratch[ts + 7] == 0x5F and \
                    scratch[ts + 8] == 0x5F
            if wid >= 0:
                is_label = wtype[wid] == 1
            if not is_label:
                if wid >= 0:
                    ids[nid] = wid
                    nid += 1
                hashes[nh] = np.int32(h)
                nh += 1
            if eos:
                break
        ng = 0
        for i in range(nh if bucket > 0 else 0):
            hh = np.uint64(np.int64(hashes[i]))
            for j in range(i + 1, min(nh, i + word_ngrams)):
                hh = hh * np.uint64(116049371) + np.uint64(np.int64(hashes[j]))
                grams[ng] = np.int32(hh % np.uint64(bucket))
                ng += 1
        total = nid + ng
        if total == 0:
            continue
        hidden[:] = np.float32(0.0)
        for i in range(total):
            row = ids[i] if i < nid else nwords + grams[i - nid]
            for j in range(dim):
                hidden[j] += inp[row, j]
        a = np.float32(1.0 / total)
        for j in range(dim):
            hidden[j] *= a
        for i in range(nlab):
            acc = np.float32(0.0)
            for j in range(dim):
                acc += out[i, j] * hidden[j]
            output[i] = acc
        mx = output[0]
        for i in range(nlab):
            if mx < output[i]:
                mx = output[i]
        z = np.float32(0.0)
        for i in range(nlab):
            output[i] = np.float32(np.exp(np.float64(np.float32(output[i] - mx))))
            z += output[i]
        for i in range(nlab):
            output[i] /= z
        lp = np.float32(np.log(np.float64(output[label]) + 1e-5))
        res[d] = np.float64(np.exp(lp))
    return res
