"""The audit stage's config section: the eval registry (`EvalTask`s, never their test splits), the n-gram
contamination rules and the fuzzy advisory (stages/audit/fuzzy.py)."""

from __future__ import annotations

import re
from typing import Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from mix_assets.core.spec import NAME, Strict
from mix_assets.stages.sources.config import HubDataset

# Split names that must never be opened by the audit (lm-eval and HF spellings).
TEST_SPLIT_ALIASES = frozenset({"test", "tests", "testing", "eval_test", "test_set"})


def is_test_split(split: str) -> bool:
    """True for any spelling of a test split: an alias, a `test` word inside the name
    ("test_matched", "validation+test", "test[:10%]"), whatever the case."""
    for part in str(split).lower().split("+"):
        base = part.split("[", 1)[0].strip()
        if base in TEST_SPLIT_ALIASES or {"test", "tests", "testing"} & set(re.split(r"[^a-z0-9]+", base)):
            return True
    return False


def path_names_test_split(path: str) -> Optional[str]:
    """The first component of a relative path (file names included) that is or aliases a test split."""
    for part in re.split(r"[/\\]", str(path)):
        if part not in ("", ".", "..") and is_test_split(part):
            return part
    return None


def split_name_problem(split: str) -> Optional[str]:
    """Why `split` cannot name a split (a path or empty), or None."""
    if not str(split).strip():
        return "is empty"
    if re.search(r"[/\\\x00]", split) or ".." in split:
        return "looks like a path (a separator or '..')"
    return None


class EvalTask(Strict):
    """One evaluation task the model will be scored on; only its non-test splits are read.

    Reference items of a row (see `stages/audit/evals.py`): the string fields joined in order form the stem;
    each string of a list-valued field (`endings`, `question.choices.text`) gives one item = stem +
    that string, as the harness presents context + continuation; without list fields the stem is
    the one item.
    """

    name: str = Field(pattern=NAME)
    dataset: Union[HubDataset, "LocalEvalFiles"] = Field(discriminator="kind")
    scored_split: str  # the split the harness scores (documented per task; may be validation or test)
    audit_splits: list[str] = Field(min_length=1)  # non-test splits whose text is audited
    fields: list[str] = Field(min_length=1)  # dotted paths, e.g. "question.stem", "question.choices.text"
    min_rows: int = Field(1, ge=1)  # the audit fails when fewer rows than this were read
    note: str = ""  # where the scored split was verified

    @field_validator("audit_splits")
    @classmethod
    def _no_test(cls, v: list[str]) -> list[str]:
        bad = [s for s in v if is_test_split(s)]
        if bad:
            raise ValueError(f"test splits are never audited (found {bad}); use validation/dev splits")
        return v

    @field_validator("fields")
    @classmethod
    def _dotted(cls, v: list[str]) -> list[str]:
        bad = [f for f in v if not re.fullmatch(r"[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*", f)]
        if bad:
            raise ValueError(f"fields are dotted paths like 'question.choices.text', got {bad}")
        return v

    @model_validator(mode="after")
    def _audit_inputs(self) -> "EvalTask":
        for s in self.audit_splits:
            why = split_name_problem(s)
            if why:
                raise ValueError(f"eval task {self.name!r}: audit_splits entry {s!r} {why}; give a split name")
        dupes = sorted({s for s in self.audit_splits if self.audit_splits.count(s) > 1})
        if dupes:  # each entry is read once: a repeat would count its rows twice toward min_rows
            raise ValueError(f"eval task {self.name!r}: audit_splits lists {dupes} more than once")
        for pattern in getattr(self.dataset, "data_files", None) or []:
            part = path_names_test_split(pattern)
            if part:
                raise ValueError(f"eval task {self.name!r}: dataset.data_files entry {pattern!r} names a test "
                                 f"split ({part!r}); the audit reads validation/dev files only")
        return self


class LocalEvalFiles(Strict):
    """A local folder holding `<split>.jsonl` files."""

    kind: Literal["local"] = "local"
    path: str  # folder, relative to the config file's directory


EvalTask.model_rebuild()


class FuzzyAuditSpec(Strict):
    """The fuzzy contamination advisory (stages/audit/fuzzy.py): near copies of eval items, WARN only, excludes nothing.

    Advisory settings change no published byte, so the review config (mix_config.json) leaves them out."""

    enabled: bool = True
    threshold: float = Field(0.6, gt=0, le=1)  # exact Jaccard of an item with its best equal-length window
    shingle: int = Field(2, ge=1, le=5)  # words per shingle: one-word edits found in items of >= 5*shingle-1 words
    num_perm: int = Field(32, ge=4, le=256)  # MinHash permutations per item (candidate generation only)


class AuditSpec(Strict):
    """Contamination audit against the eval registry."""

    ngram: int = Field(13, ge=4)  # n-gram length in normalised words
    tasks: list[EvalTask] = []  # the eval registry
    mask_contaminated: bool = True  # drop contaminated documents (off only to prove the gate fires)
    source_rate_warn: float = Field(0.02, gt=0, le=1)  # WARN when a source's contaminated share exceeds
    # An item shorter than `ngram` words is matched as one n-gram over all its words (whole-item
    # rule) when it has at least this many words; shorter ones are too generic to attribute and are
    # counted as `short_items_unmatched` in the denominators.
    short_item_min_words: int = Field(8, ge=1)
    scrub_words: int = Field(8, ge=4)  # audit_artifact_scrubbed: runs of this many item words are a leak
    threads: int = Field(2, ge=1, exclude=True)  # scan threads; operational, not published (as packing.threads)
    fuzzy: FuzzyAuditSpec = FuzzyAuditSpec()  # items shorter than short_item_min_words are not matched either

    @model_validator(mode="after")
    def _short_rule(self) -> "AuditSpec":
        if self.short_item_min_words > self.ngram:
            raise ValueError("short_item_min_words must not exceed ngram")
        return self
