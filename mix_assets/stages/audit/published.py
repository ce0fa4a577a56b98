"""The 13-gram audit of a PUBLISHED revision: its token shards decoded back to text, no Dagster.

    report = audit_published("build/published/latest", load_spec("configs/demo.yaml"))

Reads the revision through `mix_assets.reader.open_mix` (local, s3://, hf://), gets the revision's
own `tokenizer/tokenizer.json` through the same reader (size and sha256 checked against the
manifest), builds the eval registry from the NON-test splits of the config's tasks (`stages/audit/evals`,
which refuses test splits before any I/O) and counts overlaps with `contamination.Registry` — the
same normalisation, hashing and short-item rule as the in-graph audit. The graph's check
(`shards_audit_clean`) passes instead the registry eval_registry wrote (`stored_reference`) when that
is provably the one `load_reference` would build from the eval files now: the same report, without
parsing and hashing every eval item again.

Map/reduce: every shard is a map task (`audit_range`, on `core/engine.map_chunks`: in process or as
Ray tasks) that reads its samples in storage order, `chunk_tokens` at a time, so a task's memory is
one chunk plus the tail of the open document (at most `max_carry_tokens` tokens). A task starts in
the state a scan from the split's first sample would have there: it reads back the open document's
tail from the samples before its shard (`SplitScanner.resume_at`). The tallies are gathered in
shard order and summed, so the report is the same whatever the engine, worker count or shard cut.
In process, each map thread keeps one reader per split for all its tasks (`ThreadReaders`: one
manifest check per thread, not per shard; the reader is closed after each task, which unmaps its
shards); a Ray task opens its own.

Documents. With a separator token, the token stream is cut at every separator: a window never spans
two documents, as in the graph's audit. Without one (`packing.separator: null`) document boundaries
are not in the published bytes: consecutive documents are scanned as one text, so a window spanning
the seam between two documents is counted if it matches (a model trained on the bytes sees it too).

Sample boundaries. A document continues across samples (and chunks). Each (sample, document) piece
is decoded together with a carry: the last tokens of the same document before the sample (at least
n + 1 words of it, or the whole document so far). Windows are counted in the piece holding their
last word: piece counts = windows of (carry + piece) minus windows of the carry's words except its
last (which the piece's first token may complete); a piece continued in the next sample leaves out
its own last word, which may be cut mid-word. So every window of a document is counted exactly once
whatever the sample boundaries, provided the tokenizer's decoding is local (true of byte-level BPE,
Metaspace and WordPiece decoders); boundaries where the document tail held fewer than n + 1 words
within `max_carry_tokens` tokens are counted as `short_carries` (a window there may be missed).

Decoding. A byte-level BPE tokenizer (decoder `ByteLevel` alone, every token checked at load:
`stages/tokens/bytelevel.ByteDecoder.of`) decodes a chunk's (carry + piece) rows as one Arrow `take` over a
per-token byte table, straight into the Arrow strings `textkeys.words` reads; rows that are not valid
UTF-8 on their own (a character cut at a seam) and every other tokenizer go through
`Tokenizer.decode_batch`. Same strings either way (the old scanner is pinned in
mix_assets_tests/oracles/published_audit_ref.py); no Python list of ids or str per row, and no
tokenizers call holding the GIL while the other map thread waits.

Output: counts only. The report carries task, split and file names and integers; it is checked
before it is returned for any `audit.scrub_words` consecutive words of a reference item.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from mix_assets.stages.audit import contamination as ct
from mix_assets.stages.audit import eval_scan as audit_lib
from mix_assets.stages.audit import evals
from mix_assets.core import engine, imports, keys, layout, lineage, objects
from mix_assets.stages.tokens.bytelevel import ByteDecoder
from mix_assets.core import textkeys as tk
from mix_assets.core.progress import Progress
from mix_assets.format import docindex
from mix_assets.reader import open_mix

REPORT_FORMAT = "mix_assets.published_audit/1"
TOKENIZER_FILE = "tokenizer/tokenizer.json"
EXIT_OVERLAP = 1  # exit-code bits of `exit_code`
EXIT_DENOMINATOR = 4
SPLITS = ("train", "val")


class PublishedAuditError(RuntimeError):
    """The revision cannot be audited as asked (the message names the file or field, never text)."""


# -- the eval registry ---------------------------------------------------------------------------


@dataclass
class EvalReference:
    registry: ct.Registry
    denominators: dict[str, dict]  # task -> rows, items, n-grams, min_rows ... (counts only)
    scrub: np.ndarray  # hashed `scrub_words`-word runs of every item (for the report's self-check)
    key: Optional[str] = None  # what the registry is built from (its files' sha256 and the audit settings)


def load_reference(spec) -> EvalReference:
    """Registry and denominators of every task's audit splits (test splits refused by stages/audit/evals)."""
    per, denoms, scrub = {}, {}, []
    for ref in audit_lib.task_references(spec):
        per[ref.name], denoms[ref.name] = ref.ngrams, ref.denominators
        scrub.append(ref.scrub)
    reg = ct.Registry.build(per, n=spec.audit.ngram, short_min=spec.audit.short_item_min_words)
    return EvalReference(registry=reg, denominators=denoms, scrub=audit_lib.merged_scrub(scrub))


def stored_reference(storage, spec) -> Optional[EvalReference]:
    """`load_reference(spec)` read from what eval_registry wrote under `storage` (no eval file parsed or hashed
    into n-grams again), or None when that registry is not provably the one `load_reference` would build now:
    its lineage record must fingerprint the eval files the tasks read now (`evals.root_keys`), its files
    must hash as the record lists, and it must hold these tasks (dataset, fields, audit splits) with this
    n-gram, short-item and scrub setting. The caller checks the record's code_version (the in-graph audit:
    `lineage.verify_inputs` with the current code versions). Same registry (tasks in the config's order),
    denominators and scrub set as `load_reference`, so the same report. A registry file missing or unreadable:
    None too."""
    try:
        return _stored_reference(storage, spec)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _stored_reference(storage, spec) -> Optional[EvalReference]:
    a = spec.audit
    rec = lineage.read_record(storage, "eval_registry")
    if rec is None or not storage.exists(layout.EVAL_REGISTRY):
        return None
    if rec.get("input_keys") != evals.root_keys(a.tasks, spec.base_dir):  # an eval file changed since
        return None
    meta = json.loads(storage.read_text(layout.EVAL_REGISTRY))
    built_for = {n: (t.get("dataset"), t.get("fields"), t.get("audit_splits")) for n, t in meta["tasks"].items()}
    want = {t.name: (audit_lib.dataset_id(t.dataset), list(t.fields), list(t.audit_splits)) for t in a.tasks}
    if ((meta.get("ngram"), meta.get("short_item_min_words"), meta.get("scrub_words"))
            != (a.ngram, a.short_item_min_words, a.scrub_words) or built_for != want):
        return None
    loc = audit_lib.RegistryLocation.of(storage)  # every file the registry is loaded from, hashed
    files = {**dict(loc.files), layout.EVAL_SCRUB_NGRAMS: storage.sha256(layout.EVAL_SCRUB_NGRAMS)}
    if any(rec["outputs"].get(k) != sha for k, sha in files.items()):
        return None
    names = [t.name for t in a.tasks]
    key = keys.artifact_key("eval_reference", None, {"files": json.dumps(sorted(files.items())), "tasks": json.dumps(names),
                                                     "settings": json.dumps([a.ngram, a.short_item_min_words, a.scrub_words])})
    return EvalReference(registry=audit_lib.registry_at(loc).in_order(names),
                         denominators={n: audit_lib.entry_denominators(meta["tasks"][n]) for n in names},
                         scrub=audit_lib.load_npy(storage, layout.EVAL_SCRUB_NGRAMS), key=key)


def denominator_problems(denominators: dict[str, dict]) -> list[str]:
    """Why the denominators make a zero meaningless (task names and counts only)."""
    if not denominators:
        return ["the eval registry has no tasks: an audit against nothing proves nothing"]
    out = []
    for task, d in denominators.items():
        if d["rows"] < d["min_rows"]:
            out.append(f"task {task}: {d['rows']} rows read, below min_rows {d['min_rows']}")
        if d["ngrams"] == 0:
            out.append(f"task {task}: 0 reference n-grams")
    return out


# -- streaming one split -------------------------------------------------------------------------


_FAR = -(1 << 50)  # a document start so far back that the tail no longer reaches it


def _tails(at: np.ndarray, start: np.ndarray, sample_len: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of a document's tail before positions `at` (split positions, sample starts), for a document
    starting at `start`, and whether that tail still begins at the document's first token.

    The tail is the document's per-sample parts (its first, then whole samples), the oldest dropped
    while the others still hold `cap` tokens: at least `cap` tokens, whole parts (as the old `_Tail`,
    pinned in mix_assets_tests/oracles/published_audit_ref.py)."""
    whole = (at - (start // sample_len + 1) * sample_len) // sample_len  # whole samples after the first part
    dropped = whole * sample_len >= cap
    kept = -(-cap // sample_len) * sample_len  # once parts are dropped: the fewest whole samples holding cap
    return np.where(dropped, kept, at - start), ~dropped


def _gather(buf: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """buf[lo[i]:hi[i]] for every i, concatenated, and the row bounds (int64)."""
    bounds = np.zeros(len(lo) + 1, np.int64)
    np.cumsum(hi - lo, out=bounds[1:])
    # one slice per row (a few thousand a chunk): ~7x faster than a repeat/arange index over every token
    return np.concatenate([buf[a:b] for a, b in zip(lo.tolist(), hi.tolist())] or [buf[:0]]), bounds


@dataclass
class SplitTally:
    """Counts of one split (no text)."""

    split: str
    tasks: list[str]
    samples_scanned: int = 0
    tokens_scanned: int = 0
    separators: int = 0
    documents: int = 0  # pieces that start a document (with no separator: 1, the whole stream)
    pieces: int = 0  # (sample, document) pieces decoded
    continued_pieces: int = 0  # pieces decoded with a carry from the previous sample
    short_carries: int = 0  # carries with fewer than n + 1 words within max_carry_tokens
    words_scanned: int = 0
    text_bytes: int = 0  # UTF-8 bytes decoded, carries included (progress lines only, not in the report)
    hits: dict[int, np.ndarray] = field(default_factory=dict)  # sample -> overlap n-grams per task
    # documents wholly inside one chunk, `doc_digests` rows (not in the report): no window of theirs matched
    # (clean) or one did (dirty); pieces whose windows were not hashed because their document was known clean
    clean: list = field(default_factory=list)
    dirty: list = field(default_factory=list)
    known_pieces: int = 0

    def merge(self, other: "SplitTally") -> None:
        """Add the counts of a later range of the same split (a sample's hits may come from both)."""
        for f in ("samples_scanned", "tokens_scanned", "separators", "documents", "pieces", "continued_pieces",
                  "short_carries", "words_scanned", "text_bytes"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        for sample, v in other.hits.items():
            self.hits[sample] = self.hits[sample] + v if sample in self.hits else v
        self.clean += other.clean
        self.dirty += other.dirty
        self.known_pieces += other.known_pieces

    def to_json(self, separator: bool, denominators: dict[str, dict]) -> dict:
        per = np.zeros(len(self.tasks), np.int64)
        with_overlap = np.zeros(len(self.tasks), np.int64)
        for v in self.hits.values():
            per += v
            with_overlap += v > 0
        return {
            "samples_scanned": self.samples_scanned,
            "tokens_scanned": self.tokens_scanned,
            "words_scanned": self.words_scanned,
            "documents": self.documents if separator else None,
            "pieces": self.pieces,
            "continued_pieces": self.continued_pieces,
            "short_carries": self.short_carries,
            "samples_with_overlap": len(self.hits),
            "overlap_ngrams": int(per.sum()),
            "tasks": {
                t: {
                    "samples_scanned": self.samples_scanned,
                    "samples_with_overlap": int(with_overlap[i]),
                    "overlap_ngrams": int(per[i]),
                    "eval_rows": denominators[t]["rows"],
                    "eval_items": denominators[t]["items"],
                    "eval_ngrams": denominators[t]["ngrams"],
                    "min_rows": denominators[t]["min_rows"],
                }
                for i, t in enumerate(self.tasks)
            },
        }


class SplitScanner:
    """Feeds a split's samples in storage order; decodes and scans them chunk by chunk.

    A chunk is cut into pieces (one per sample and document) with numpy: no Python per sample. State
    between chunks: whether a document is open, where it started, and its tail (`_tails`)."""

    def __init__(self, split: str, tokenizer, registry: ct.Registry, separator_id: Optional[int],
                 total_samples: int, max_carry_tokens: int = 1 << 16, decoder: Optional[ByteDecoder] = None,
                 known: Optional[np.ndarray] = None):
        self.known = known  # `doc_digests` rows of documents no window of which matched (`KnownClean`), None: off
        self.tok = tokenizer
        self.dec = decoder  # the tokenizer's byte table (`ByteDecoder.of`), None: decode with the tokenizer
        self.reg = registry
        self.sep = separator_id
        self.total = total_samples
        self.n = registry.n
        self.cap = max_carry_tokens
        self.open = False  # a document is open at the end of the previous sample
        self.doc_start = 0  # split position of the open document's first token (`_FAR`: beyond its tail)
        self.tail = np.zeros(0, np.int64)  # the open document's tail (`_tails` tokens)
        self.tally = SplitTally(split=split, tasks=list(registry.tasks))

    def resume_at(self, first: int, read) -> None:
        """The state a scan from sample 0 has before sample `first`, from the samples just before it.

        `read(k)` gives sample k. A document is open unless sample first - 1 ends with the separator;
        its tail is read back until the document's start or until one more part than the tail keeps."""
        if first == 0:
            return
        prev = read(first - 1)
        self.open = self.sep is None or prev[-1] != self.sep
        if not self.open:
            return
        parts, kept, k, found = [], 0, first - 1, False
        while True:
            x = prev if k == first - 1 else read(k)
            cuts = np.flatnonzero(x == self.sep) if self.sep is not None else np.zeros(0, np.int64)
            parts.append(x[cuts[-1] + 1:] if len(cuts) else x)
            found = bool(len(cuts)) or k == 0
            if found or kept >= self.cap:
                break  # the document starts here, or the earliest part read is one the tail drops
            kept += len(parts[-1])
            k -= 1
        tokens = np.concatenate(parts[::-1])
        at = first * len(prev)
        self.doc_start = at - len(tokens) if found else _FAR
        n, _ = _tails(np.array([at]), np.array([self.doc_start]), len(prev), self.cap)
        self.tail = tokens[len(tokens) - int(n[0]):]

    def feed(self, first: int, samples: np.ndarray) -> None:
        """Samples [first, first + len(samples)) of the split, in storage order."""
        t = self.tally
        samples = np.asarray(samples)
        count, slen = samples.shape
        flat = samples.reshape(-1)
        t.samples_scanned += count
        t.tokens_scanned += flat.size
        # pieces: from each sample start and each token after a separator (unless it starts the next
        # sample) to the next separator or sample end
        seps = np.flatnonzero(flat == self.sep) if self.sep is not None else np.zeros(0, np.int64)
        t.separators += len(seps)
        after = seps + 1
        begin = np.sort(np.concatenate([np.arange(0, flat.size, slen), after[after % slen != 0]]))
        sample_end = (begin // slen + 1) * slen
        end = np.minimum(np.append(seps, flat.size)[np.searchsorted(seps, begin)], sample_end)
        j = begin // slen
        open_at = np.ones(count, bool)  # a document is open at each sample's start
        open_at[0] = self.open
        if self.sep is not None:
            open_at[1:] = flat[slen - 1:-1:slen] != self.sep
        continued = (begin % slen == 0) & open_at[j]
        keep = continued | (end > begin)  # an empty piece only finishes the previous sample's document
        begin, end, sample_end, j, continued = begin[keep], end[keep], sample_end[keep], j[keep], continued[keep]
        g = first + j
        continues = (end == sample_end) & (g != self.total - 1)  # only a sample's trailing piece goes on
        t.documents += int((~continued).sum())
        # each piece's document start: its own, or that of the last piece starting one (or the open one)
        pos = first * slen + begin
        doc = np.where(continued, np.iinfo(np.int64).min, pos)
        doc = np.maximum.accumulate(np.concatenate([[self.doc_start], doc]))[1:]
        size, from_start = _tails(pos, doc, slen, self.cap)
        size = np.where(continued, size, 0)
        buf = np.concatenate([self.tail, flat]) if self.open and len(self.tail) else flat
        shift = len(buf) - flat.size  # buf index of flat[0]
        if len(begin):
            carry, cwords, short = self._carries(buf, begin + shift, size, from_start)
            doc_of, digests = self._whole_documents(flat, seps, begin, end) if self.known is not None else (None, None)
            self._scan(buf, begin + shift, end + shift, carry, cwords, continues, np.where(end > begin, g, g - 1),
                       short, doc_of, digests)
        self.open = (self.sep is None or flat[-1] != self.sep) and first + count != self.total
        if self.open:  # the last piece goes on: keep its document's tail
            self.doc_start = int(doc[-1])
            n, _ = _tails(np.array([first * slen + flat.size]), doc[-1:], slen, self.cap)
            self.tail = buf[len(buf) - int(n[0]):].copy()

    # -- decoding and scanning -------------------------------------------------------------------

    def _decode(self, ids: np.ndarray, bounds: np.ndarray) -> pa.LargeStringArray:
        """Row i: the decoding of ids[bounds[i]:bounds[i + 1]] (the tokenizer's own `decode_batch`, or the
        same strings from its byte table, without Python lists or strings)."""
        if self.dec is not None:
            return self.dec.texts(ids, bounds)
        seqs = [ids[a:b].tolist() for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]
        return pa.array(self.tok.decode_batch(seqs, skip_special_tokens=False), pa.large_string())

    def _carries(self, buf, at, size, from_start) -> tuple[np.ndarray, np.ndarray]:
        """Per piece (starting at buf index `at`, its document's tail `size` tokens): the carry's length
        in tokens and in words (0 for a piece starting a document)."""
        carry = np.zeros(len(at), np.int64)
        words = np.zeros(len(at), np.int64)
        short = np.zeros(len(at), bool)
        want = self.n + 1
        # 2 (n + 1) tokens hold n + 1 words almost always (about 1.2 tokens a word); a longer carry only
        # adds words before the windows counted (any carry of n + 1 words gives the same counts)
        todo = np.flatnonzero(size > 0)
        k = np.full(len(todo), 2 * want, np.int64)
        while len(todo):
            c = np.minimum(k, size[todo])
            wl = tk.words(self._decode(*_gather(buf, at[todo] - c, at[todo])))
            # an empty carry has no word list (null): 0 words
            got = pc.list_value_length(wl).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            carry[todo], words[todo] = c, got
            whole = k >= size[todo]  # the carry is the whole tail
            done = (got >= want) | (whole & from_start[todo])
            self.tally.short_carries += int((~done & whole).sum())
            short[todo[~done & whole]] = True
            more = ~done & ~whole
            todo, k = todo[more], k[more] * 4
        return carry, words, short

    def _whole_documents(self, flat, seps, begin, end) -> tuple[np.ndarray, np.ndarray]:
        """The documents wholly inside this chunk (after a separator, or at the chunk's start when no document is
        open there, up to their separator): each piece's document (a row of the digests, -1 for a piece of a
        document the chunk holds only part of) and each document's `doc_digests` row (its ids, separator left out)."""
        if not len(seps):
            return np.full(len(begin), -1, np.int64), np.zeros((0, 2), np.uint64)
        starts = np.concatenate([[-1 if self.open else 0], seps[:-1] + 1]).astype(np.int64)  # -1: not whole
        digests = doc_digests([flat[max(a, 0):b] for a, b in zip(starts.tolist(), seps.tolist())])
        j = np.searchsorted(np.maximum(starts, 0), begin, side="right") - 1
        jj = np.maximum(j, 0)
        whole = (j >= 0) & (starts[jj] >= 0) & (begin >= starts[jj]) & (end <= seps[jj])
        return np.where(whole, j, -1), digests

    def _scan(self, buf, at, end, carry, cwords, cont, sample, short=None, doc_of=None, digests=None) -> None:
        """Count the windows of pieces buf[at:end] (with their carries), attributed to `sample`.

        With `doc_of` (`_whole_documents`), a piece of a document this scanner knows clean (`known`) is decoded
        and split for its word count but its windows are not hashed or looked up: 0, as a scan would count them
        (the windows a piece counts are windows of its document's decoding, whatever the sample cut: the module
        docstring's premise), unless its carry is short. Each whole document is then filed clean or dirty."""
        t = self.tally
        m = len(at)
        arr = self._decode(*_gather(buf, at - carry, end))
        t.text_bytes += int(pc.sum(pc.binary_length(arr)).as_py() or 0)
        wl = tk.words(arr)
        del arr
        if isinstance(wl, pa.ChunkedArray):
            wl = wl.combine_chunks()
        nwords = np.diff(np.asarray(wl.offsets, np.int64))
        has_carry = carry > 0
        stop = np.maximum(nwords - cont, 0)  # a piece going on next sample leaves its last word out
        pre = np.where(has_carry, np.minimum(np.maximum(cwords - 1, 0), stop), 0)  # counted before
        known = np.zeros(m, bool)
        if doc_of is not None and len(self.known) and len(digests):
            known = (doc_of >= 0) & ~short & member_rows(self.known, digests)[np.maximum(doc_of, 0)]
        net = np.zeros((m, len(t.tasks)), np.int64)
        todo = np.flatnonzero(~known)
        if len(todo):
            h, off = tk.word_hashes(wl if len(todo) == m else wl.take(pa.array(todo)))
            starts, st, pr = off[:-1], stop[todo], pre[todo]
            # rows in place (no copy of the hashes): each piece's counted words, then the word it leaves out
            rows = np.append(np.stack([starts, starts + st], axis=1).reshape(-1), off[-1])
            got = self.reg.scan_word_hashes(h, rows)[::2]
            carried = np.flatnonzero(pr > 0)  # the carries' windows, counted before: subtracted
            if len(carried):
                got[carried] -= self.reg.scan_word_hashes(*_gather(h, starts[carried], starts[carried] + pr[carried]))
            if (got < 0).any():  # windows of a prefix are windows of the whole: cannot happen
                raise PublishedAuditError(f"split {t.split}: negative window count after carry subtraction")
            net[todo] = got
        t.pieces += m
        t.continued_pieces += int(has_carry.sum())
        t.words_scanned += int((stop - pre).sum())
        for i in np.flatnonzero(net.any(axis=1)):
            s = int(sample[i])
            t.hits[s] = t.hits.get(s, np.zeros(len(t.tasks), np.int64)) + net[i]
        if doc_of is not None:
            t.known_pieces += int(known.sum())
            dirty = net.any(axis=1) | short
            whole = doc_of >= 0
            t.dirty.append(digests[np.unique(doc_of[whole & dirty])])
            t.clean.append(digests[np.unique(doc_of[whole & ~dirty])])


def doc_digests(docs: list[np.ndarray]) -> np.ndarray:
    """Each document's key for `KnownClean`: the xxh3-128 of its token ids' bytes (the revision's dtype), as a
    (high 64 bits, low 64 bits) uint64 row: no Python object kept per document."""
    out = np.zeros((len(docs), 2), np.uint64)
    for i, ids in enumerate(docs):
        d = xxhash.xxh3_128_intdigest(np.ascontiguousarray(ids).tobytes())
        out[i] = (d >> 64, d & 0xFFFFFFFFFFFFFFFF)
    return out


def unique_rows(rows: np.ndarray) -> np.ndarray:
    """The distinct (hi, lo) rows of `rows`, sorted by hi then lo (what `member_rows` looks up in)."""
    rows = np.asarray(rows, np.uint64).reshape(-1, 2)
    rows = rows[np.lexsort((rows[:, 1], rows[:, 0]))]
    keep = np.ones(len(rows), bool)
    keep[1:] = (rows[1:] != rows[:-1]).any(axis=1)
    return np.ascontiguousarray(rows[keep])


def member_rows(keys: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Whether each row of `rows` is one of `keys` (`unique_rows` output)."""
    out = np.zeros(len(rows), bool)
    if not len(keys) or not len(rows):
        return out
    lo = np.searchsorted(keys[:, 0], rows[:, 0], side="left")
    hi = np.searchsorted(keys[:, 0], rows[:, 0], side="right")
    one = hi - lo == 1
    out[one] = keys[lo[one], 1] == rows[one, 1]
    for i in np.flatnonzero(hi - lo > 1).tolist():  # equal high halves: ~never
        out[i] = bool((keys[lo[i]:hi[i], 1] == rows[i, 1]).any())
    return out


# -- the audit -----------------------------------------------------------------------------------


def _load_tokenizer(path: str):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(path)
    except Exception as e:
        raise PublishedAuditError(f"{TOKENIZER_FILE}: cannot be loaded by tokenizers ({type(e).__name__})") from None


_TOKENIZER_LOCK = threading.Lock()
# sha256 of tokenizer.json -> (Tokenizer, its ByteDecoder or None): one per process (a Ray worker's too)
_TOKENIZERS: dict[str, tuple[Any, Optional[ByteDecoder]]] = {}


def _reader_decoding(reader) -> tuple[Any, Optional[ByteDecoder]]:
    """The revision's tokenizer and byte table, fetched, loaded and checked once per process."""
    sha = reader.manifest["tokenizer"]["files"].get(TOKENIZER_FILE)
    with _TOKENIZER_LOCK:
        if sha not in _TOKENIZERS:
            _TOKENIZERS.clear()
            tok = _load_tokenizer(reader.file_path(TOKENIZER_FILE))
            _TOKENIZERS[sha] = (tok, ByteDecoder.of(tok))
        return _TOKENIZERS[sha]


def _reader_tokenizer(reader):
    return _reader_decoding(reader)[0]


@dataclass(frozen=True)
class SampleRange:
    """Samples [start, stop) of one split, in storage order: one shard, the map chunk of the audit."""

    split: str
    start: int
    stop: int


def shard_ranges(reader) -> list[SampleRange]:
    """One range per non-empty shard of the reader's split."""
    out, first = [], 0
    for e in reader.manifest["splits"][reader.split]["shards"]:
        if e["samples"]:
            out.append(SampleRange(reader.split, first, first + e["samples"]))
        first += e["samples"]
    return out


class ThreadReaders:
    """One open reader per (thread, split) for the map tasks of one scan in this process: a task opens
    (and checks the manifest of) no reader of its own, and shards a thread verified stay verified.
    `MixReader.close` after each task releases its shard maps (reads re-open them), so memory stays
    one task's; `close_all` closes every reader at the end of the scan."""

    def __init__(self, location: Any, cache_dir: Optional[str], open_kwargs: dict):
        self.args = (location, cache_dir, open_kwargs)
        self.readers: dict[tuple[int, str], Any] = {}
        self.lock = threading.Lock()

    def get(self, split: str):
        key = (threading.get_ident(), split)
        with self.lock:
            r = self.readers.get(key)
        if r is None:
            r = _open_split(*self.args, split)
            with self.lock:
                self.readers[key] = r
        return r

    def close_all(self) -> None:
        with self.lock:
            readers, self.readers = list(self.readers.values()), {}
        for r in readers:
            r.close()


def _open_split(location: Any, cache_dir: Optional[str], open_kwargs: dict, split: str):
    return open_mix(location, cache_dir, split=split, shuffle=False, epochs=1, **open_kwargs)


def audit_range(rng: SampleRange, *, location: Any, cache_dir: Optional[str], open_kwargs: dict,
                registry: ct.Registry, separator_id: Optional[int], chunk_tokens: int,
                max_carry_tokens: int, readers: Optional[ThreadReaders] = None,
                known: Optional[np.ndarray] = None) -> SplitTally:
    """The map work: scan one range of a split as a scan from the split's first sample would (pure).

    The scanner starts in the state it has at `rng.start` (`SplitScanner.resume_at` reads back the
    open document's tail), so the range's counts do not depend on where the ranges are cut. `readers`
    (in-process engines): this thread's reader, else one opened for the task. `known`: `KnownClean.known`."""
    r = readers.get(rng.split) if readers is not None else _open_split(location, cache_dir, open_kwargs, rng.split)
    with r:  # closing releases the shards this task mapped; a thread's reader stays usable
        step = max(1, chunk_tokens // r.sample_len)
        head = r.samples(rng.start, min(step, rng.stop - rng.start))  # the first chunk (a whole shard, mostly)
        if r.has_doc_index:
            check_doc_index(r, rng, separator_id, head)
        tok, dec = _reader_decoding(r)
        memo = {"known": known} if known is not None and separator_id is not None else {}
        scanner = SplitScanner(rng.split, tok, registry, separator_id, len(r), max_carry_tokens, decoder=dec, **memo)
        scanner.resume_at(rng.start, r.sample)
        for first in range(rng.start, rng.stop, step):
            scanner.feed(first, head if first == rng.start else r.samples(first, min(step, rng.stop - first)))
        return scanner.tally


def check_doc_index(r, rng: SampleRange, separator_id: Optional[int], head: Optional[np.ndarray] = None) -> None:
    """The document index of the range's shard, fetched and verified by the reader (size, sha256, shape;
    ShardCorruptError names the file); with a separator, each start follows one, but for at most one
    budget-cut appearance per source in train (format/docindex.py). `head`: the range's first samples, used
    when they are the whole shard (not read twice)."""
    entries = r.manifest["splits"][rng.split]["shards"]
    firsts = np.cumsum([0] + [e["samples"] for e in entries])
    si = bisect_right(firsts.tolist(), rng.start) - 1
    starts = r.shard_doc_index(si)
    if separator_id is None:
        return
    whole = head is not None and int(firsts[si]) == rng.start and len(head) == entries[si]["samples"]
    tokens = (head if whole else r.samples(int(firsts[si]), entries[si]["samples"])).reshape(-1)
    prev = int(r.sample(int(firsts[si]) - 1)[-1]) if si else None
    bad = docindex.unexplained_starts(starts, tokens, separator_id, prev)
    allowed = len(r.manifest.get("sources") or {}) if rng.split == "train" else 0
    if len(bad) > allowed:
        raise PublishedAuditError(
            f"{entries[si]['doc_index']['path']}: document start at offset {int(bad[0])} does not follow the "
            f"separator (id {separator_id}); {len(bad)} such starts, at most {allowed} expected")


def scan_ranges(ranges: list[SampleRange], eng: engine.Engine, log=None, label: str = "published audit",
                **job) -> dict[str, SplitTally]:
    """`audit_range` over `ranges` on `eng`, gathered in range order into one tally per split."""
    # threads of this process share nothing but may each keep a reader; Ray tasks open their own
    readers = ThreadReaders(job["location"], job["cache_dir"], job["open_kwargs"]) if eng.kind == "local" else None
    fn = functools.partial(audit_range, readers=readers, **job)
    prog = Progress(log, label, total_docs=sum(r.stop - r.start for r in ranges), item="samples") if log else None
    out: dict[str, SplitTally] = {}
    try:
        for rng, got in zip(ranges, engine.map_chunks(fn, ranges, eng)):
            if rng.split in out:
                out[rng.split].merge(got)
            else:
                out[rng.split] = got
            if prog:
                prog.update(docs=got.samples_scanned, bytes=got.text_bytes, tokens=got.tokens_scanned)
    finally:
        if readers is not None:
            readers.close_all()
    if prog:
        prog.done(f"{sum(len(t.hits) for t in out.values()):,} samples with overlap")
    return out


def audit_published(
    location: Any,
    spec,
    cache_dir: Optional[str] = None,
    *,
    chunk_tokens: int = 1 << 20,
    max_carry_tokens: int = 1 << 16,
    reference: Optional[EvalReference] = None,
    eng: engine.Engine = engine.Engine(),
    log=None,
    label: str = "published audit",
    clean: Optional["KnownClean"] = None,
    **open_kwargs,
) -> dict:
    """The report (counts only) of the published revision at `location` against `spec`'s registry.

    Each shard is a map task on `eng` (`audit_range`; in process or Ray); `log` gets progress lines.
    The report does not depend on the engine, its worker count or the shard cut, nor on `clean`: with it, the
    pieces of documents it knows clean are not hashed and looked up, and `clean.found` is set to this
    revision's clean documents (with a separator; without one `clean` is not used)."""
    ref = reference or load_reference(spec)
    readers = {s: open_mix(location, cache_dir, split=s, shuffle=False, epochs=1, **open_kwargs) for s in SPLITS}
    manifest = readers["train"].manifest
    packing = manifest["packing"]
    tok = _reader_tokenizer(readers["train"])
    sep_id = packing.get("separator_id")
    if packing.get("separator") is not None:
        got = tok.token_to_id(packing["separator"])
        if got is None or got != sep_id:
            raise PublishedAuditError(
                f"manifest.json packing.separator {packing['separator']!r} has id {sep_id}, the revision's "
                f"{TOKENIZER_FILE} gives {got}"
            )
    ranges = [rng for r in readers.values() for rng in shard_ranges(r)]
    for r in readers.values():
        r.close()
    tallies = scan_ranges(ranges, eng, log, label, location=location, cache_dir=cache_dir,
                          open_kwargs=open_kwargs, registry=ref.registry, separator_id=sep_id,
                          chunk_tokens=chunk_tokens, max_carry_tokens=max_carry_tokens,
                          known=clean.known if clean is not None else None)
    if clean is not None and sep_id is not None:
        found = unique_rows(np.concatenate([r for t in tallies.values() for r in t.clean] or [np.zeros((0, 2), np.uint64)]))
        dirty = unique_rows(np.concatenate([r for t in tallies.values() for r in t.dirty] or [np.zeros((0, 2), np.uint64)]))
        clean.found = found[~member_rows(dirty, found)]
        clean.pieces = sum(t.known_pieces for t in tallies.values())
        clean.all_pieces = sum(t.pieces for t in tallies.values())
    splits = {s: tallies[s].to_json(sep_id is not None, ref.denominators) for s in SPLITS}
    problems = denominator_problems(ref.denominators)
    total = sum(v["overlap_ngrams"] for v in splits.values())
    report = {
        "format": REPORT_FORMAT,
        "location": str(location),
        "mix": manifest.get("name"),
        "fingerprint": manifest["fingerprint"],
        "tokenizer": {"file": TOKENIZER_FILE, "sha256": manifest["tokenizer"]["files"].get(TOKENIZER_FILE),
                      "vocab_size": manifest["tokenizer"]["vocab_size"]},
        "packing": {"separator_id": sep_id, "sample_len": packing["sample_len"],
                    "document_boundaries": "separator token" if sep_id is not None else
                    "none in the published bytes: windows spanning the seam of two documents are counted"},
        "ngram": spec.audit.ngram,
        "short_item_min_words": spec.audit.short_item_min_words,
        "denominators": ref.denominators,
        "splits": splits,
        "rows": [
            {"split": s, "task": t, **v}
            for s, sv in splits.items() for t, v in sv["tasks"].items()
        ],
        "overlap_total": total,
        "samples_with_overlap": sum(v["samples_with_overlap"] for v in splits.values()),
        "denominator_problems": problems,
        "passed": total == 0 and not problems,
    }
    leaks = ct.leaking_strings(list(ct.json_strings(report)), ref.scrub, spec.audit.scrub_words)
    if leaks:  # task names or a location that quote an item: refuse to hand the report out
        raise PublishedAuditError(f"the report would carry {len(leaks)} string(s) quoting a reference item; "
                                  "rename the task or location")
    return report


# -- documents known clean, kept between audits ------------------------------------------------------
KNOWN_CLEAN = "shards_audit_known_clean"  # keyed records (core/objects.py), one per audited revision
KNOWN_CODE = imports.source_version(__name__)[:16]  # this module and what it imports (scan, decode, words)


@dataclass
class KnownClean:
    """Documents (`doc_digests` rows: xxh3-128 of their token ids) none of whose windows matched the registry in
    an earlier audit with the same tokenizer, registry, dtype, separator and scan code (`known_clean_context`),
    as `unique_rows`; `found`: this audit's clean whole documents (filed for the next), `pieces`: pieces answered
    from `known`."""

    known: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.uint64))
    found: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.uint64))
    pieces: int = 0
    all_pieces: int = 0


def known_clean_context(manifest: dict, reference: EvalReference) -> Optional[str]:
    """The key every input of a document's clean result but its ids contributes to, or None (a registry of no
    known key, no separator: nothing is kept)."""
    sep = manifest["packing"].get("separator_id")
    if reference.key is None or sep is None:
        return None
    return keys.artifact_key(KNOWN_CLEAN, KNOWN_CODE, {
        "registry": reference.key, "tokenizer": str(manifest["tokenizer"]["files"].get(TOKENIZER_FILE)),
        "dtype": str(manifest["dtype"]), "separator_id": str(sep),
        "sample_len": str(manifest["packing"]["sample_len"])})


def load_known_clean(storage, context: str) -> KnownClean:
    """The clean documents the newest record of `context` names (its blob checked against its sha256 first: a
    changed or missing blob is not trusted), else none."""
    for rec in objects.keyed_records(storage, KNOWN_CLEAN):
        if (rec.get("input_keys") or {}).get("context") != context:
            continue
        (sha,) = rec["outputs"].values()
        if objects.blob_problem(storage, sha):
            continue
        rows = np.frombuffer(storage.store.read_bytes(objects.object_key(sha)), "<u8").reshape(-1, 2)
        return KnownClean(known=unique_rows(rows))
    return KnownClean()


def file_known_clean(storage, context: str, fingerprint: str, found: np.ndarray, work: str, run_id: str = "") -> None:
    """File `found` (this revision's clean documents, `doc_digests` rows) under `context` and the fingerprint."""
    data = unique_rows(found).astype("<u8").tobytes()
    try:
        storage.write_bytes(work, data)
        inputs = {"context": context, "fingerprint": fingerprint}
        objects.stash(storage, KNOWN_CLEAN, keys.artifact_key(KNOWN_CLEAN, KNOWN_CODE, inputs),
                      {work: hashlib.sha256(data).hexdigest()}, input_keys=inputs, code_version=KNOWN_CODE,
                      run_id=run_id, dagster=None)
    except OSError:  # a cache: the next audit scans every document
        pass
    finally:
        storage.delete(work)


def exit_code(report: dict) -> int:
    """0 clean; bit 1: overlap > 0; bit 4: a denominator below min_rows (or no n-grams, no tasks)."""
    return (EXIT_OVERLAP if report["overlap_total"] > 0 else 0) | (
        EXIT_DENOMINATOR if report["denominator_problems"] else 0)


def format_report(report: dict) -> str:
    """A plain-text table of the report (counts only)."""
    head = ("split", "task", "samples", "samples_w_overlap", "overlap_ngrams", "eval_rows", "min_rows",
            "eval_items", "eval_ngrams")
    rows = [head] + [
        (r["split"], r["task"], r["samples_scanned"], r["samples_with_overlap"], r["overlap_ngrams"],
         r["eval_rows"], r["min_rows"], r["eval_items"], r["eval_ngrams"]) for r in report["rows"]
    ]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    lines = [f"published audit of {report['location']} (fingerprint {report['fingerprint'][:16]}, "
             f"{report['ngram']}-grams; document boundaries: {report['packing']['document_boundaries']})"]
    lines += ["  ".join(str(v).rjust(w) if i >= 2 else str(v).ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
              for r in rows]
    for s, v in report["splits"].items():
        lines.append(f"{s}: {v['tokens_scanned']} tokens, {v['words_scanned']} words, documents "
                     f"{v['documents']}, {v['continued_pieces']} sample-boundary carries, "
                     f"{v['short_carries']} short carries")
    lines.append(f"overlap_total {report['overlap_total']}; samples with overlap {report['samples_with_overlap']}")
    for p in report["denominator_problems"]:
        lines.append(f"DENOMINATOR: {p}")
    lines.append("PASS" if report["passed"] else "FAIL")
    return "\n".join(lines)


def dumps(report: dict) -> str:
    return json.dumps(report, indent=1, sort_keys=True)
