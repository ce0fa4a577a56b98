"""Reading a configured source into normalised documents, sampled to its token budget.

Hub datasets and local Parquet go through `datasets` (streaming, so a source far larger than its
budget is never downloaded whole). Local JSONL and text folders are read here line by line: the
`datasets` JSON builder reports a malformed line without its file and line number and cannot count
undecodable bytes without failing, and both are required of this stage (a bad row names file, row
and field; undecodable bytes are counted, never fatal). A JSONL source is read in chunks of whole
lines as map tasks (`core/engine.map_chunks`), each parsed by pyarrow's JSON reader where that reads
as `json.loads` does, else line by line as above (see "JSONL in chunks" below).

`spec` is the mix spec (`mix_assets/config.py`): read here for its paths, seed, tokenizer and budgets, never
imported (a stage imports only its own config section, `stages/sources/config.py`).
"""

from __future__ import annotations

import array
import fnmatch
import functools
import glob
import hashlib
import io
import itertools
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from mix_assets.core import imports, keys, layout, objects, tables
from mix_assets.core.engine import Engine, map_chunks
from mix_assets.stages.sources.config import HubDataset, LocalJsonl, LocalParquet, SourceSpec, TextFolder
from mix_assets.stages.filters.rules.sanity import CONTROL_ALLOWED, CONTROL_SHARE_MAX
from mix_assets.stages.sources.modifiers import ModifierCounts, Modifiers, modify_table

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

URL_COLUMN = "url"  # raw/<source>'s column: a source's `url_field`, or a text folder's file URLs (url_template, urls)


def doc_schema(src) -> pa.Schema:
    """raw/<source>/documents.parquet's schema: DOC_SCHEMA, then `url` when the source has URLs (SourceSpec.has_url)."""
    return DOC_SCHEMA.append(pa.field(URL_COLUMN, pa.string())) if src.has_url else DOC_SCHEMA


# Stop reading a source once this many times its budget has been seen (then sample by hash order):
# large enough that the sample is spread over the source, small enough not to read a huge corpus.
SCAN_FACTOR = 4.0
# Rows of the written raw/<source>/documents.parquet per row group: pyarrow's own default (what one
# `write_table` of the whole sample gave, so a sample under both bounds is written byte for byte as
# before), and a bound on the text held for one row group, which keeps a large source's memory flat
# (measured: peak RSS about 150 MB over the imports with 8 MiB, 240 MB with 32 MiB, at any source
# size; Parquet compresses per page, so smaller groups cost little; bench/results/journal/scale.md,
# "Bounded memory: raw/<source>").
ROW_GROUP_ROWS = 1024 * 1024
ROW_GROUP_BYTES = 8 * 1024 * 1024
# Drop reasons: the row rules use stages/filters/cascade.py's `sanity:` names (one open set of reasons with the
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
    url: Optional[str] = None  # the `url_field` value (Parquet, hub rows; JSONL reads it per chunk) or the file's URL


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


def _expand(spec, src: SourceSpec, patterns: list[str], folder_ok: bool) -> tuple[list[Path], Path]:
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


def _read_jsonl(spec, src: SourceSpec, loader: LocalJsonl) -> Iterator[Row]:
    files, base = _expand(spec, src, loader.paths, folder_ok=False)
    i = 0
    for f in files:
        with open(f, "rb") as fh:
            for _lineno, row in _jsonl_rows(src, str(f), str(f.relative_to(base)), fh, 1, i):
                yield row
                i += 1


def _jsonl_rows(src: SourceSpec, path: str, rel: str, lines, first_line: int,
                first_index: int) -> Iterator[tuple[int, Row]]:
    """(line number, row) of every non-blank line of `lines` (binary lines, newline kept), the first
    numbered `first_line` and indexed `first_index`: the exact reading every JSONL row goes through,
    or is checked against (`_scan_arrow`)."""
    i = first_index
    for lineno, raw in enumerate(lines, first_line):
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        origin = f"{rel}:{lineno}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            yield lineno, Row(i, origin, None, origin)
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
        text = _render(src, obj, where)
        bad = _not_unicode(src, obj)
        yield lineno, Row(i, origin, None if bad else text, origin, note=bad)
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


def text_file_urls(src: SourceSpec, loader: TextFolder, files: list[Path], base: Path) -> list[Optional[str]]:
    """Each file's URL (None: none given): `loader.urls` by the file's name or its path below `base` (the folder
    common to the source's files), else `loader.url_template` over {name}, {stem}, {path}, each percent-encoded.
    A `urls` key that names no file, or several, fails naming the source and the key (a typo would otherwise
    leave a file without its URL unnoticed)."""
    rels = [f.relative_to(base).as_posix() for f in files]
    out: list[Optional[str]] = [None] * len(files)
    if loader.url_template:
        for i, (f, rel) in enumerate(zip(files, rels)):
            out[i] = loader.url_template.format(**{k: quote(v, safe="/") for k, v in
                                                   (("name", f.name), ("stem", f.stem), ("path", rel))})
    given: dict[int, str] = {}
    for key, url in (loader.urls or {}).items():
        hits = [i for i, (f, rel) in enumerate(zip(files, rels)) if key in (rel, f.name)]
        if not hits:
            raise SourceError(f"source {src.name}: loader.urls: {key!r} is none of its files (a file's name or its "
                              f"path below {base}: {', '.join(rels[:8])}{', ...' if len(rels) > 8 else ''})")
        if len(hits) > 1:
            raise SourceError(f"source {src.name}: loader.urls: {key!r} names {len(hits)} files "
                              f"({', '.join(rels[i] for i in hits[:4])}); give its path below {base}")
        if hits[0] in given:
            raise SourceError(f"source {src.name}: loader.urls: {given[hits[0]]!r} and {key!r} both name "
                              f"{rels[hits[0]]}")
        given[hits[0]] = key
        out[hits[0]] = url
    return out


def _read_text(
    spec, src: SourceSpec, loader: TextFolder, fallback_used: list[str]
) -> Iterator[Row]:
    files, base = _expand(spec, src, loader.paths, folder_ok=True)
    file_urls = text_file_urls(src, loader, files, base) if src.has_url else [None] * len(files)
    i = 0
    for f, url in zip(files, file_urls):
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
            yield Row(i, key, text, key, url=url)
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
        yield Row(i, key, _render(src, row, f"{where} {key}"), key,
                  url=_url_of(src, row, f"{where} {key}") if src.url_field else None)


def _url_of(src: SourceSpec, row: dict, where: str) -> Optional[str]:
    """A Parquet / hub row's `url_field` value (None when the column is absent or null); a value that is not a
    string fails naming the file, row and field (as a JSONL row's does)."""
    v = row.get(src.url_field)
    if v is not None and not isinstance(v, str):
        raise SourceError(f"source {src.name}: {where}: field {src.url_field!r} holds {type(v).__name__}, "
                          "expected a string (a URL)")
    return v


PLACEHOLDER_REVISION = "0" * 40


def iter_rows(spec, src: SourceSpec, fallback_used: Optional[list[str]] = None) -> Iterator[Row]:
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


def read_files(spec, src: SourceSpec) -> list[Path]:
    """The local files `iter_rows` reads for `src` (the identity of a raw/<source> artifact's input,
    stages/keyed.py): its JSONL/text files, its Parquet globs, a hub repo's files when it is a local folder;
    none for a remote hub dataset (its repo id, revision, config and data files are in the config)."""
    loader = src.loader
    if isinstance(loader, LocalJsonl):
        return _expand(spec, src, loader.paths, folder_ok=False)[0]
    if isinstance(loader, TextFolder):
        return _expand(spec, src, loader.paths, folder_ok=True)[0]
    if isinstance(loader, LocalParquet):
        return sorted({Path(f) for p in loader.paths for f in glob.glob(spec.resolve(p), recursive=True)})
    if isinstance(loader, HubDataset) and loader.repo_id.startswith((".", "/")):
        root = spec.resolve(loader.repo_id)
        return [Path(d) / n for d in _walk_dirs(root) for n in sorted(os.listdir(d))
                if not n.startswith(".") and os.path.isfile(os.path.join(d, n))]
    return []


def root_keys(spec, name: str) -> dict[str, str]:
    """raw/<name>'s input keys (core/keys.py): a fingerprint of the files it reads, and of the tokenizer
    file its bytes-per-token estimate reads (tokenizer.kind file)."""
    out = {"files": keys.files_fingerprint(read_files(spec, spec.source(name)))}
    if spec.tokenizer.kind == "file" and spec.tokenizer.path:
        out["tokenizer_file"] = keys.files_fingerprint([spec.resolve(spec.tokenizer.path)])
    return out


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
    modifiers: dict = field(default_factory=dict)  # stages/sources/modifiers.py: configuration and counts, when any
    chunks_reused: tuple[int, int] = (0, 0)  # JSONL: (chunks whose filed pass 1 was reused, chunks read); not in stats

    def drop(self, origin: str, reason: str, what: str) -> None:
        """Count a row dropped as unreadable and note where and why (the first 20)."""
        self.dropped[reason] += 1
        self.note(origin, reason, what)

    def note(self, origin: str, reason: str, what: str) -> None:
        """Note where and why a row was dropped as unreadable (the first 20; not counted here)."""
        if reason == UNDECODABLE and len(self.undecodable_origins) < 20:
            self.undecodable_origins.append(origin)
        if len(self.drop_notes) < 20:
            self.drop_notes.append(f"{origin}: {reason}: {what}")


def _classify(row: Row, src: SourceSpec, bytes_per_token: float) -> tuple:
    """(drop reason or None, what was found, stripped text, UTF-8 bytes read, estimated tokens) of one row."""
    if row.text is None:
        return UNDECODABLE, row.note or "the bytes do not decode", None, 0, 0
    text = row.text.strip()
    try:
        nb = len(text.encode("utf-8"))
    except UnicodeEncodeError as e:  # e.g. a fallback codec that decodes "\ud800" escapes
        what = f"holds a lone surrogate (U+{ord(text[e.start]):04X}), not valid Unicode"
        return UNDECODABLE, what, None, 0, 0
    if len(text) < src.min_doc_chars:
        return EMPTY, "", None, nb, 0
    junk = not_text(text)
    if junk:
        return (*junk, None, nb, 0)
    if len(text) > src.max_doc_chars:
        return TOO_LONG, "", None, nb, 0
    return None, "", text, nb, max(1, int(round(nb / bytes_per_token)))


def _candidates(spec, src: SourceSpec, bytes_per_token: float, limit_tokens: float,
                out: SourceSample, progress: Optional[Callable[[int, int], None]] = None) -> Iterator[tuple[Row, str, int, int]]:
    """(row, stripped text, n_bytes, est_tokens) of every row that passes the filters, in source order,
    counting rows read and dropped into `out`; stops once `limit_tokens` have been seen."""
    seen_tokens = 0
    for row in iter_rows(spec, src, out.fallback_decoded):
        out.rows_read += 1
        if progress and out.rows_read % 1000 == 0:
            progress(out.rows_read, out.bytes_read)
        reason, what, text, nb, est = _classify(row, src, bytes_per_token)
        out.bytes_read += nb
        if reason in UNREADABLE:
            out.drop(row.origin, reason, what)
        elif reason:
            out.dropped[reason] += 1
        if reason:
            continue
        yield row, text, nb, est
        seen_tokens += est
        if seen_tokens >= limit_tokens:
            out.exhausted = False
            return


# -- JSONL in chunks, on the engine ----------------------------------------------------------------
# A JSONL source is read as map tasks over byte ranges of its files (whole lines, `JSONL_CHUNK_BYTES`
# each, cut the same way whatever the engine or worker count): pass 1 classifies every row of a
# chunk and returns its counts and candidates' sample keys, pass 2 returns the kept documents of a
# chunk as a table. Results are taken in chunk order, so rows, counts, notes and errors come out as
# the one-row-at-a-time reading gives them. A chunk is parsed by pyarrow's JSON reader (C++, the GIL
# released) and classified with pyarrow compute when it is plainly well formed; any doubt (a parse
# error, bytes that are no UTF-8, a row count or type that differs, a line that is not one object, a
# BOM, a null or non-string text field, nesting past _MAX_DEPTH, a template) and the chunk is read by
# `_jsonl_rows` instead, so every error and drop note is that reading's own. Pass 2 reads only the
# rows pass 1 chose (their positions in the chunk, 4 bytes per candidate), checking their keys.

JSONL_CHUNK_BYTES = 4 << 20
_REASONS = (None, EMPTY, UNDECODABLE, BINARY, CONTROL_CHARS, TOO_LONG)  # row codes; 0 = a candidate
_CODE = {r: k for k, r in enumerate(_REASONS)}
_CONTROL_RE2 = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x{7f}-\x{9f}\x{fffd}]"  # _CONTROL, in RE2 syntax
_MAX_DEPTH = 64  # rows nested deeper go to json.loads (which refuses past the recursion limit)
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)


@dataclass(frozen=True)
class JsonlChunk:
    """Whole lines of one JSONL file: bytes [start, stop), the first numbered `first_line`."""

    path: str  # the file as named in messages
    rel: str  # the file as named in origins
    start: int
    stop: int
    first_line: int

    def read(self) -> bytes:
        with open(self.path, "rb") as fh:
            fh.seek(self.start)
            return fh.read(self.stop - self.start)


def jsonl_chunks(spec, src: SourceSpec, chunk_bytes: Optional[int] = None) -> Iterator[JsonlChunk]:
    """The source's files cut into chunks of whole lines, lazily (reading stops with the caller)."""
    chunk_bytes = chunk_bytes or JSONL_CHUNK_BYTES
    files, base = _expand(spec, src, src.loader.paths, folder_ok=False)
    for f in files:
        rel, pos, line = str(f.relative_to(base)), 0, 1
        with open(f, "rb") as fh:
            while data := fh.read(chunk_bytes):
                end = data.rfind(b"\n") + 1 if len(data) == chunk_bytes else len(data)  # whole lines
                if end == 0:  # a line longer than a chunk: all of it
                    data += fh.readline()
                    end = len(data)
                yield JsonlChunk(str(f), rel, pos, pos + end, line)
                # counted in numpy, which lets go of the GIL (the map's threads are parsing meanwhile)
                pos, line = pos + end, line + int(np.count_nonzero(np.frombuffer(data, np.uint8, end) == 10))
                fh.seek(pos)


@dataclass
class _Scan:
    """Every row of one chunk classified (`_classify`), in row order."""

    lines: np.ndarray  # line number per row
    codes: np.ndarray  # int8 per row: index in _REASONS
    nb: np.ndarray  # int64 per row: UTF-8 bytes of the stripped text (0 when undecodable)
    est: np.ndarray  # int64 per row: estimated tokens (0 unless a candidate)
    texts: object  # stripped text per row: a pyarrow string array, or a list (None unless a candidate)
    notes: list  # (row, reason, what) for every unreadable row
    error: Optional[SourceError] = None  # raised reading the row after the last one
    digest: bytes = b""  # of the chunk's bytes (`_chunk_digest`)
    arrow: bool = False  # read by `_scan_arrow` (else `_scan_python`)


def _chunk_digest(data: bytes) -> bytes:
    # Pass 2 re-reads a chunk and proves it is the same bytes pass 1 chose from: doc ids name lines,
    # so the sample keys alone miss a line edited in place. sha256 (SHA-NI: ~3x blake2b here) releases
    # the GIL on large input.
    return hashlib.sha256(data).digest()


def _scan(src: SourceSpec, chunk: JsonlChunk, bytes_per_token: float, data: Optional[bytes] = None) -> _Scan:
    data = chunk.read() if data is None else data
    s = _scan_arrow(src, chunk, data, bytes_per_token) or _scan_python(src, chunk, data, bytes_per_token)
    s.digest = _chunk_digest(data)
    return s


def _scan_python(src: SourceSpec, chunk: JsonlChunk, data: bytes, bytes_per_token: float) -> _Scan:
    lines, codes, nbs, ests, texts, notes, error = [], [], [], [], [], [], None
    rows = _jsonl_rows(src, chunk.path, chunk.rel, io.BytesIO(data), chunk.first_line, 0)
    while True:
        try:
            lineno, row = next(rows)
        except StopIteration:
            break
        except SourceError as e:
            error = e
            break
        reason, what, text, nb, est = _classify(row, src, bytes_per_token)
        if reason in UNREADABLE:
            notes.append((len(lines), reason, what))
        lines.append(lineno)
        codes.append(_CODE[reason])
        nbs.append(nb)
        ests.append(est)
        texts.append(text)
    return _Scan(np.array(lines, np.int64), np.array(codes, np.int8), np.array(nbs, np.int64),
                 np.array(ests, np.int64), texts, notes, error)


def _object_lines(data: bytes, first_line: int) -> Optional[np.ndarray]:
    """Line numbers of the non-blank lines (as bytes.strip() sees them) when each is one object at most
    _MAX_DEPTH deep, from "{" to "}"; else None (a BOM, a top-level null, which pyarrow reads badly)."""
    a = np.frombuffer(data, np.uint8)
    cut = np.flatnonzero(a == ord("\n"))
    starts, ends = np.r_[0, cut + 1], np.r_[cut, len(a)]  # each line without its newline
    full = ends > starts
    plain = np.zeros(len(starts), bool)
    plain[full] = (a[starts[full]] == ord("{")) & (a[ends[full] - 1] == ord("}"))
    blank = ~full
    for k in np.flatnonzero(full & ~plain).tolist():  # spaces or CRs around, a blank line, or no object
        s = data[starts[k]: ends[k]].strip()
        if s and (s[:1] != b"{" or s[-1:] != b"}"):
            return None
        blank[k] = not s
    opens = np.flatnonzero((a | 0x20) == ord("{"))  # "{" or "[" (0x7B, 0x5B: they differ in bit 5 only)
    deep = np.searchsorted(opens, ends) - np.searchsorted(opens, starts) > _MAX_DEPTH
    if any(_nesting(data[starts[k]: ends[k]]) > _MAX_DEPTH for k in np.flatnonzero(deep).tolist()):
        return None  # pyarrow's parser recurses: a few thousand levels overflow the stack
    return first_line + np.flatnonzero(~blank)


def _parse_arrow(src: SourceSpec, chunk: JsonlChunk, data: bytes) -> Optional[tuple[np.ndarray, pa.Array]]:
    """(line number, text field as read) of every row, parsed in C++; None when the chunk is not plainly
    well formed, or pyarrow's reading of it may differ from json.loads'."""
    if not src.text_field:
        return None
    lines = _object_lines(data, chunk.first_line)
    if lines is None:
        return None
    try:
        # pyarrow's JSON reader does not check UTF-8: a row that does not decode is json.loads' to count
        pa.LargeStringArray.from_buffers(1, pa.py_buffer(np.array([0, len(data)], np.int64)),
                                         pa.py_buffer(data)).validate(full=True)
        t = _read_json(data)
    except Exception:  # noqa: BLE001 - any parse problem: the exact reading names it
        return None
    if t.num_rows != len(lines) or src.text_field not in t.column_names:
        return None
    col = t.column(src.text_field)
    if col.type != pa.string() or col.null_count:
        return None
    return lines, col.combine_chunks()


def _read_json(data: bytes) -> pa.Table:
    opts = pj.ReadOptions(use_threads=False, block_size=len(data) + 1)  # one block: the whole chunk
    return pj.read_json(io.BytesIO(data), read_options=opts)


def _read_arrow(src: SourceSpec, data: bytes) -> pa.Array:
    """The text field of every row of a chunk `_parse_arrow` read before (the same bytes): its reading,
    without the checks that found the chunk plainly well formed."""
    return _read_json(data).column(src.text_field).combine_chunks()


def _scan_arrow(src: SourceSpec, chunk: JsonlChunk, data: bytes, bytes_per_token: float) -> Optional[_Scan]:
    """The chunk parsed and classified in C++ (`_classify`, over arrays), or None (`_parse_arrow`)."""
    parsed = _parse_arrow(src, chunk, data)
    if parsed is None:
        return None
    lines, text = parsed[0], _strip(parsed[1])
    nb = np.asarray(pc.binary_length(text), np.int64)
    chars = np.asarray(pc.utf8_length(text), np.int64)
    ctrl = np.asarray(pc.count_substring_regex(text, _CONTROL_RE2), np.int64)
    nul = np.zeros(len(lines), np.int64)  # NUL is a control character: counted only where there are any
    some = np.flatnonzero(ctrl)
    if len(some):
        nul[some] = np.asarray(pc.count_substring(text.take(pa.array(some)), "\x00"), np.int64)
    too_many = ctrl > np.maximum(CONTROL_ALLOWED, CONTROL_SHARE_MAX * chars)
    codes = np.select([chars < src.min_doc_chars, nul > 0, too_many, chars > src.max_doc_chars],
                      [_CODE[EMPTY], _CODE[BINARY], _CODE[CONTROL_CHARS], _CODE[TOO_LONG]], 0).astype(np.int8)
    est = np.where(codes == 0, _estimate(nb, bytes_per_token), 0)
    notes = [(int(i), BINARY, f"{nul[i]} NUL characters") if codes[i] == _CODE[BINARY] else
             (int(i), CONTROL_CHARS,
              f"{ctrl[i]} of {chars[i]} characters are control or replacement characters")
             for i in np.flatnonzero((codes == _CODE[BINARY]) | (codes == _CODE[CONTROL_CHARS]))]
    return _Scan(lines, codes, nb, est, text, notes, arrow=True)


def _estimate(nb: np.ndarray, bytes_per_token: float) -> np.ndarray:
    """max(1, round(nb / bytes_per_token)) per row, as `_classify` computes it (both round half to even)."""
    return np.maximum(1, np.rint(nb / bytes_per_token)).astype(np.int64)


def _strip(text: pa.Array) -> pa.Array:
    """str.strip() of every string."""
    space, arrow_same = _whitespace()
    if arrow_same:
        return pc.utf8_trim_whitespace(text)
    # pyarrow's trim with a character set is slow: only where an end is white space
    ends = pc.or_(pc.is_in(pc.utf8_slice_codeunits(text, 0, 1), pa.array(list(space))),
                  pc.is_in(pc.utf8_slice_codeunits(text, -1, sys.maxsize), pa.array(list(space))))
    if not pc.any(ends).as_py():
        return text
    return pc.replace_with_mask(text, ends, pc.utf8_trim(text.filter(ends), characters=space))


@functools.lru_cache(maxsize=1)
def _whitespace() -> tuple[str, bool]:
    """(what str.strip() strips, whether pyarrow's utf8_trim_whitespace strips exactly that), checked once
    per process over the code points up to U+3000 (the last white space) and a few format characters
    once counted as space (stages/sources/test_sources.py checks every code point)."""
    cps = np.r_[0:0x3001, 0xFEFF]
    chars = cps.astype("<u4").tobytes().decode("utf-32-le")
    space = "".join(filter(str.isspace, chars))
    widths = 1 + (cps >= 0x80) + (cps >= 0x800)
    arr = pa.StringArray.from_buffers(len(cps), pa.py_buffer(np.r_[0, np.cumsum(widths)].astype(np.int32)),
                                      pa.py_buffer(chars.encode("utf-8")))
    gone = np.asarray(pc.utf8_length(pc.utf8_trim_whitespace(arr))) == 0
    return space, cps[gone].astype("<u4").tobytes().decode("utf-32-le") == space


def _nesting(line: bytes) -> int:
    """The deepest nesting of objects and arrays in a JSON line (at least what a parser reaches)."""
    a = np.frombuffer(_JSON_STRING.sub(b"", line), np.uint8)
    opens = (a == ord("{")) | (a == ord("["))
    return int(np.max(np.cumsum(opens.astype(np.int64) - ((a == ord("}")) | (a == ord("]")))), initial=0))


@dataclass
class _ChunkPlan:
    """Pass 1 of one chunk: what `plan_sample` keeps of its rows."""

    chunk: JsonlChunk
    codes: np.ndarray  # per row read
    nb: np.ndarray
    est: np.ndarray
    keys: np.ndarray  # uint64 sample key per candidate
    notes: list  # (row, origin, reason, what): the first 20 unreadable rows and the first 20 undecodable
    error: Optional[SourceError]
    digest: bytes
    cand_lines: np.ndarray  # line number per candidate
    arrow: bool  # parsed by pyarrow (`_Scan.arrow`)
    reused: bool = False  # read from its keyed record (`_stored_plan`), not scanned


def _plan_chunk(src: SourceSpec, seed: int, bytes_per_token: float, chunk: JsonlChunk, storage=None) -> _ChunkPlan:
    """Pass 1 of one chunk; with `storage`, the plan filed for the same bytes, place in the file (name, first
    line), source fields, seed, bytes per token and code when there is one (`_stored_plan`), else computed and
    filed: a rebuild after new lines are appended to a source reads only the new chunks' rows again."""
    data = chunk.read()
    digest = _chunk_digest(data) if storage is not None else b""
    key = _plan_key(src, seed, bytes_per_token, chunk, digest) if storage is not None else None
    if key is not None and (got := _stored_plan(storage, key, chunk, digest)) is not None:
        return got
    s = _scan(src, chunk, bytes_per_token, data)
    cand = s.lines[s.codes == 0]
    keys = np.array([_sample_key(seed, doc_id(src.name, f"{chunk.rel}:{n}")) for n in cand.tolist()],
                    np.uint64)
    undecodable = [n for n in s.notes if n[1] == UNDECODABLE][:20]
    notes = sorted(set(s.notes[:20]) | set(undecodable))
    plan = _ChunkPlan(chunk, s.codes, s.nb, s.est, keys,
                      [(r, f"{chunk.rel}:{s.lines[r]}", reason, what) for r, reason, what in notes], s.error,
                      s.digest, cand, s.arrow)
    if key is not None and plan.error is None:
        _file_plan(storage, key, plan)
    return plan


CHUNK_PLAN_ASSET = "raw_chunk_plan"  # keyed records of pass 1 per JSONL chunk (core/objects.py)


def _plan_key(src: SourceSpec, seed: int, bytes_per_token: float, chunk: JsonlChunk, digest: bytes) -> str:
    """What a chunk's pass 1 is a function of: its bytes, its file's name within the source and first line
    (doc ids name lines), the source fields raw reads, the seed, bytes per token and this module's code
    (with what it imports); not where the file is."""
    fields = hashlib.sha256(source_fields_read(src).encode()).hexdigest()
    return keys.artifact_key(CHUNK_PLAN_ASSET, imports.source_version(__name__)[:16], {
        "bytes": digest.hex(), "source": src.name, "file": chunk.rel, "first_line": str(chunk.first_line),
        "fields": fields, "seed": str(seed), "bytes_per_token": repr(float(bytes_per_token))})


_PLAN_ARRAYS = ("codes", "nb", "est", "keys", "cand_lines")


def _file_plan(storage, key: str, plan: _ChunkPlan) -> None:
    """File a chunk's pass 1 as one blob (npz: the arrays, the notes and how it parsed) under its key."""
    buf = io.BytesIO()
    np.savez(buf, **{f: getattr(plan, f) for f in _PLAN_ARRAYS},
             meta=np.frombuffer(json.dumps({"notes": plan.notes, "arrow": plan.arrow}).encode(), np.uint8))
    data = buf.getvalue()
    work = layout.RAW_CHUNK_PLAN.format(key=key)
    try:
        storage.write_bytes(work, data)
        objects.stash(storage, CHUNK_PLAN_ASSET, key, {work: hashlib.sha256(data).hexdigest()},
                      input_keys={"bytes": plan.digest.hex()}, code_version=None, run_id="", dagster=None)
    except OSError:  # a cache beside the source's read: the next read scans the chunk again
        pass
    finally:
        storage.delete(work)


def _stored_plan(storage, key: str, chunk: JsonlChunk, digest: bytes) -> Optional[_ChunkPlan]:
    """The chunk's filed pass 1, or None (none filed; a blob missing or changed since: removed with its
    record, so the scan files it again)."""
    store = storage.store
    sha = data = None
    try:
        rec = objects.read_keyed(storage, CHUNK_PLAN_ASSET, key)
        if rec is None:
            return None
        (sha,) = rec["outputs"].values()
        data = store.read_bytes(objects.object_key(sha))
        if hashlib.sha256(data).hexdigest() != sha:
            raise ValueError("changed")
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {f: z[f] for f in _PLAN_ARRAYS}
            meta = json.loads(z["meta"].tobytes())
    except (OSError, ValueError, KeyError, TypeError):
        if sha is not None and data is not None:
            store.delete(objects.object_key(sha))
        store.delete(objects.keyed_key(CHUNK_PLAN_ASSET, key))
        return None
    return _ChunkPlan(chunk, arrays["codes"], arrays["nb"], arrays["est"], arrays["keys"],
                      [tuple(n) for n in meta["notes"]], None, digest, arrays["cand_lines"], bool(meta["arrow"]),
                      reused=True)


def _plan_jsonl(spec, src: SourceSpec, bytes_per_token: float, limit_tokens: float,
                out: SourceSample, eng: Engine,
                progress: Optional[Callable[[int, int], None]] = None, storage=None) -> tuple[list, list, list, list]:
    """Pass 1 over chunks: (sample keys, n_bytes, est_tokens) of the candidates, and per chunk read
    (chunk, rows read, the candidates' rows in it), counting into `out` exactly as `_candidates` does."""
    keys, nbs, ests, chunks, seen = [], [], [], [], 0
    fn = functools.partial(_plan_chunk, src, spec.seed, bytes_per_token, storage=storage)
    for p in map_chunks(fn, jsonl_chunks(spec, src), eng):
        n, cand = len(p.codes), np.flatnonzero(p.codes == 0)
        reach = np.flatnonzero(seen + np.cumsum(p.est[cand]) >= limit_tokens)
        if len(reach):  # the limit is reached inside this chunk: its rows end at that candidate
            n, cand = int(cand[reach[0]]) + 1, cand[: reach[0] + 1]
        elif p.error is not None:
            raise p.error
        out.rows_read += n
        out.bytes_read += int(p.nb[:n].sum())
        for code, count in enumerate(np.bincount(p.codes[:n], minlength=len(_REASONS))[1:], 1):
            out.dropped[_REASONS[code]] += int(count)
        for r, origin, reason, what in p.notes:
            if r < n:
                out.note(origin, reason, what)
        keys.append(p.keys[: len(cand)])
        nbs.append(p.nb[cand])
        ests.append(p.est[cand])
        out.chunks_reused = (out.chunks_reused[0] + p.reused, out.chunks_reused[1] + 1)
        chunks.append((p.chunk, n, cand.astype(np.int32), p.digest,
                       (p.cand_lines[: len(cand)] - p.chunk.first_line).astype(np.int32), p.arrow))
        seen += int(p.est[cand].sum())
        if progress:
            progress(out.rows_read, out.bytes_read)
        if len(reach):
            out.exhausted = False
            break
    return keys, nbs, ests, chunks


@dataclass(frozen=True)
class _DocsJob:
    """Pass 2 of one chunk: the rows kept (by position among the chunk's rows, and their lines), the
    first numbered `first_row`, the digest of the bytes pass 1 chose them from and how it parsed them."""

    chunk: JsonlChunk
    first_row: int
    kept: np.ndarray  # int32 row positions, ascending
    digest: bytes  # of the chunk's bytes in pass 1
    kept_lines: np.ndarray  # int32 line number of each kept row, less chunk.first_line
    arrow: bool  # pass 1 parsed the chunk with pyarrow (`_parse_arrow` found it plainly well formed)


def _docs_chunk(src: SourceSpec, bytes_per_token: float, job: _DocsJob) -> pa.Table:
    """The kept documents of one chunk, as `iter_sample` writes them (pass 1 chose them, so only they
    are stripped and measured again). Same bytes as pass 1 (the digest), so the same rows, codes and
    sample keys, and the same reading (pyarrow's where pass 1 found the chunk plainly well formed, so
    its checks are not run again): nothing of pass 1's choice needs checking again."""
    data, kept = job.chunk.read(), job.kept
    if _chunk_digest(data) != job.digest:
        c = job.chunk
        raise SourceError(f"source {src.name}: the source changed while it was read ({c.path}, bytes "
                          f"{c.start:,}-{c.stop:,}, lines from {c.first_line:,})")
    if job.arrow:
        text = _strip(_read_arrow(src, data).take(pa.array(kept)))
        nb = np.asarray(pc.binary_length(text), np.int64)
        est = _estimate(nb, bytes_per_token)
    else:
        s = _scan_python(src, job.chunk, data, bytes_per_token)
        text, nb, est = pa.array([s.texts[i] for i in kept], pa.large_string()), s.nb[kept], s.est[kept]
    origins = [f"{job.chunk.rel}:{n}" for n in (job.kept_lines.astype(np.int64) + job.chunk.first_line).tolist()]
    ids = [doc_id(src.name, o) for o in origins]
    columns = [pa.array(ids, pa.string()), pa.array([src.name] * len(ids), pa.string()),
               text.cast(pa.large_string()), pa.array(job.first_row + kept.astype(np.int64)),
               pa.array(origins, pa.string()), pa.array(nb), pc.utf8_length(text).cast(pa.int64()), pa.array(est)]
    if src.url_field:
        columns.append(pa.array(_urls(src, job, data), pa.string()))
    return pa.Table.from_arrays(columns, schema=doc_schema(src))


def _urls(src: SourceSpec, job: "_DocsJob", data: bytes) -> list:
    """The kept rows' `url_field` values (None when absent or null); a value that is not a string fails
    naming file, line and field."""
    lines, out = data.split(b"\n"), []
    for k in job.kept_lines.tolist():
        v = json.loads(lines[k]).get(src.url_field)
        if v is not None and not isinstance(v, str):
            raise SourceError(f"source {src.name}: {job.chunk.rel}:{job.chunk.first_line + k}: field "
                              f"{src.url_field!r} holds {type(v).__name__}, expected a string (a URL)")
        out.append(v)
    return out


def _sample_jsonl(spec, src: SourceSpec, bytes_per_token: float, plan: "SamplePlan",
                  eng: Engine) -> Iterator[pa.Table]:
    """Pass 2 over chunks: the kept documents of each chunk holding any, in source order."""
    def jobs() -> Iterator[_DocsJob]:
        row, at = 0, 0
        for chunk, rows, cand, digest, cand_lines, arrow in plan.chunks:
            keep = plan.keep[at: at + len(cand)]
            if keep.any():
                yield _DocsJob(chunk, row, cand[keep], digest, cand_lines[keep], arrow)
            row, at = row + rows, at + len(cand)

    return map_chunks(functools.partial(_docs_chunk, src, bytes_per_token), jobs(), eng)


def _row_groups(tables: Iterable[pa.Table], group_rows: int, group_bytes: int) -> Iterator[pa.Table]:
    """The documents of `tables` cut into row groups as `iter_sample` cuts them (each one contiguous)."""
    parts, rows, size = [], 0, 0
    for t in tables:
        start = 0
        for i, nb in enumerate(t.column("n_bytes").to_pylist()):
            if rows and (rows >= group_rows or size + nb > group_bytes):
                parts.append(t.slice(start, i - start))
                yield pa.concat_tables(parts).combine_chunks()
                parts, rows, size, start = [], 0, 0, i
                pa.default_memory_pool().release_unused()  # mimalloc's thread caches (tables.iter_batches)
            rows, size = rows + 1, size + nb
        parts.append(t.slice(start))
    if rows:
        yield pa.concat_tables(parts).combine_chunks()


_SERIAL = Engine(num_cpus=1)


@dataclass
class SamplePlan:
    """Pass 1 of a sample: which candidates (rows passing the filters, by ordinal) are kept."""

    keep: np.ndarray  # bool per candidate ordinal
    keys: np.ndarray  # uint64 sample key per candidate ordinal (checked again in pass 2; JSONL: its chunks' digests)
    # JSONL, per chunk read in pass 1: (chunk, rows read, candidate rows: int32, digest, candidate lines
    # less the chunk's first: int32, parsed by pyarrow)
    chunks: Optional[list] = None


def plan_sample(spec, src: SourceSpec, bytes_per_token: float, budget_tokens: int,
                progress: Optional[Callable[[int, int], None]] = None,
                eng: Optional[Engine] = None, storage=None) -> tuple[SourceSample, SamplePlan]:
    """Pass 1: read the source keeping 24 bytes per candidate (sample key, n_bytes, est_tokens), and
    choose the sample: the prefix of the candidates ordered by a hash of (seed, doc_id) that first
    reaches `budget_tokens`. Counts, drops and the kept documents' sums go into the SourceSample.
    A JSONL source is read in chunks on `eng` (default: one at a time, in this thread); with `storage`, each
    chunk's pass 1 is filed in its keyed store and reused for the same bytes (`_plan_chunk`)."""
    out = SourceSample()
    limit = SCAN_FACTOR * budget_tokens
    chunks = None
    if isinstance(src.loader, LocalJsonl):
        keys, nbs, ests, chunks = _plan_jsonl(spec, src, bytes_per_token, limit, out, eng or _SERIAL,
                                              progress, storage)
        key, nb_a, est_a = (np.concatenate(a) if a else np.zeros(0, t)
                            for a, t in ((keys, np.uint64), (nbs, np.int64), (ests, np.int64)))
    else:
        k, n, e = array.array("Q"), array.array("q"), array.array("q")
        for row, _text, nb, est in _candidates(spec, src, bytes_per_token, limit, out, progress):
            k.append(_sample_key(spec.seed, doc_id(src.name, row.id_key)))
            n.append(nb)
            e.append(est)
        key, nb_a, est_a = (np.frombuffer(a, t) if a else np.zeros(0, t)
                            for a, t in ((k, np.uint64), (n, np.int64), (e, np.int64)))
    if out.rows_read == 0:
        raise SourceError(f"source {src.name}: the source is empty (no rows were read)")
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
    return out, SamplePlan(keep, key.copy(), chunks)


def iter_sample(spec, src: SourceSpec, bytes_per_token: float, plan: SamplePlan,
                group_rows: Optional[int] = None, group_bytes: Optional[int] = None,
                eng: Optional[Engine] = None) -> Iterator[pa.Table]:
    """Pass 2: read the source again and yield the kept documents in source order, as tables of at most
    `group_rows` rows and (past the first document) `group_bytes` of text: one Parquet row group each."""
    group_rows, group_bytes = group_rows or ROW_GROUP_ROWS, group_bytes or ROW_GROUP_BYTES
    if plan.chunks is not None:
        empty = True
        docs = _sample_jsonl(spec, src, bytes_per_token, plan, eng or _SERIAL)
        for t in _row_groups(docs, group_rows, group_bytes):
            empty = False
            yield t
        if empty:
            yield doc_schema(src).empty_table()
        return
    scratch = SourceSample()
    last = int(np.flatnonzero(plan.keep)[-1]) if plan.keep.any() else -1
    schema = doc_schema(src)  # DOC_SCHEMA, then `url` for a source with URLs (Parquet / hub url_field, text files)
    cols: dict[str, list] = {c: [] for c in schema.names}
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
            yield pa.Table.from_pydict(cols, schema=schema)
            cols, size = {c: [] for c in schema.names}, 0
        values = (did, src.name, text, row.row_index, row.origin, nb, len(text), est, row.url)
        for c, v in zip(schema.names, values):
            cols[c].append(v)
        size += nb
    if cols["doc_id"] or last < 0:
        yield pa.Table.from_pydict(cols, schema=schema)


def sample_source(
    spec,
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


def source_fields_read(src) -> str:
    """The fields of a source's section that raw/<source> reads, as JSON (for its code_version): not its
    `filters:` (document_filters judges by them), its licence and rationale (metadata and description),
    its priority (dedup's tie-break), nor `split` for the loaders that ignore it (every one but hub)."""
    unread = {"filters", "license", "rationale", "priority", *(() if src.loader.kind == "hub" else ("split",))}
    return src.model_dump_json(exclude=unread)


def tokenizer_fields_read(tok) -> dict:
    """The tokenizer fields `bytes_per_token` (so raw/<source>) reads: the kind, where an existing one is,
    and the fallback; not the trained tokenizer's settings (vocab_size, sample, special tokens), which only
    the tokenizer asset reads. For raw's code_version: keep in step with `bytes_per_token`."""
    where = {"file": {"path": tok.path}, "hub": {"repo_id": tok.repo_id, "revision": tok.revision}}.get(tok.kind, {})
    return {"kind": tok.kind, **where, "bytes_per_token_fallback": tok.bytes_per_token_fallback}


def bytes_per_token(spec, texts: list[str], storage=None) -> tuple[float, str]:
    """Estimated bytes per token and how it was obtained (recorded beside every estimate). With `storage`,
    a measurement is filed in its keyed store and reused (`_measured_tokens`)."""
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
        sample = texts[:HEAD_ROWS]
        n_bytes = sum(len(s.encode("utf-8")) for s in sample)
        n_tok = _measured_tokens(storage, path, sample, n_bytes)
        if n_tok:
            return n_bytes / n_tok, f"measured with {tok.kind} tokenizer on {len(sample)} documents"
    return tok.bytes_per_token_fallback, (
        f"fallback {tok.bytes_per_token_fallback} B/token (the tokenizer is trained after dedup)"
        if tok.kind == "train" else f"fallback {tok.bytes_per_token_fallback} B/token"
    )


BYTES_PER_TOKEN_ASSET = "raw_bytes_per_token"  # keyed records of the head's token count (core/objects.py)


def bytes_per_token_key(tokenizer_path: str, sample: list[str]) -> str:
    """The artifact key of a head's token count: the tokenizer file's bytes, the texts in order and the code
    that counts (this module and what it imports, the `tokenizers` version); never where any of them is."""
    import tokenizers

    code = f"{imports.source_version(__name__)[:16]}+tokenizers-{tokenizers.__version__}"
    texts = hashlib.sha256(b"".join(hashlib.blake2b(t.encode("utf-8"), digest_size=16).digest()
                                    for t in sample)).hexdigest()
    return keys.artifact_key(BYTES_PER_TOKEN_ASSET, code, {"tokenizer": keys.sha256_file(tokenizer_path),
                                                           "texts": texts, "documents": str(len(sample))})


def _measured_tokens(storage, path: str, sample: list[str], n_bytes: int) -> int:
    """Tokens of `sample` with the tokenizer file at `path`: the count a keyed record of the same tokenizer
    bytes, texts and code holds (a rebuild reads the same head of a source again), else encoded (and filed)."""
    key = bytes_per_token_key(path, sample) if storage is not None else None
    if key is not None:
        try:
            rec = objects.read_keyed(storage, BYTES_PER_TOKEN_ASSET, key)
        except (OSError, ValueError):
            rec = None
        value = (rec or {}).get("value") or {}
        if value.get("bytes") == n_bytes and value.get("documents") == len(sample) and \
                isinstance(value.get("tokens"), int) and value["tokens"] > 0:
            return value["tokens"]
    from tokenizers import Tokenizer

    n_tok = sum(len(e.ids) for e in Tokenizer.from_file(path).encode_batch_fast(sample, add_special_tokens=False))
    if key is not None and n_tok:
        try:
            objects.write_keyed(storage, BYTES_PER_TOKEN_ASSET, key, {}, input_keys={}, code_version=None,
                                run_id="", dagster=None,
                                value={"tokens": n_tok, "bytes": n_bytes, "documents": len(sample)})
        except OSError:  # a cache beside the estimate
            pass
    return n_tok


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
    minimum_tokens: int  # what it must reach (unique budget before the validation split, over its filters keep_share)

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
        return DOC_SCHEMA  # plus `url` when the source has URLs (doc_schema)

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


def read_raw_source(storage, spec, name: str, progress: Optional[Callable[[int, int], None]] = None,
                    eng: Optional[Engine] = None) -> RawSource:
    """Sample source `name` to its raw budget; write its documents parquet and stats.json (a JSONL
    source read in chunks on `eng`, default one at a time in this thread: the same bytes on any)."""
    src = spec.source(name)
    # A tokenizer trained later cannot measure anything yet: read a sample head only for one that exists.
    head = ([] if spec.tokenizer.kind == "train" else
            [r.text for r in itertools.islice(iter_rows(spec, src), HEAD_ROWS) if r.text])
    bpt, how = bytes_per_token(spec, head, storage)
    got, plan = plan_sample(spec, src, bpt, spec.raw_budget(name), progress, eng, storage)  # pass 1: choose
    if progress:
        progress(got.rows_read, got.bytes_read)
    n_chars: list[np.ndarray] = []
    mods = Modifiers.for_source(spec, name)
    counts = ModifierCounts(mods) if mods else None
    written = [0, 0]  # bytes, estimated tokens

    def groups() -> Iterator[pa.Table]:  # pass 2: the chosen documents, one row group at a time
        for t in iter_sample(spec, src, bpt, plan, eng=eng):
            if mods:
                t = modify_table(t, mods, bpt, counts)
                written[0] += pc.sum(t.column("n_bytes")).as_py() or 0
                written[1] += pc.sum(t.column("est_tokens")).as_py() or 0
            n_chars.append(np.asarray(t.column("n_chars"), np.int64))
            yield t

    tables.write_parquet_groups(storage, layout.RAW_DOCS.format(source=name), doc_schema(src), groups())
    got.n_chars = np.concatenate(n_chars) if n_chars else np.zeros(0, np.int64)
    if counts:  # the sample was chosen on the text as read; its totals are those of the text written
        got.modifiers = counts.stats()
        got.text_bytes, got.est_tokens = written
    raw = RawSource(name, got, bpt, how, spec.raw_budget(name), spec.raw_minimum_tokens(name))
    storage.write_text(layout.RAW_STATS.format(source=name), json.dumps(raw.stats(), indent=1, sort_keys=True))
    return raw
