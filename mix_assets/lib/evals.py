"""The eval registry loader: reference items from the NON-TEST splits of each eval task.

Rules this module enforces (seed guide, section 5):
- a split named or aliased `test` is refused before a single byte is read, with an error naming the
  task (never the data);
- errors name the task, file, row and field, never a cell's text: anything raised here may end up
  in a run log or a published report.

Reference items of a row: the string fields, in config order, joined into the stem; each string of
a list-valued field (`endings`, `question.choices.text`) gives one item = stem + that string (the
context + continuation the harness scores); a row without list fields gives one item, the stem.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from mix_assets.config import EvalTask, HubDataset, LocalEvalFiles, is_test_split


class TestSplitRefused(ValueError):
    """An audit was asked to read a test split."""

    __test__ = False  # not a pytest class


class EvalDataError(ValueError):
    """An eval file that cannot be read as the registry says; the message names file, row and field."""


def refuse_test_splits(task: EvalTask, splits: Sequence[str] | None = None) -> list[str]:
    """The splits to read, or TestSplitRefused naming the task if any is a test split."""
    splits = list(task.audit_splits if splits is None else splits)
    bad = [s for s in splits if is_test_split(s)]
    if bad:
        raise TestSplitRefused(
            f"eval task {task.name!r}: refusing to read test split(s) {bad}; "
            "the audit reads validation/dev splits only"
        )
    return splits


@dataclass
class TaskItems:
    """What one task contributes to the registry. `items` stays in memory, it is never written."""

    task: str
    rows: int = 0  # rows read from the audit splits
    strings: int = 0  # non-empty strings extracted from the configured fields
    empty_fields: int = 0  # field values that were null or blank
    rows_per_split: dict[str, int] = field(default_factory=dict)
    items: list[str] = field(default_factory=list)


# -- reading -------------------------------------------------------------------------------------


def _local_rows(task: EvalTask, spec_dir: Path, split: str) -> Iterator[tuple[str, int, dict]]:
    ds = task.dataset
    assert isinstance(ds, LocalEvalFiles)
    folder = Path(ds.path) if Path(ds.path).is_absolute() else spec_dir / ds.path
    path = folder / f"{split}.jsonl"
    # A symlink `validation.jsonl -> test.jsonl` must not smuggle the test split in.
    real = path.resolve()
    if is_test_split(real.name.removesuffix(".jsonl")):
        raise TestSplitRefused(f"eval task {task.name!r}: {path} resolves to a test file ({real.name}); refused")
    if not path.is_file():
        raise EvalDataError(f"eval task {task.name!r}: split {split!r} expected at {path}, file not found")
    with open(real, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                # e.msg/e.pos only: the exception's str would not quote the line, but be explicit.
                raise EvalDataError(f"{path}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(row, dict):
                raise EvalDataError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            yield f"{path}", lineno, row


def _hub_rows(task: EvalTask, spec_dir: Path, split: str) -> Iterator[tuple[str, int, dict]]:
    ds = task.dataset
    assert isinstance(ds, HubDataset)
    import datasets

    repo = ds.repo_id
    if (spec_dir / repo).is_dir():
        repo = str((spec_dir / repo).resolve())
    # Streaming opens only the files of the requested split (a non-streaming load prepares every
    # split of the repo, test included).
    try:
        it = datasets.load_dataset(
            repo,
            name=ds.config_name,
            split=split,
            revision=ds.revision,
            data_files=ds.data_files,
            streaming=True,
        )
    except Exception as e:  # the message of a loader error carries paths, not cells
        raise EvalDataError(
            f"eval task {task.name!r}: cannot open {ds.repo_id}@{ds.revision} split {split!r} offline "
            f"({type(e).__name__})"
        ) from None
    origin = f"{ds.repo_id}@{ds.revision}:{split}"
    for i, row in enumerate(it, 1):
        yield origin, i, row


def iter_rows(task: EvalTask, spec_dir: str | os.PathLike, split: str) -> Iterator[tuple[str, int, dict]]:
    """(origin, row number, row) for one audit split; a test split is refused before any I/O."""
    refuse_test_splits(task, [split])
    spec_dir = Path(spec_dir)
    if isinstance(task.dataset, LocalEvalFiles):
        return _local_rows(task, spec_dir, split)
    return _hub_rows(task, spec_dir, split)


# -- field extraction ----------------------------------------------------------------------------


_MISSING = object()


def extract_field(row: Any, path: str, where: str) -> str | list[str] | None:
    """Value of a dotted path; lists on the way are mapped (`question.choices.text` -> list[str])."""

    def walk(v: Any, parts: list[str]) -> Any:
        if isinstance(v, list):
            return [walk(x, parts) for x in v]
        if not parts:
            return v
        if not isinstance(v, dict):
            raise EvalDataError(f"{where}: field {path!r}: expected an object at {parts[0]!r}, got {type(v).__name__}")
        nxt = v.get(parts[0], _MISSING)
        if nxt is _MISSING:
            raise EvalDataError(f"{where}: field {path!r} is missing (no key {parts[0]!r})")
        return walk(nxt, parts[1:])

    def flat(v: Any) -> Any:
        if isinstance(v, list):
            out: list = []
            for x in v:
                x = flat(x)
                out.extend(x if isinstance(x, list) else [x])
            return out
        if v is None or isinstance(v, str):
            return v
        if isinstance(v, bool) or isinstance(v, dict):
            raise EvalDataError(f"{where}: field {path!r} holds a {type(v).__name__}, expected text")
        if isinstance(v, (int, float)):
            return str(v)
        raise EvalDataError(f"{where}: field {path!r} holds a {type(v).__name__}, expected text")

    return flat(walk(row, path.split(".")))


def row_items(task: EvalTask, row: dict, where: str, out: TaskItems) -> None:
    """Append the reference items of one row to `out` and count its strings."""
    stem: list[str] = []
    choices: list[str] = []
    for f in task.fields:
        v = extract_field(row, f, where)
        values = v if isinstance(v, list) else [v]
        for s in values:
            if s is None or not s.strip():
                out.empty_fields += 1
                continue
            out.strings += 1
            (choices if isinstance(v, list) else stem).append(s.strip())
    head = " ".join(stem)
    if choices:
        out.items.extend(f"{head} {c}" if head else c for c in choices)
    elif head:
        out.items.append(head)


def load_task_items(task: EvalTask, spec_dir: str | os.PathLike) -> TaskItems:
    """Rows and reference items of a task's audit splits (all test splits refused up front)."""
    splits = refuse_test_splits(task)
    out = TaskItems(task=task.name)
    for split in splits:
        n = 0
        for origin, lineno, row in iter_rows(task, spec_dir, split):
            row_items(task, row, f"eval task {task.name!r} {origin} row {lineno}", out)
            n += 1
        out.rows_per_split[split] = n
        out.rows += n
    return out
