"""Reading a configured source into normalised documents, sampled to its token budget.

Hub datasets and local Parquet go through `datasets` (streaming, so a source far larger than its
budget is never downloaded whole). Local JSONL and text folders are read here line by line: the
`datasets` JSON builder reports a malformed line without its file and line number and cannot count
undecodable bytes without failing, and both are required of this stage (a bad row names file, row
and field; undecodable bytes are counted, never fatal).
"""

from __future__ import annotations

import array
import fnmatch
import glob
import hashlib
import itertools
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.config import HubDataset, LocalJsonl, LocalParquet, MixSpec, SourceSpec, TextFolder
from mix_assets.lib import layout, tables
from mix_assets.lib.filters import CONTROL_ALLOWED, CONTROL_SHARE_MAX
from mix_assets.lib.modifiers import ModifierCounts, Modifiers, modify_table

DOC_SCHEMA = pa.schema([
    ("doc_id", pa.string()),
    ("source", pa.string()),
    ("text", pa.large_string()),
    ("row_index", pa.int64()),
    ("origin", pa.string()),
    ("n_bytes", pa.int64()),
    ("n_chars", pa.int64()),
    ("est_tokens", pa.int64()),
])

# Stop reading a source once this many times its budget has been seen (then sample by hash order):
# large enough that the sample is spread over the source, small enough not to read a huge corpus.
SCAN_FACTOR = 4.0
# Rows of the written raw/<source>/documents.parquet per row group: pyarrow's own default (what one
# `write_table` of the whole sample gave, so a sample under both bounds is written byte for byte as
# before), and a bound on the text held for one row group, which keeps a large source's memory flat
# (measured: peak RSS about 150 MB over the imports with 8 MiB, 240 MB with 32 MiB, at any source
# size; Parquet compresses per page, so smaller groups cost little; docs/scale.md "Bounded memory").
ROW_GROUP_ROWS = 1024 * 1024
ROW_GROUP_BYTES = 8 * 1024 * 1024
# Drop reasons: the row rules use lib/filters.py's `sanity:` names (one open set of reasons with the
# filter cascade); `sanity:undecodable` is the raw stage's own (bytes that are no text never reach a filter).
EMPTY, UNDECODABLE, BINARY = "sanity:empty", "sanity:undecodable", "sanity:binary"
CONTROL_CHARS, TOO_LONG, SAMPLED_OUT = "sanity:control_chars", "sanity:too_long", "sampled_out"
DROP_REASONS = (EMPTY, UNDECODABLE, BINARY, CONTROL_CHARS, TOO_LONG, SAMPLED_OUT)
UNREADABLE = (UNDECODABLE, BINARY, CONTROL_CHARS)
# "Looks like text": a document with a NUL is binary (a binary file, or text in a 16-bit encoding read
# as 8-bit); one where more than this share of characters are controls (C0 other than tab, newline
# and carriage return, DEL, C1) or U+FFFD replacements is binary read through a fallback encoding or
# text mangled upstream. A couple of stray form feeds in a short document are allowed.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd]")


def not_text(text: str) -> Optional[tuple[str, str]]:
    """(drop reason, what was found) for a document that does not look like text, else None."""
    if "\x00" in text:
        return BINARY, f"{text.count(chr(0))} NUL characters"
    if _CONTROL.search(text) is None:
        return None
    n = sum(1 for _ in _CONTROL.finditer(text))
    if n > max(CONTROL_ALLOWED, CONTROL_SHARE_MAX * len(text)):
        return CONTROL_CHARS, f"{n} of {len(text)} characters are control or replacement characters"
    return None


class SourceError(ValueError):
    """A source that cannot be read as configured; the message names source, file, row and field."""


@dataclass
class Row:
    row_index: int  # ordinal of the row/document in the source as read
    origin: str  # file:line, file#paragraph, or split:row
    text: Optional[str]  # None when the bytes did not decode
    id_key: str  # what the doc_id is derived from (stable across rebuilds)
    note: Optional[str] = None  # why `text` is None, when more than "the bytes did not decode"


def doc_id(source: str, id_key: str) -> str:
    """A document id stable across rebuilds: the source name and a hash of where the row came from."""
    return f"{source}-{hashlib.blake2b(id_key.encode(), digest_size=8).hexdigest()}"


def _sample_key(seed: int, did: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{did}".encode(), digest_size=8).digest(), "little")


def _walk_dirs(root: str) -> list[str]:
    """`root` and every non-hidden directory below it, never entering a directory link: a link back
    up the tree would be followed until the path is too long (each file read dozens of times)."""
    out = []
    for d, dirs, _ in os.walk(root, followlinks=False):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        out.append(d)
    return out


def _entries(d: str, pat: str, dirs_too: bool) -> list[str]:
    """Entries of folder `d` matching the glob component `pat` (hidden ones only if `pat` says so)."""
    try:
        names = os.listdir(d or ".")
    except OSError:  # not a folder
        return []
    names = [n for n in names if not n.startswith(".") or pat.startswith(".")]
    hits = [os.path.join(d, n) for n in sorted(fnmatch.filter(names, pat))]
    return hits if dirs_too else [h for h in hits if not os.path.isdir(h)]


def _glob(pattern: str) -> list[str]:
    """glob.glob(pattern, recursive=True), except that `**` never descends into a directory link."""
    if not glob.has_magic(pattern):
        return [pattern] if os.path.lexists(pattern) else []
    head, tail = os.path.split(pattern)
    parents = _glob(head) if head and glob.has_magic(head) else [head]
    if tail == "**":
        return [p for d in parents for w in _walk_dirs(d) for p in [w, *_entries(w, "*", dirs_too=False)]]
    if not glob.has_magic(tail):
        return [q for d in parents if os.path.lexists(q := os.path.join(d, tail))]
    return [q for d in parents for q in _entries(d, tail, dirs_too=True)]


def _expand(spec: MixSpec, src: SourceSpec, patterns: list[str], folder_ok: bool) -> tuple[list[Path], Path]:
    files: list[Path] = []
    for pat in patterns:
        p = spec.resolve(pat)
        hits = sorted(_glob(p)) or ([p] if os.path.exists(p) else [])
        if not hits:
            raise SourceError(f"source {src.name}: no file matches {pat!r} (resolved to {p})")
        for h in hits:
            hp = Path(h)
            if hp.is_dir():
                if not folder_ok:
                    raise SourceError(f"source {src.name}: {h} is a folder; give files or a glob")
                files += [Path(f) for d in _walk_dirs(h) for f in _entries(d, "*", dirs_too=False)]
            else:
                files.append(hp)
    # one path per real file: a file linked under a second name is read once (under its own name if listed)
    by_real: dict[str, Path] = {}
    for f in sorted(dict.fromkeys(files), key=lambda f: (f.resolve() != f.absolute(), str(f))):
        by_real.setdefault(str(f.resolve()), f)
    files = sorted(by_real.values())
    base = Path(os.path.commonpath([str(f.parent) for f in files])) if files else Path(".")
    return files, base


class _LongInt(str):
    """A JSON integer longer than int() accepts (sys.get_int_max_str_digits): kept as its digits."""


def _parse_int(digits: str):
    limit = sys.get_int_max_str_digits()
    return _LongInt(digits) if limit and len(digits.lstrip("-")) > limit else int(digits)


def _not_unicode(src: SourceSpec, row: dict) -> Optional[str]:
    """Why a field this source reads is no Unicode text (a JSON lone surrogate), or None."""
    for f in src.fields:
        v = row.get(f)
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                return f"field {f!r} holds a lone surrogate (U+{ord(v[e.start]):04X}), not valid Unicode"
    return None


def _render(src: SourceSpec, row: dict, where: str) -> str:
    fields = src.fields
    missing = [f for f in fields if f not in row]
    if missing:
        raise SourceError(
            f"source {src.name}: {where}: missing field {missing[0]!r} "
            f"(the config reads {fields}; the row has {sorted(row)[:12]})"
        )
    if src.text_field:
        v = row[src.text_field]
        if isinstance(v, _LongInt):
            raise SourceError(
                f"source {src.name}: {where}: field {src.text_field!r} holds an integer of "
                f"{len(v.lstrip('-'))} digits, expected a string"
            )
        if v is not None and not isinstance(v, str):
            raise SourceError(
                f"source {src.name}: {where}: field {src.text_field!r} holds {type(v).__name__}, expected a string"
            )
        return v or ""
    return src.template.format(**{f: "" if row[f] is None else row[f] for f in fields})


def _read_jsonl(spec: MixSpec, src: SourceSpec, loader: LocalJsonl) -> Iterator[Row]:
    files, base = _expand(spec, src, loader.paths, folder_ok=False)
    i = 0
    for f in files:
        rel = str(f.relative_to(base))
        with open(f, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                where = f"{f}:{lineno}"
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    yield Row(i, f"{rel}:{lineno}", None, f"{rel}:{lineno}")
                    i += 1
                    continue
                try:
                    obj = json.loads(line, parse_int=_parse_int)
                except json.JSONDecodeError as e:
                    raise SourceError(
                        f"source {src.name}: {where}: malformed JSON ({e.msg} at column {e.colno})"
                    ) from None
                except RecursionError:
                    raise SourceError(f"source {src.name}: {where}: malformed JSON (nested too deeply)") from None
                if not isinstance(obj, dict):
                    raise SourceError(f"source {src.name}: {where}: expected a JSON object, got {type(obj).__name__}")
                origin = f"{rel}:{lineno}"
                text = _render(src, obj, where)
                bad = _not_unicode(src, obj)
                yield Row(i, origin, None if bad else text, origin, note=bad)
                i += 1


def _units(data: bytes, unit: str) -> list[bytes]:
    data = data.replace(b"\r\n", b"\n").removeprefix(b"\xef\xbb\xbf")
    if unit == "file":
        return [data]
    if unit == "lines":
        return data.split(b"\n")
    out, cur = [], []
    for line in data.split(b"\n"):
        if line.strip():
            cur.append(line)
        elif cur:
            out.append(b"\n".join(cur))
            cur = []
    if cur:
        out.append(b"\n".join(cur))
    return out


def _read_text(
    spec: MixSpec, src: SourceSpec, loader: TextFolder, fallback_used: list[str]
) -> Iterator[Row]:
    files, base = _expand(spec, src, loader.paths, folder_ok=True)
    i = 0
    for f in files:
        rel = str(f.relative_to(base))
        units = [u for u in _units(f.read_bytes(), loader.unit) if u.strip()]
        groups: list[tuple[int, list[bytes]]] = []
        for k, u in enumerate(units):
            if loader.group_chars and groups and sum(len(x) for x in groups[-1][1]) < loader.group_chars:
                groups[-1][1].append(u)
            else:
                groups.append((k, [u]))
        sep = b"\n\n" if loader.unit == "paragraphs" else b"\n"
        for k, parts in groups:
            key = f"{rel}#{k}"
            data = sep.join(parts)
            try:
                text = data.decode(loader.encoding)
            except UnicodeDecodeError:
                text = None
                if loader.fallback_encoding:
                    try:
                        text = data.decode(loader.fallback_encoding)
                        fallback_used.append(key)
                    except UnicodeDecodeError:
                        pass
            yield Row(i, key, text, key)
            i += 1


def _read_datasets(src: SourceSpec, loader, split: str) -> Iterator[Row]:
    import datasets

    datasets.logging.set_verbosity_error()
    if isinstance(loader, HubDataset):
        kwargs = dict(path=loader.repo_id, name=loader.config_name, revision=loader.revision,
                      data_files=loader.data_files)
        streaming = True if loader.streaming is None else loader.streaming
        where = f"{loader.repo_id}@{loader.revision}"
    else:
        kwargs = dict(path="parquet", data_files=loader.paths)
        streaming, where = True, ",".join(loader.paths)
    try:
        ds = datasets.load_dataset(**kwargs, split=split, streaming=streaming)
    except ValueError as e:
        if "split" in str(e).lower():
            raise SourceError(f"source {src.name}: {where}: {e}") from None
        raise
    for i, row in enumerate(ds):
        key = f"{split}:{i}"
        yield Row(i, key, _render(src, row, f"{where} {key}"), key)


PLACEHOLDER_REVISION = "0" * 40


def iter_rows(spec: MixSpec, src: SourceSpec, fallback_used: Optional[list[str]] = None) -> Iterator[Row]:
    """Rows of a source in source order (`fallback_used` collects rows decoded with the fallback)."""
    loader = src.loader
    if isinstance(loader, LocalJsonl):
        return _read_jsonl(spec, src, loader)
    if isinstance(loader, TextFolder):
        return _read_text(spec, src, loader, fallback_used if fallback_used is not None else [])
    if isinstance(loader, LocalParquet):
        resolved = loader.model_copy(update={"paths": [spec.resolve(p) for p in loader.paths]})
        for p in resolved.paths:
            if not glob.glob(p):
                raise SourceError(f"source {src.name}: no file matches {p}")
        return _read_datasets(src, resolved, "train")
    if isinstance(loader, HubDataset):
        if loader.revision == PLACEHOLDER_REVISION:
            raise SourceError(
                f"source {src.name}: {loader.repo_id} has the placeholder revision {PLACEHOLDER_REVISION}; "
                "pin the commit sha of the snapshot you reviewed"
            )
        repo = loader.repo_id
        if repo.startswith((".", "/")):
            loader = loader.model_copy(update={"repo_id": spec.resolve(repo)})
        return _read_datasets(src, loader, src.split)
    raise SourceError(f"source {src.name}: unknown loader {loader!r}")  # pragma: no cover - pydantic refuses


@dataclass
class SourceSample:
    """The documents kept from one source and what happened to every row read.

    `table` holds the kept documents only when sampled in memory (`sample_source`); a streamed read
    (`read_raw_source`) writes them to Parquet and keeps their count, sums and lengths here.
    """

    table: Optional[pa.Table] = None
    rows_read: int = 0
    dropped: dict = field(default_factory=lambda: {r: 0 for r in DROP_REASONS})
    bytes_read: int = 0
    exhausted: bool = True  # False when reading stopped early (SCAN_FACTOR x budget seen)
    undecodable_origins: list = field(default_factory=list)
    drop_notes: list = field(default_factory=list)  # "origin: reason: what" for unreadable rows (first 20)
    fallback_decoded: list = field(default_factory=list)  # origins decoded with the fallback encoding
    docs: int = 0  # documents kept
    est_tokens: int = 0  # their estimated tokens
    text_bytes: int = 0  # their UTF-8 bytes
    n_chars: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per kept document
    modifiers: dict = field(default_factory=dict)  # lib/modifiers.py: configuration and counts, when any

    def drop(self, origin: str, reason: str, what: str) -> None:
        """Count a row dropped as unreadable and note where and why (the first 20)."""
        self.dropped[reason] += 1
        if reason == UNDECODABLE and len(self.undecodable_origins) < 20:
            self.undecodable_origins.append(origin)
        if len(self.drop_notes) < 20:
            self.drop_notes.append(f"{origin}: {reason}: {what}")


def _candidates(spec: MixSpec, src: SourceSpec, bytes_per_token: float, limit_tokens: float,
                out: SourceSample, progress: Optional[Callable[[int, int], None]] = None) -> Iterator[tuple[Row, str, int, int]]:
    """(row, stripped text, n_bytes, est_tokens) of every row that passes the filters, in source order,
    counting rows read and dropped into `out`; stops once `limit_tokens` have been seen."""
    seen_tokens = 0
    for row in iter_rows(spec, src, out.fallback_decoded):
        out.rows_read += 1
        if progress and out.rows_read % 1000 == 0:
            progress(out.rows_read, out.bytes_read)
        if row.text is None:
            out.drop(row.origin, UNDECODABLE, row.note or "the bytes do not decode")
            continue
        text = row.text.strip()
        try:
            nb = len(text.encode("utf-8"))
        except UnicodeEncodeError as e:  # e.g. a fallback codec that decodes "\ud800" escapes
            out.drop(row.origin, UNDECODABLE, f"holds a lone surrogate (U+{ord(text[e.start]):04X}), not valid Unicode")
            continue
        out.bytes_read += nb
        if len(text) < src.min_doc_chars:
            out.dropped[EMPTY] += 1
            continue
        junk = not_text(text)
        if junk:
            out.drop(row.origin, *junk)
            continue
        if len(text) > src.max_doc_chars:
            out.dropped[TOO_LONG] += 1
            continue
        est = max(1, int(round(nb / bytes_per_token)))
        yield row, text, nb, est
        seen_tokens += est
        if seen_tokens >= limit_tokens:
            out.exhausted = False
            return


@dataclass
class SamplePlan:
    """Pass 1 of a sample: which candidates (rows passing the filters, by ordinal) are kept."""

    keep: np.ndarray  # bool per candidate ordinal
    keys: np.ndarray  # uint64 sample key per candidate ordinal (checked again in pass 2)


def plan_sample(spec: MixSpec, src: SourceSpec, bytes_per_token: float, budget_tokens: int,
                progress: Optional[Callable[[int, int], None]] = None) -> tuple[SourceSample, SamplePlan]:
    """Pass 1: read the source keeping 24 bytes per candidate (sample key, n_bytes, est_tokens), and
    choose the sample: the prefix of the candidates ordered by a hash of (seed, doc_id) that first
    reaches `budget_tokens`. Counts, drops and the kept documents' sums go into the SourceSample."""
    out = SourceSample()
    keys, nbs, ests = array.array("Q"), array.array("q"), array.array("q")
    limit = SCAN_FACTOR * budget_tokens
    for row, _text, nb, est in _candidates(spec, src, bytes_per_token, limit, out, progress):
        keys.append(_sample_key(spec.seed, doc_id(src.name, row.id_key)))
        nbs.append(nb)
        ests.append(est)
    if out.rows_read == 0:
        raise SourceError(f"source {src.name}: the source is empty (no rows were read)")
    key = np.frombuffer(keys, np.uint64) if keys else np.zeros(0, np.uint64)
    est_a = np.frombuffer(ests, np.int64) if ests else np.zeros(0, np.int64)
    nb_a = np.frombuffer(nbs, np.int64) if nbs else np.zeros(0, np.int64)
    # Equal keys mean the same doc_id (a 64-bit hash of it); ties then fall to source order.
    order = np.argsort(key, kind="stable")
    before = np.cumsum(est_a[order]) - est_a[order]  # tokens kept before each candidate, in key order
    n_keep = int(np.count_nonzero(before < budget_tokens))
    kept_keys = key[order[:n_keep]]
    if n_keep > 1 and bool(np.any(kept_keys[1:] == kept_keys[:-1])):
        raise SourceError(f"source {src.name}: two rows map to the same doc_id; check for repeated files")
    keep = np.zeros(len(key), bool)
    keep[order[:n_keep]] = True
    out.dropped[SAMPLED_OUT] = len(key) - n_keep
    out.docs, out.est_tokens, out.text_bytes = n_keep, int(est_a[keep].sum()), int(nb_a[keep].sum())
    return out, SamplePlan(keep, key.copy())


def iter_sample(spec: MixSpec, src: SourceSpec, bytes_per_token: float, plan: SamplePlan,
                group_rows: Optional[int] = None, group_bytes: Optional[int] = None) -> Iterator[pa.Table]:
    """Pass 2: read the source again and yield the kept documents in source order, as tables of at most
    `group_rows` rows and (past the first document) `group_bytes` of text: one Parquet row group each."""
    group_rows, group_bytes = group_rows or ROW_GROUP_ROWS, group_bytes or ROW_GROUP_BYTES
    scratch = SourceSample()
    last = int(np.flatnonzero(plan.keep)[-1]) if plan.keep.any() else -1
    cols: dict[str, list] = {c: [] for c in DOC_SCHEMA.names}
    size = 0
    cands = _candidates(spec, src, bytes_per_token, float("inf"), scratch) if last >= 0 else iter(())
    for j, (row, text, nb, est) in enumerate(cands):
        if j > last:
            break
        if not plan.keep[j]:
            continue
        did = doc_id(src.name, row.id_key)
        if _sample_key(spec.seed, did) != int(plan.keys[j]):
            raise SourceError(f"source {src.name}: the source changed while it was read ({row.origin})")
        if cols["doc_id"] and (len(cols["doc_id"]) >= group_rows or size + nb > group_bytes):
            yield pa.Table.from_pydict(cols, schema=DOC_SCHEMA)
            cols, size = {c: [] for c in DOC_SCHEMA.names}, 0
        values = (did, src.name, text, row.row_index, row.origin, nb, len(text), est)
        for c, v in zip(DOC_SCHEMA.names, values):
            cols[c].append(v)
        size += nb
    if cols["doc_id"] or last < 0:
        yield pa.Table.from_pydict(cols, schema=DOC_SCHEMA)


def sample_source(
    spec: MixSpec,
    src: SourceSpec,
    bytes_per_token: float,
    budget_tokens: int,
    progress: Optional[Callable[[int, int], None]] = None,
) -> SourceSample:
    """Read a source, drop bad rows, and keep a seeded sample up to `budget_tokens` (estimated), in memory.

    The sample is the prefix of the rows ordered by a hash of (seed, doc_id): deterministic, spread
    over the whole source, and independent of how the rows were batched or streamed.
    """
    out, plan = plan_sample(spec, src, bytes_per_token, budget_tokens, progress)
    parts = list(iter_sample(spec, src, bytes_per_token, plan, group_rows=1 << 62, group_bytes=1 << 62))
    out.table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    out.n_chars = np.asarray(out.table.column("n_chars"), np.int64)
    return out


def bytes_per_token(spec: MixSpec, texts: list[str]) -> tuple[float, str]:
    """Estimated bytes per token and how it was obtained (recorded beside every estimate)."""
    tok = spec.tokenizer
    path = None
    if tok.kind == "file" and tok.path:
        path = spec.resolve(tok.path)
    elif tok.kind == "hub":
        try:
            from huggingface_hub import hf_hub_download

            path = hf_hub_download(tok.repo_id, "tokenizer.json", revision=tok.revision)
        except Exception as e:  # offline without a cache: fall back, and say so
            return tok.bytes_per_token_fallback, f"fallback {tok.bytes_per_token_fallback} B/token (hub tokenizer unavailable: {type(e).__name__})"
    if path and texts:
        from tokenizers import Tokenizer

        t = Tokenizer.from_file(path)
        sample = texts[:500]
        n_tok = sum(len(e.ids) for e in t.encode_batch(sample, add_special_tokens=False))
        n_bytes = sum(len(s.encode("utf-8")) for s in sample)
        if n_tok:
            return n_bytes / n_tok, f"measured with {tok.kind} tokenizer on {len(sample)} documents"
    return tok.bytes_per_token_fallback, (
        f"fallback {tok.bytes_per_token_fallback} B/token (the tokenizer is trained after dedup)"
        if tok.kind == "train" else f"fallback {tok.bytes_per_token_fallback} B/token"
    )


# -- the raw/<source> stage ------------------------------------------------------------------------

HEAD_ROWS = 500  # rows read ahead to measure bytes per token with an existing tokenizer


@dataclass
class RawSource:
    """One source read, sampled and written: the sample and the budget it was judged against."""

    name: str
    sample: SourceSample
    bytes_per_token: float
    token_estimate: str  # how bytes_per_token was obtained
    budget_tokens: int  # budget x headroom: what the sample aims for
    minimum_tokens: int  # what it must reach (unique budget before the validation split)

    @property
    def docs(self) -> int:
        return self.sample.docs

    @property
    def est_tokens(self) -> int:
        return self.sample.est_tokens

    @property
    def text_bytes(self) -> int:
        return self.sample.text_bytes

    @property
    def schema(self) -> pa.Schema:
        """The schema of raw/<source>/documents.parquet."""
        return DOC_SCHEMA

    @property
    def unreadable(self) -> dict[str, int]:
        d = self.sample.dropped
        return {k: d[k] for k in UNREADABLE if d[k]}

    def stats(self) -> dict:
        """raw/<source>/stats.json."""
        got = self.sample
        return {
            "source": self.name, "rows_read": got.rows_read, "documents": self.docs,
            "dropped": got.dropped, "bytes": self.text_bytes, "bytes_read": got.bytes_read,
            "est_tokens": self.est_tokens, "bytes_per_token": round(self.bytes_per_token, 4),
            "token_estimate": self.token_estimate, "budget_tokens": self.budget_tokens,
            "minimum_tokens": self.minimum_tokens, "exhausted": got.exhausted,
            "undecodable_origins": got.undecodable_origins, "drop_notes": got.drop_notes,
            "fallback_decoded": len(got.fallback_decoded),
            **({"modifiers": got.modifiers} if got.modifiers else {}),
        }


def read_raw_source(storage, spec: MixSpec, name: str,
                    progress: Optional[Callable[[int, int], None]] = None) -> RawSource:
    """Sample source `name` to its raw budget; write its documents parquet and stats.json."""
    src = spec.source(name)
    # A tokenizer trained later cannot measure anything yet: read a sample head only for one that exists.
    head = ([] if spec.tokenizer.kind == "train" else
            [r.text for r in itertools.islice(iter_rows(spec, src), HEAD_ROWS) if r.text])
    bpt, how = bytes_per_token(spec, head)
    got, plan = plan_sample(spec, src, bpt, spec.raw_budget(name), progress)  # pass 1: choose
    if progress:
        progress(got.rows_read, got.bytes_read)
    n_chars: list[np.ndarray] = []
    mods = Modifiers.for_source(spec, name)
    counts = ModifierCounts(mods) if mods else None
    written = [0, 0]  # bytes, estimated tokens

    def groups() -> Iterator[pa.Table]:  # pass 2: the chosen documents, one row group at a time
        for t in iter_sample(spec, src, bpt, plan):
            if mods:
                t = modify_table(t, mods, bpt, counts)
                written[0] += pc.sum(t.column("n_bytes")).as_py() or 0
                written[1] += pc.sum(t.column("est_tokens")).as_py() or 0
            n_chars.append(np.asarray(t.column("n_chars"), np.int64))
            yield t

    tables.write_parquet_groups(storage, layout.RAW_DOCS.format(source=name), DOC_SCHEMA, groups())
    got.n_chars = np.concatenate(n_chars) if n_chars else np.zeros(0, np.int64)
    if counts:  # the sample was chosen on the text as read; its totals are those of the text written
        got.modifiers = counts.stats()
        got.text_bytes, got.est_tokens = written
    raw = RawSource(name, got, bpt, how, spec.raw_budget(name), spec.minimum_tokens(name))
    storage.write_text(layout.RAW_STATS.format(source=name), json.dumps(raw.stats(), indent=1, sort_keys=True))
    return raw
