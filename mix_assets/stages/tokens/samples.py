"""Read what the trainer reads: a seeded draw of samples from the written shards, decoded and marked.

`token_shards` shows ~30 samples exactly as the trainer will see them: each is read back from its shard
file (`sample_len` little-endian ids at row r, read by `format/shards.read_row`: the bytes
`reader.MixReader` serves for that storage index), decoded with the mix tokenizer (special tokens kept), the separator token shown as `⟦SEP⟧` so
document seams are visible. The draw is seeded by the spec seed and the build (the sha256 of
`tokens/shard_stats.json`, which holds every shard's sha256): the same build renders the same samples,
any change to the data renews them. Validation samples are drawn too (a fifth of the draw).

Every rendering passes the audit's 8-word scrub (`audit.scrub_words`): a run of that many words of an
eval item is replaced by `⟦scrubbed N words⟧`, and the finished markdown is checked with
`contamination.leaking_strings`, the function `audit_artifact_scrubbed` uses; a sample still leaking
after masking is withheld whole.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO, Optional

import numpy as np
import pyarrow as pa

from mix_assets.stages.audit import contamination as ct
from mix_assets.stages.audit.eval_scan import scrub_set
from mix_assets.core import layout, tables
from mix_assets.console.charts import code_span
from mix_assets.core import textkeys as tk
from mix_assets.format.shards import read_row

SEP = "⟦SEP⟧"
SPLITS = ("train", "val")
DEFAULT_SAMPLES = 30
VAL_PART = 5  # val gets 1/VAL_PART of the draw (at least one sample when it has any)
UI_CHARS = 200_000  # above this the UI copy elides each sample's middle; the file keeps everything
WRAP = 100  # the UI copy breaks longer lines (a code block does not wrap in the UI); the file keeps them whole
WRAP_MARK = "↩"  # ends a line the UI copy broke (not in the data)
UI_NOTE = f" Lines longer than {WRAP} characters are broken here, each broken line ending in `{WRAP_MARK}`."
_PIECE = re.compile(r"\S+")


@dataclass
class Sample:
    """One drawn sample: where it lives and what the trainer reads there."""

    split: str
    index: int  # storage index within the split (MixReader's k when reading unshuffled)
    shard: str  # path relative to the mix directory
    row: int  # sample row inside the shard
    ids: np.ndarray
    text: str  # the whole sample decoded (special tokens kept)
    segments: list[str]  # decoded text between separator tokens (one segment without a separator)
    segment_starts: list[int] = field(default_factory=lambda: [0])  # token offset of each segment
    docs: list["SampleDoc"] = field(default_factory=list)  # the documents in it (`sample_docs`), in order

    @property
    def separators(self) -> int:
        return len(self.segments) - 1

    def seams(self, separator_id: Optional[int]) -> list[int]:
        """Token offsets where a document starts strictly inside the sample (after a separator)."""
        if separator_id is None:
            return []
        at = np.flatnonzero(self.ids[:-1] == separator_id) + 1
        return at.tolist()


@dataclass(frozen=True)
class SampleDoc:
    """A document appearance inside a sample: where it starts (token offset in the sample, 0 when it began
    in an earlier sample: `continued`), its source and doc_id (layout.STREAM_DOCS)."""

    offset: int
    source: str
    doc_id: str
    continued: bool

    def label(self) -> str:
        return f"{self.source} · {self.doc_id}" + (" (continued)" if self.continued else "")


def sample_docs(stream: pa.Table, index: int, sample_len: int) -> list[SampleDoc]:
    """The documents of sample `index` of a split, from that split's stream table (start, tokens, source,
    doc_id in stream order: layout.STREAM_DOCS)."""
    starts = np.asarray(stream.column("start").to_numpy(zero_copy_only=False), np.int64)
    lo, hi = index * sample_len, (index + 1) * sample_len
    first = max(int(np.searchsorted(starts, lo, side="right")) - 1, 0)
    last = int(np.searchsorted(starts, hi, side="left"))
    rows = stream.slice(first, max(last - first, 0))
    out = []
    for st, n, src, d in zip(rows.column("start").to_pylist(), rows.column("tokens").to_pylist(),
                             rows.column("source").to_pylist(), rows.column("doc_id").to_pylist()):
        if st + n > lo:
            out.append(SampleDoc(max(st - lo, 0), src, d, st < lo))
    return out


def segment_docs(sample: Sample) -> list[Optional[SampleDoc]]:
    """Per segment, the document it starts in (None when unknown: no stream table, or past the sample)."""
    out = []
    for at in sample.segment_starts:
        mine = [d for d in sample.docs if d.offset <= at] if at < len(sample.ids) else []
        out.append(mine[-1] if mine else None)
    return out


# -- the draw -----------------------------------------------------------------------------------------
def draw_seed(spec_seed: int, build: str) -> int:
    """The draw's seed: spec seed and build id (sha256 of shard_stats.json) -> uint64."""
    return int.from_bytes(hashlib.sha256(f"rendered_samples\x00{spec_seed}\x00{build}".encode()).digest()[:8], "little")


def _pick(n_items: int, k: int, seed: int) -> list[int]:
    """k distinct indices in [0, n_items) from splitmix64 of a counter (sorted); O(k), not O(n_items)."""
    if k >= n_items:
        return list(range(n_items))
    chosen: dict[int, None] = {}
    j = 0
    while len(chosen) < k:
        v = tk.splitmix64(np.arange(j, j + 4 * k, dtype=np.uint64) ^ np.uint64(seed)) % np.uint64(n_items)
        for x in v.tolist():
            chosen.setdefault(x)
            if len(chosen) == k:
                break
        j += 4 * k
    return sorted(chosen)


def draw(samples_per_split: dict[str, int], seed: int, n: int = DEFAULT_SAMPLES) -> dict[str, list[int]]:
    """Storage indices to show per split: val a fifth of n (>= 1 if it has samples), train the rest;
    a split short of its part gives the remainder to the other."""
    have = {s: samples_per_split.get(s, 0) for s in SPLITS}
    want_val = min(have["val"], max(1 if have["val"] else 0, n // VAL_PART))
    want_train = min(have["train"], n - want_val)
    want_val = min(have["val"], n - want_train)
    out = {}
    for split, k in (("train", want_train), ("val", want_val)):
        sub = int.from_bytes(hashlib.sha256(f"{seed}\x00{split}".encode()).digest()[:8], "little")
        out[split] = _pick(have[split], k, sub)
    return out


# -- reading and decoding -------------------------------------------------------------------------------
def read_samples(stats: dict, picks: dict[str, list[int]], open_key: Callable[[str], BinaryIO]) -> list[tuple]:
    """(split, index, shard path, row, ids) of each pick, read from the shard files (one open per shard)."""
    L, dtype = stats["packing"]["sample_len"], stats["dtype"]
    out = []
    for split in SPLITS:
        shards = stats["splits"][split]["shards"]
        starts = np.cumsum([0] + [sh["samples"] for sh in shards]).tolist()
        by_shard: dict[int, list[int]] = {}
        for g in picks.get(split, []):
            by_shard.setdefault(bisect_right(starts, g) - 1, []).append(g)
        for si, idx in sorted(by_shard.items()):
            path = shards[si]["path"]
            with open_key(f"{layout.MIX_DIR}/{path}") as f:
                for g in idx:
                    row = g - starts[si]
                    out.append((split, g, path, row, read_row(f, row, dtype, L, path)))
    return out


def decode(tok, split: str, index: int, shard: str, row: int, ids: np.ndarray,
           separator_id: Optional[int]) -> Sample:
    """The sample decoded whole and, for the seam marks, piece by piece between separators."""
    text = tok.decode(ids.tolist(), skip_special_tokens=False)
    if separator_id is None:
        return Sample(split, index, shard, row, ids, text, [text])
    cuts = np.flatnonzero(ids == separator_id)
    bounds = [0, *cuts.tolist(), len(ids)]
    segs = [tok.decode(ids[a + (i > 0): b].tolist(), skip_special_tokens=False)
            for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
    return Sample(split, index, shard, row, ids, text, segs, [a + (i > 0) for i, a in enumerate(bounds[:-1])])


# -- scrub --------------------------------------------------------------------------------------------
def scrub_text(text: str, scrub: np.ndarray, k: int) -> tuple[str, int]:
    """`text` with every run of k words of an eval item (hashed in `scrub`) replaced by a marker; words masked.

    Words are those of `textkeys` (the audit's normalisation), mapped back to the whitespace-separated
    pieces of `text` they came from, so the marker covers the original characters."""
    spans = [(m.start(), m.end()) for m in _PIECE.finditer(text)]
    if scrub.size == 0 or not spans:
        return text, 0
    h, off = tk.word_hashes(tk.words(pa.array([text[a:b] for a, b in spans], pa.large_string())))
    if len(h) < k:
        return text, 0
    piece_of = np.repeat(np.arange(len(spans)), np.diff(off))
    grams, _ = ct.window_hashes(h, np.array([0, len(h)], np.int64), [k])  # one document: windows by start
    idx = np.minimum(np.searchsorted(scrub, grams), scrub.size - 1)
    hit = np.flatnonzero(scrub[idx] == grams)
    if not hit.size:
        return text, 0
    cover = np.zeros(len(h) + 1, np.int64)
    np.add.at(cover, hit, 1)
    np.add.at(cover, hit + k, -1)
    masked = np.cumsum(cover[:-1]) > 0
    runs: list[list[int]] = []  # [first piece, last piece, words] of each masked run
    for w in np.flatnonzero(masked).tolist():
        p = int(piece_of[w])
        if runs and (p <= runs[-1][1] or (w > 0 and masked[w - 1])):
            runs[-1][1], runs[-1][2] = p, runs[-1][2] + 1
        else:
            runs.append([p, p, 1])
    out, at = [], 0
    for first, last, words in runs:
        out += [text[at:spans[first][0]], f"⟦scrubbed {words} words⟧"]
        at = spans[last][1]
    out.append(text[at:])
    return "".join(out), int(masked.sum())


# -- rendering ------------------------------------------------------------------------------------------
def visible(s: str) -> str:
    """Control and format characters (but newline and tab) as ⟦U+XXXX⟧: encoding damage stays visible."""
    return "".join(c if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cf") else f"⟦U+{ord(c):04X}⟧"
                   for c in s)


def body(sample: Sample, separator: Optional[str]) -> tuple[str, bool]:
    """The shown text (separators as ⟦SEP⟧, each segment opening with a `⟦source · doc_id⟧` line of its own
    when its document is known) and whether the seams are marked: they are unless decoding piece by piece does not
    reassemble the whole decode (then the whole decode is shown, unmarked)."""
    docs = segment_docs(sample)
    if separator is not None and separator.join(sample.segments) == sample.text:
        return SEP.join((f"{chr(10) if i else ''}⟦{d.label()}⟧\n" if d is not None and seg else "") + visible(seg)
                        for i, (seg, d) in enumerate(zip(sample.segments, docs))), True
    lead = f"⟦{docs[0].label()}⟧\n" if docs and docs[0] is not None else ""
    return lead + visible(sample.text), separator is None


def wrap(text: str, width: int = WRAP) -> str:
    """Lines longer than `width` broken after the last space before it (hard at `width` when there is none),
    each broken line ending in WRAP_MARK; nothing dropped, so the words are those of `text`."""
    out = []
    for line in text.split("\n"):
        while len(line) > width:
            cut = line.rfind(" ", 0, width)
            cut = cut + 1 if cut > 0 else width
            out.append(line[:cut] + WRAP_MARK)
            line = line[cut:]
        out.append(line)
    return "\n".join(out)


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _elide(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}⟦… {len(text) - 2 * half:,} characters elided here; the file has them …⟧{text[-half:]}"


@dataclass
class Rendered:
    markdown: str  # the file: every sample whole
    ui_markdown: str  # the UI copy (the same unless larger than UI_CHARS)
    samples: int
    scrubbed_words: int
    withheld_samples: int
    seed: int


def render(samples: list[Sample], stats: dict, build: str, seed: int, scrub: np.ndarray, k: int) -> Rendered:
    """Markdown of the samples: a header per sample (split, index, shard, row, tokens, seams), its text fenced."""
    p = stats["packing"]
    sep, sep_id = p.get("separator"), p.get("separator_id")
    parts, scrubbed, withheld = [], 0, 0
    for s in samples:
        text, marked = body(s, sep)
        text, n = scrub_text(text, scrub, k)
        if ct.leaking_strings([text], scrub, k):  # fail closed: the check audit_artifact_scrubbed runs
            text, withheld = f"⟦sample withheld: {k}+ words of an eval item⟧", withheld + 1
        scrubbed += n
        seams = s.seams(sep_id)
        where = (f"{len(seams)} seam(s)" + (f" at token {', '.join(map(str, seams))}" if seams else "")
                 if sep_id is not None else "seams unknown (no separator)")
        docs = (" · documents: " + ", ".join(f"{code_span(d.source)} {code_span(d.doc_id)}"
                                             + (" (continued)" if d.continued else "") for d in s.docs[:12])
                + (f" and {len(s.docs) - 12:,} more" if len(s.docs) > 12 else "")) if s.docs else ""
        head = (f"**{s.split} sample {s.index:,}** · `{s.shard}` row {s.row:,} · {len(s.ids):,} tokens · {where}"
                + ("" if marked else " · seams not marked") + (f" · {n:,} words scrubbed" if n else "") + docs)
        parts.append((head, text))
    n_split = {sp: sum(1 for s in samples if s.split == sp) for sp in SPLITS}
    sizes = {sp: stats["splits"][sp]["samples"] for sp in SPLITS}
    intro = (f"{n_split['train']} train (of {sizes['train']:,}) and {n_split['val']} val (of {sizes['val']:,}) "
             f"samples, read back from the shard files and decoded with the mix tokenizer; build `{build[:16]}`, "
             f"draw seed {seed}. sample_len {p['sample_len']} (seq_len {p['seq_len']}"
             f"{', +1 for shifted targets' if p.get('shifted_targets') else ''}). "
             + (f"Separator `{sep}` (id {sep_id}) is shown as `{SEP}`; a seam is a document starting inside the "
                "sample. " if sep else "No separator is configured: document seams are not visible in the ids. ")
             + f"Runs of {k}+ words of an eval item are shown as `⟦scrubbed N words⟧`; "
             "control characters as `⟦U+XXXX⟧`; each document's segment opens with a line `⟦source · doc_id⟧` "
             "(not in the data).")

    def md(limit: Optional[int], width: Optional[int] = None) -> str:
        blocks = [intro + (UI_NOTE if width else "")]
        for head, text in parts:
            t = text if limit is None else _elide(text, limit)
            t = t if width is None else wrap(t, width)
            blocks.append(f"{head}\n\n{_fence(t)}text\n{t}\n{_fence(t)}")
        return "\n\n".join(blocks) + "\n"

    full = md(None)
    ui = md(None, WRAP)
    ui = ui if len(ui) <= UI_CHARS else md(max(200, UI_CHARS // max(len(parts), 1) - 300), WRAP)
    return Rendered(full, ui, len(samples), scrubbed, withheld, seed)


def rendered_samples(storage, spec, build: str, n: int = DEFAULT_SAMPLES) -> Rendered:
    """Draw, read, decode, scrub and render the build's samples; write `tokens/rendered_samples.md`.

    `build` identifies the build (the sha256 of shard_stats.json); the scrub set is the eval items'
    `audit.scrub_words`-word runs, hashed as `audit_artifact_scrubbed` hashes them (`audit.scrub_set`)."""
    from tokenizers import Tokenizer

    stats = json.loads(storage.read_text(layout.SHARD_STATS))
    tok = Tokenizer.from_file(storage.local_path(layout.TOKENIZER_FILE))
    seed = draw_seed(spec.seed, build)
    picks = draw({sp: stats["splits"][sp]["samples"] for sp in SPLITS}, seed, n)
    sep_id = stats["packing"].get("separator_id")
    samples = [decode(tok, *r, sep_id) for r in read_samples(stats, picks, storage.open)]
    for sp in SPLITS:  # which documents each sample holds (builds before the stream tables: unlabelled)
        key = layout.STREAM_DOCS.format(split=sp)
        if any(s.split == sp for s in samples) and storage.exists(key):
            stream = tables.read_parquet(storage, key)
            for s in samples:
                if s.split == sp:
                    s.docs = sample_docs(stream, s.index, stats["packing"]["sample_len"])
    out = render(samples, stats, build, seed, scrub_set(storage, spec), spec.audit.scrub_words)
    storage.write_text(layout.RENDERED_SAMPLES, out.markdown)
    return out
