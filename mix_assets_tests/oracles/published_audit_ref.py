"""The published audit's scanner as it was before the byte-table decoding (commit 322cffc), kept as the
reference the new `stages/audit/published.SplitScanner` is pinned against (its tallies must be equal).

Decodes every (carry + piece) with `Tokenizer.decode_batch` from Python lists; otherwise the same
piece, carry and window rules. Do not optimise this file: its job is to stay the old code.
"""

from __future__ import annotations

import contextlib

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.stages.audit import contamination as ct
from mix_assets.core import textkeys as tk
from mix_assets.stages.audit.published import PublishedAuditError, SplitTally


class _Tail:
    """The last <= cap tokens of the open document, as a list of arrays (no per-sample copying)."""

    def __init__(self, cap: int):
        self.cap = cap
        self.parts: list[np.ndarray] = []
        self.total = 0
        self.from_start = True  # the tail still begins at the document's first token

    def append(self, a: np.ndarray) -> None:
        if len(a):
            self.parts.append(a)
            self.total += len(a)
        while self.parts and self.total - len(self.parts[0]) >= self.cap:
            self.total -= len(self.parts.pop(0))
            self.from_start = False

    def suffix(self, k: int) -> np.ndarray:
        k = min(k, self.total)
        out, got = [], 0
        for p in reversed(self.parts):
            if got >= k:
                break
            out.append(p[-(k - got):] if len(p) > k - got else p)
            got += len(out[-1])
        return np.concatenate(out[::-1]) if out else np.zeros(0, np.int64)

    def snapshot(self) -> "_Tail":
        other = _Tail(self.cap)
        other.parts, other.total, other.from_start = list(self.parts), self.total, self.from_start
        return other

    def whole_from_start(self, k: int) -> bool:
        return self.from_start and k >= self.total


@dataclass
class _Piece:
    sample: int  # the sample the piece's windows are attributed to
    new: np.ndarray  # tokens of this sample's part of the document
    tail: Optional[_Tail]  # the document before this sample (None: the piece starts a document)
    continues: bool  # the document goes on in the next sample


class SplitScanner:
    """Feeds a split's samples in storage order; decodes and scans them chunk by chunk."""

    def __init__(self, split: str, tokenizer, registry: ct.Registry, separator_id: Optional[int],
                 total_samples: int, max_carry_tokens: int = 1 << 16):
        self.tok = tokenizer
        self.reg = registry
        self.sep = separator_id
        self.total = total_samples
        self.n = registry.n
        self.tail = _Tail(max_carry_tokens)
        self.open = False  # a document is open at the end of the previous sample
        self.tally = SplitTally(split=split, tasks=list(registry.tasks))

    def resume_at(self, first: int, read) -> None:
        """The state a scan from sample 0 has before sample `first`, from the samples just before it.

        `read(k)` gives sample k. A document is open unless sample first - 1 ends with the separator;
        its tail is the parts it appended (its start in the sample where it began, then whole samples),
        read back until its start or until one more part than the tail keeps (the tail's popping
        depends only on the part lengths, so the same parts give the same `total` and `from_start`)."""
        if first == 0:
            return
        prev = read(first - 1)
        self.open = self.sep is None or prev[-1] != self.sep
        if not self.open:
            return
        parts, kept, k = [], 0, first - 1
        while True:
            x = prev if k == first - 1 else read(k)
            cuts = np.flatnonzero(x == self.sep) if self.sep is not None else np.zeros(0, np.int64)
            part = x[cuts[-1] + 1:] if len(cuts) else x
            if len(part):
                parts.append(part)
            if len(cuts) or k == 0 or kept >= self.tail.cap:
                break  # the document starts here, or the earliest part read is one the tail drops
            kept += len(part)
            k -= 1
        for part in reversed(parts):
            self.tail.append(part)

    def feed(self, first: int, samples: np.ndarray) -> None:
        """Samples [first, first + len(samples)) of the split, in storage order."""
        pieces: list[_Piece] = []
        t = self.tally
        samples = np.asarray(samples)
        # every sample's separator offsets at once (as int lists): no numpy call per sample
        rows, cols = np.nonzero(samples == self.sep) if self.sep is not None else (np.zeros(0, np.int64),) * 2
        at, cols = np.searchsorted(rows, np.arange(len(samples) + 1)).tolist(), cols.tolist()
        for j, x in enumerate(samples):
            g = first + j
            last_sample = g == self.total - 1
            cuts = cols[at[j]:at[j + 1]]
            t.separators += len(cuts)
            bounds = list(zip([0, *(c + 1 for c in cuts)], [*cuts, len(x)]))
            was_open, self.open = self.open, False
            for k, (a, b) in enumerate(bounds):
                new = x[a:b]
                continued = k == 0 and was_open
                if not continued and len(new) == 0:
                    continue
                continues = k == len(bounds) - 1 and not last_sample  # only the trailing part goes on
                tail = self.tail.snapshot() if continued else None
                # A piece with no new tokens (the sample opens with the separator) finishes the
                # previous sample's document: its windows end there.
                pieces.append(_Piece(sample=g if len(new) else g - 1, new=new, tail=tail, continues=continues))
                if continues:
                    if not continued:
                        self.tail = _Tail(self.tail.cap)
                    self.tail.append(new)
                    self.open = True
                if not continued:
                    t.documents += 1
            t.samples_scanned += 1
            t.tokens_scanned += len(x)
        self._scan(pieces)

    # -- decoding and scanning -------------------------------------------------------------------

    def _decode(self, seqs: list[np.ndarray]) -> list[str]:
        return self.tok.decode_batch([s.tolist() for s in seqs], skip_special_tokens=False)

    def _carries(self, pieces: list[_Piece]) -> tuple[list[np.ndarray], np.ndarray]:
        """Per piece: carry tokens and the carry's word count (0 for a piece starting a document)."""
        carries = [np.zeros(0, np.int64)] * len(pieces)
        words = np.zeros(len(pieces), np.int64)
        want = self.n + 1
        k = {i: 4 * want for i, p in enumerate(pieces) if p.tail is not None and p.tail.total}
        while k:
            idx = list(k)
            for i in idx:
                carries[i] = pieces[i].tail.suffix(k[i])
            wl = tk.words(pa.array(self._decode([carries[i] for i in idx]), pa.large_string()))
            # an empty carry has no word list (null): 0 words
            counts = pc.list_value_length(wl).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            nxt = {}
            for i, c in zip(idx, counts):
                words[i] = c
                tail = pieces[i].tail
                if c >= want or tail.whole_from_start(k[i]):
                    continue
                if k[i] >= tail.total:
                    self.tally.short_carries += 1
                    continue
                nxt[i] = k[i] * 4
            k = nxt
        return carries, words

    def _scan(self, pieces: list[_Piece]) -> None:
        if not pieces:
            return
        t = self.tally
        carries, cwords = self._carries(pieces)
        texts = self._decode([np.concatenate([c, p.new]) if len(c) else p.new for c, p in zip(carries, pieces)])
        arr = pa.array(texts, pa.large_string())
        t.text_bytes += int(pc.sum(pc.binary_length(arr)).as_py() or 0)
        h, off = tk.word_hashes(tk.words(arr))
        del arr
        del texts
        m = len(pieces)
        starts = off[:-1]
        nwords = np.diff(off)
        cont = np.fromiter((p.continues for p in pieces), bool, m)
        has_carry = np.fromiter((len(c) > 0 for c in carries), bool, m)
        end = np.maximum(nwords - cont, 0)  # a piece going on next sample leaves its last word out
        pre = np.where(has_carry, np.minimum(np.maximum(cwords - 1, 0), end), 0)  # counted before
        lens = np.concatenate([end, pre])
        begin = np.concatenate([starts, starts])
        idx = np.repeat(begin - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(lens.sum())
        counts = self.reg.scan_word_hashes(h[idx], np.concatenate([[0], np.cumsum(lens)]).astype(np.int64))
        net = counts[:m] - counts[m:]
        if (net < 0).any():  # windows of a prefix are windows of the whole: cannot happen
            raise PublishedAuditError(f"split {t.split}: negative window count after carry subtraction")
        t.pieces += m
        t.continued_pieces += int(has_carry.sum())
        t.words_scanned += int((end - pre).sum())
        for i in np.flatnonzero(net.any(axis=1)):
            s = pieces[i].sample
            t.hits[s] = t.hits.get(s, np.zeros(len(t.tasks), np.int64)) + net[i]


@contextlib.contextmanager
def patched():
    """`stages/audit/published.py` scanning with this reference scanner (the audit as it ran before)."""
    from mix_assets.stages.audit import published

    new = published.SplitScanner
    published.SplitScanner = lambda *a, decoder=None, **k: SplitScanner(*a, **k)
    try:
        yield
    finally:
        published.SplitScanner = new
