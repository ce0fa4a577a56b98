"""The eval registry loader: reference items from the NON-TEST splits of each eval task.

Rules this module enforces (seed guide, section 5):
- a split named or aliased `test` is refused before a single byte is read, with an error naming the
  task (never the data); so is a file whose path in the dataset (any folder or file name, symlinks
  resolved) names a test split, and a split name that is a path;
- errors name the task, file, row and field, never a cell's text: anything raised here may end up
  in a run log or a published report. `load_task_items` re-raises every error of a library
  (datasets, pyarrow, json) as an EvalDataError that keeps only the exception's type name.

Reference items of a row: the string fields, in config order, joined into the stem; each string of
a list-valued field (`endings`, `question.choices.text`) gives one item = stem + that string (the
context + continuation the harness scores); a row without list fields gives one item, the stem.
A row whose audited fields are all null or blank gives nothing and is counted in `empty_rows`, not
in `rows` (so it cannot make up `min_rows`).

JSON files (local `<split>.jsonl`, and `.json`/`.jsonl` files of hub datasets) are parsed here,
one line at a time; other hub formats (Parquet, CSV) are read by `datasets`, one file at a time.
"""

from __future__ import annotations

import bz2
import contextlib
import copy
import dataclasses
import gzip
import itertools
import json
import logging
import lzma
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator, Optional, Sequence

from mix_assets.core import keys, transport
from mix_assets.stages.audit.config import (EvalTask, LocalEvalFiles, is_test_split, path_names_test_split,
                                            split_name_problem)


class TestSplitRefused(ValueError):
    """An audit was asked to read a test split."""

    __test__ = False  # not a pytest class


class EvalDataError(ValueError):
    """An eval file that cannot be read as the registry says; the message names file, row and field."""


def refuse_test_splits(task: EvalTask, splits: Sequence[str] | None = None) -> list[str]:
    """The splits to read, or TestSplitRefused naming the task if any is a test split or a path."""
    splits = list(task.audit_splits if splits is None else splits)
    bad = [s for s in splits if is_test_split(s)]
    if bad:
        raise TestSplitRefused(
            f"eval task {task.name!r}: refusing to read test split(s) {bad}; "
            "the audit reads validation/dev splits only"
        )
    for s in splits:
        why = split_name_problem(s)
        if why:
            raise TestSplitRefused(f"eval task {task.name!r}: split name {s!r} {why}; refused")
    return splits


@dataclass
class TaskItems:
    """What one task contributes to the registry. `items` stays in memory, it is never written."""

    task: str
    rows: int = 0  # rows of the audit splits with at least one non-empty audited string
    empty_rows: int = 0  # rows whose audited fields were all null or blank (not in `rows`)
    strings: int = 0  # non-empty strings extracted from the configured fields
    empty_fields: int = 0  # field values that were null or blank
    rows_per_split: dict[str, int] = field(default_factory=dict)  # `rows`, per split
    items: list[str] = field(default_factory=list)


@dataclass
class _Pos:
    """Where the loader is, for error messages: names only, never a value."""

    task: str
    file: str = ""
    row: Optional[int] = None  # the row being read, when known
    after: int = 0  # else: rows of `file` read before the failure
    field: Optional[str] = None  # the audited field being extracted
    note: str = ""  # e.g. the types the dataset card declares for the audited fields

    def __str__(self) -> str:
        where = f"eval task {self.task!r}" + (f" {self.file}" if self.file else "")
        if self.row is not None:
            return f"{where} row {self.row}"
        return f"{where} (row unknown, after row {self.after})" if self.file else where


def _failure(pos: _Pos, e: BaseException) -> str:
    """The message for a library error: where it happened and its type, never its text."""
    kind = type(e).__name__
    hint = {"RecursionError": "nested too deeply", "UnicodeDecodeError": "not valid UTF-8",
            "UnicodeEncodeError": "holds text that is not valid Unicode"}.get(kind, "cannot be read")
    fld = f" field {pos.field!r}" if pos.field else ""
    note = f"; {pos.note}" if pos.note else ""
    return f"{pos}{fld}: {hint} ({kind}{note}); the error's own message is not shown, it may quote the data"


@contextlib.contextmanager
def _safe_errors(pos: _Pos, hub: bool) -> Iterator[None]:
    """Re-raise any error of a library as EvalDataError naming task, file, row and field, not its text.

    `datasets` logs a failed file together with the error's text (a pyarrow cast error quotes the
    cell), so its loggers and Python warnings are silenced while eval files are read.
    """
    if hub:
        import datasets  # noqa: F401 - its import sets its loggers' level: import first, then silence
    lg = logging.getLogger("datasets")
    level = lg.level
    lg.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    except (TestSplitRefused, EvalDataError):
        raise
    except Exception as e:  # noqa: BLE001 - every error is re-raised without its text or its chain
        raise EvalDataError(_failure(pos, e)) from None
    finally:
        lg.setLevel(level)


# -- which files: refused before any is opened ---------------------------------------------------


@dataclass(frozen=True)
class _File:
    split: str
    shown: str  # how errors name it: a local path, or <repo>@<revision>:<path in the repo>
    url: str  # what is opened: a local path or a hub URL (hf://...)


def _symlinked_parts(path: Path) -> tuple[str, ...]:
    """The components a symlink brings into `path`: its target's, below what it shares with `path`."""
    lex = Path(os.path.abspath(path))
    real = lex.resolve()
    if real == lex:
        return ()
    return real.relative_to(os.path.commonpath([lex, real])).parts


def _refuse_test_path(task: EvalTask, what: str, parts: Sequence[str]) -> None:
    part = path_names_test_split("/".join(parts))
    if part:
        raise TestSplitRefused(
            f"eval task {task.name!r}: {what} names a test split ({part!r}, symlinks resolved); "
            "refused before reading it: the audit reads validation/dev files only"
        )


def _local_files(task: EvalTask, spec_dir: Path, splits: Sequence[str]) -> list[_File]:
    ds = task.dataset
    assert isinstance(ds, LocalEvalFiles)
    written = Path(ds.path)
    folder = written if written.is_absolute() else spec_dir / written
    # As written in the config (just the folder's name when absolute), and what a symlink points to.
    shown_parts = written.parts[-1:] if written.is_absolute() else written.parts
    _refuse_test_path(task, f"eval folder {folder}", (*shown_parts, *_symlinked_parts(folder)))
    out = []
    for split in splits:
        path = folder / f"{split}.jsonl"
        # A symlink `validation.jsonl -> test.jsonl` must not smuggle the test split in.
        _refuse_test_path(task, str(path), (path.name, *_symlinked_parts(path)))
        if not path.is_file():
            raise EvalDataError(f"eval task {task.name!r}: split {split!r} expected at {path}, file not found")
        out.append(_File(split, str(path), str(path.resolve())))
    return out


def _hub_files(task: EvalTask, spec_dir: Path, splits: Sequence[str]) -> tuple[Any, list[_File]]:
    """The `datasets` builder and the data files of each split, without reading any of them."""
    ds = task.dataset
    assert ds.kind == "hub"
    import datasets

    repo = ds.repo_id
    local = spec_dir / repo
    if local.is_dir():
        _refuse_test_path(task, f"dataset folder {local}", (local.name, *_symlinked_parts(local)))
        repo = str(local.resolve())
    try:  # resolves the data files (listing, the dataset card), opens none of them
        builder = datasets.load_dataset_builder(repo, name=ds.config_name, revision=ds.revision,
                                                data_files=ds.data_files)
    except Exception as e:  # noqa: BLE001 - the message of a loader error is not shown
        kind = type(e).__name__
    else:
        kind = None
    if kind:
        raise EvalDataError(f"eval task {task.name!r}: cannot open {ds.repo_id}@{ds.revision} ({kind})") from None
    have = {str(k): v for k, v in (builder.config.data_files or {}).items()}
    out = []
    for split in splits:
        if not have.get(split):
            raise EvalDataError(f"eval task {task.name!r}: {ds.repo_id}@{ds.revision} has no data files for "
                                f"split {split!r} (its splits: {sorted(have)})")
        for url in have[split]:
            hub = transport.scheme(url) == transport.HUB
            rel = transport.split_hub_url(url).subdir if hub else os.path.relpath(url, repo)
            shown = f"{ds.repo_id}@{ds.revision}:{rel}"
            parts = Path(rel).parts + (() if hub else _symlinked_parts(Path(url)))
            _refuse_test_path(task, f"{shown} (split {split!r})", parts)
            out.append(_File(split, shown, url))
    return builder, out


def _plan(task: EvalTask, spec_dir: Path, splits: Sequence[str]) -> tuple[Any, list[_File]]:
    """The files of all `splits` (builder None for a local folder); every refusal happens here."""
    refuse_test_splits(task, splits)
    if isinstance(task.dataset, LocalEvalFiles):
        return None, _local_files(task, spec_dir, splits)
    return _hub_files(task, spec_dir, splits)


# -- reading -------------------------------------------------------------------------------------


_JSON_FILE = re.compile(r"\.(jsonl|json|ndjson)(?:\.(gz|bz2|xz))?$", re.IGNORECASE)
_DECOMPRESS = {"gz": gzip.open, "bz2": bz2.open, "xz": lzma.open}


def _parse(data: bytes, pos: _Pos) -> Any:
    try:
        return json.loads(data)
    except json.JSONDecodeError as e:  # e.msg is a fixed phrase ("Expecting value"), never the line
        why = f"not valid JSON ({e.msg} at column {e.colno})"
    except UnicodeDecodeError:
        why = "not valid UTF-8"
    except RecursionError:
        why = "not valid JSON (nested too deeply)"
    except ValueError:  # e.g. an integer longer than sys.get_int_max_str_digits()
        why = "not valid JSON (a number out of range)"
    raise EvalDataError(f"{pos}: {why}") from None


def _json_rows(f: _File, pos: _Pos, builder: Any) -> Iterator[tuple[int, dict]]:
    """Rows of a JSON Lines file, or of a JSON file holding one array of objects."""
    with contextlib.ExitStack() as stack:
        if builder is None:
            fh: IO[bytes] = stack.enter_context(open(f.url, "rb"))
        else:
            from datasets import DownloadConfig
            from datasets.utils.file_utils import xopen

            conf = DownloadConfig(token=builder.token, storage_options=builder.storage_options)
            fh = stack.enter_context(xopen(f.url, "rb", download_config=conf))
        m = _JSON_FILE.search(f.url)
        if m and m.group(2):
            fh = stack.enter_context(_DECOMPRESS[m.group(2).lower()](fh))
        first = fh.readline()
        if first.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):  # one JSON array of objects
            data = _parse(first + fh.read(), pos)
            numbered: Iterator[tuple[int, Any]] = enumerate(data if isinstance(data, list) else [data], 1)
        else:
            numbered = enumerate(itertools.chain([first], fh), 1)
        for n, item in numbered:
            pos.row = n
            if isinstance(item, bytes):
                if not item.strip():
                    continue
                item = _parse(item, pos)
            if not isinstance(item, dict):
                raise EvalDataError(f"{pos}: expected a JSON object, got {type(item).__name__}")
            yield n, item


def _declared_types(task: EvalTask, features: Any) -> str:
    """What the dataset card declares for the audited fields, when that is not text."""
    out = []
    for f in task.fields:
        feat = (features or {}).get(f.split(".")[0])
        dtype = getattr(feat, "dtype", None)
        if isinstance(dtype, str) and dtype not in ("string", "large_string"):
            out.append(f"{f.split('.')[0]}: {dtype}")
    return f"the dataset's features declare {', '.join(out)}" if out else ""


def _datasets_rows(task: EvalTask, f: _File, pos: _Pos, builder: Any) -> Iterator[tuple[int, dict]]:
    """Rows of one data file read by `datasets` (Parquet, CSV ...), cast to the card's features."""
    from datasets.data_files import DataFilesDict, DataFilesList

    files = builder.config.data_files[f.split]
    i = list(files).index(f.url)
    meta = files.origin_metadata[i : i + 1]
    # A builder restricted to this one file: `datasets` would otherwise read the schema of the first
    # file of the first split listed (maybe a test split) to infer features.
    one = copy.copy(builder)
    one.config = dataclasses.replace(builder.config, data_files=DataFilesDict({f.split: DataFilesList([f.url], meta)}))
    it = iter(one.as_streaming_dataset(split=f.split))
    pos.note = _declared_types(task, one.info.features)
    n = 0
    while True:
        pos.row, pos.after = None, n
        try:
            row = next(it)
        except StopIteration:
            return
        n += 1
        pos.row = n
        yield n, row


def _rows(task: EvalTask, builder: Any, files: Sequence[_File], pos: _Pos) -> Iterator[tuple[_File, int, dict]]:
    for f in files:
        pos.file, pos.row, pos.after, pos.field, pos.note = f.shown, None, 0, None, ""
        if builder is None or _JSON_FILE.search(f.url):
            rows = _json_rows(f, pos, builder)
        else:
            rows = _datasets_rows(task, f, pos, builder)
        for n, row in rows:
            yield f, n, row


def iter_rows(task: EvalTask, spec_dir: str | os.PathLike, split: str) -> Iterator[tuple[str, int, dict]]:
    """(file, row number, row) for one audit split; refusals happen in this call, before any I/O."""
    pos, hub = _Pos(task.name), task.dataset.kind == "hub"
    with _safe_errors(pos, hub):
        builder, files = _plan(task, Path(spec_dir), [split])

    def gen() -> Iterator[tuple[str, int, dict]]:
        with _safe_errors(pos, hub):
            for f, n, row in _rows(task, builder, files, pos):
                yield f.shown, n, row

    return gen()


# -- field extraction ----------------------------------------------------------------------------


_MISSING = object()
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def extract_field(row: Any, path: str, where: Any, missing_ok: bool = False) -> str | list[str] | None:
    """Value of a dotted path; lists on the way are mapped (`question.choices.text` -> list[str]).

    `missing_ok`: an absent key reads as null (as `datasets` fills the columns a row lacks).
    """
    if "." not in path and isinstance(row, dict):  # the common case: a top-level text field
        v = row.get(path, _MISSING)
        if isinstance(v, str) and (v.isascii() or not _SURROGATE.search(v)):
            return v

    def walk(v: Any, parts: list[str]) -> Any:
        if isinstance(v, list):
            return [walk(x, parts) for x in v]
        if not parts:
            return v
        if not isinstance(v, dict):
            raise EvalDataError(f"{where}: field {path!r}: expected an object at {parts[0]!r}, got {type(v).__name__}")
        nxt = v.get(parts[0], _MISSING)
        if nxt is _MISSING:
            if missing_ok:
                return None
            raise EvalDataError(f"{where}: field {path!r} is missing (no key {parts[0]!r})")
        return walk(nxt, parts[1:])

    def flat(v: Any) -> Any:
        if isinstance(v, list):
            out: list = []
            for x in v:
                x = flat(x)
                out.extend(x if isinstance(x, list) else [x])
            return out
        if v is None:
            return v
        if isinstance(v, str):
            if not v.isascii() and _SURROGATE.search(v):  # (isascii: a flag lookup)
                raise EvalDataError(f"{where}: field {path!r} holds a lone surrogate (not valid Unicode text)")
            return v
        if isinstance(v, bool) or isinstance(v, dict):
            raise EvalDataError(f"{where}: field {path!r} holds a {type(v).__name__}, expected text")
        if isinstance(v, (int, float)):
            return str(v)
        raise EvalDataError(f"{where}: field {path!r} holds a {type(v).__name__}, expected text")

    return flat(walk(row, path.split(".")))


def row_items(task: EvalTask, row: dict, pos: _Pos, out: TaskItems, missing_ok: bool = False) -> int:
    """Append the reference items of one row to `out`; the number of non-empty strings it had."""
    stem: list[str] = []
    choices: list[str] = []
    for f in task.fields:
        pos.field = f
        v = extract_field(row, f, pos, missing_ok)
        values = v if isinstance(v, list) else [v]
        for s in values:
            if s is None or not s.strip():
                out.empty_fields += 1
                continue
            out.strings += 1
            (choices if isinstance(v, list) else stem).append(s.strip())
    pos.field = None
    head = " ".join(stem)
    if choices:
        out.items.extend(f"{head} {c}" if head else c for c in choices)
    elif head:
        out.items.append(head)
    return len(stem) + len(choices)


def load_task_items(task: EvalTask, spec_dir: str | os.PathLike) -> TaskItems:
    """Rows and reference items of a task's audit splits.

    Every test split, and every file whose path names one, is refused before any file is read;
    any error is an EvalDataError or TestSplitRefused naming task, file, row and field, never text.
    """
    pos, hub = _Pos(task.name), task.dataset.kind == "hub"
    out = TaskItems(task=task.name)
    with _safe_errors(pos, hub):
        splits = refuse_test_splits(task)
        dupes = sorted({s for s in splits if splits.count(s) > 1})
        if dupes:
            raise EvalDataError(f"eval task {task.name!r}: audit_splits lists {dupes} more than once")
        builder, files = _plan(task, Path(spec_dir), splits)
        out.rows_per_split = {s: 0 for s in splits}
        for f, _, row in _rows(task, builder, files, pos):
            if row_items(task, row, pos, out, missing_ok=hub):
                out.rows += 1
                out.rows_per_split[f.split] += 1
            else:
                out.empty_rows += 1
    return out


def root_keys(tasks: Sequence[EvalTask], spec_dir: str | os.PathLike) -> dict[str, str]:
    """eval_registry's input keys (core/keys.py): per task, a fingerprint of the local files it reads (a
    local folder's `<split>.jsonl` of its audit splits; a hub repo that is a local folder: its files but
    any whose path names a test split, which is never opened, not even to hash it); a remote hub task
    reads what its repo id, revision and data files in the config name."""
    out = {}
    for task in tasks:
        ds = task.dataset
        if isinstance(ds, LocalEvalFiles):  # the files the registry reads, after the same refusals
            files = [f.url for f in _local_files(task, Path(spec_dir), refuse_test_splits(task))]
        elif (Path(spec_dir) / ds.repo_id).is_dir():
            repo = Path(spec_dir) / ds.repo_id
            files = [f for f in keys.folder_files(repo)
                     if not path_names_test_split(os.path.relpath(f, repo))
                     and not path_names_test_split("/".join(_symlinked_parts(Path(f))))]
        else:
            continue
        out[f"evals/{task.name}"] = keys.files_fingerprint(files)
    return out
