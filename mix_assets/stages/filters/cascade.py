"""The filter cascade over a batch of texts (polars), no Dagster: the filters are registry.py's, in its order,
each one's rules in rules/<name>.py, the kernels they share in kernels.py.

`apply_filters(texts, config)` runs every enabled filter of `config` on every document (the default
registry: sanity -> Gopher repetition -> Gopher quality -> C4 -> FineWeb, the order of datatrove's
examples/fineweb.py@05194d39, which runs C4 with filter_no_terminal_punct off; the default here is the
class default, on). A document's reason is its first failing rule (`<filter>:<rule>`, an open set of
strings), and a line modifier hands its rewritten text to the filters after it (C4 in mode "modify" to
FineWeb), as in the pipeline. `measure` gives the figures the rules compare with their thresholds, for the
documents the UI explains.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from mix_assets.stages.filters import registry
from mix_assets.stages.filters.rule import Batch, Filter

__all__ = ["FilterConfig", "FilterResult", "Measure", "apply_filters", "measure", "thresholds"]


class FilterConfig:
    """The cascade's settings: every filter registered when it is built (registry order), each with its
    configuration; a filter not given keeps its defaults. Immutable: `replace` and `only` build new ones."""

    def __init__(self, **given):
        known = registry.filters()
        unknown = sorted(set(given) - {f.name for f in known})
        if unknown:
            raise TypeError(f"unknown filter(s) {unknown}; known: {[f.name for f in known]}")
        object.__setattr__(self, "_items", tuple((f, given[f.name] if f.name in given else f.config()) for f in known))

    @classmethod
    def only(cls, *names: str) -> "FilterConfig":
        """Defaults with every filter but `names` switched off."""
        known = registry.names()
        unknown = set(names) - set(known)
        if unknown:
            raise ValueError(f"unknown filter(s) {sorted(unknown)}; known: {list(known)}")
        return cls(**{f.name: f.config(enabled=f.name in names) for f in registry.filters()})

    def replace(self, **changes) -> "FilterConfig":
        """A copy with the named filters' configurations replaced."""
        return FilterConfig(**{**{f.name: cfg for f, cfg in self}, **changes})

    def __iter__(self) -> Iterator[tuple[Filter, object]]:
        return iter(self._items)

    def __getattr__(self, name: str):
        for f, cfg in self.__dict__.get("_items", ()):
            if f.name == name:
                return cfg
        raise AttributeError(f"FilterConfig has no filter {name!r}")

    def __setattr__(self, name, value):
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __eq__(self, other) -> bool:
        return isinstance(other, FilterConfig) and self._items == other._items

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return "FilterConfig(" + ", ".join(f"{f.name}={cfg!r}" for f, cfg in self) + ")"

    def describe(self) -> dict:
        """{filter: its settings} as plain values (what a decisions file records)."""
        return {f.name: dataclasses.asdict(cfg) for f, cfg in self}


@dataclass
class FilterResult:
    keep: np.ndarray  # bool per document
    reason: list  # first failing rule "<filter>:<rule>", None where kept
    texts: pa.Array  # the texts after the line modifiers (C4 in mode "modify"), as input elsewhere
    failed: dict  # "<filter>:<rule>" -> bool per document, every rule evaluated on its own
    filter_reason: dict  # filter name -> first failing rule of that filter per document (None = passes)
    stats: dict  # "<filter>:<rule>" -> {"failed_documents", "first_failure_documents"}
    seconds: dict  # filter name -> wall seconds (and "gopher_repetition:python_scan", inside it)
    python_docs: int = 0  # documents that needed the per-document duplicate n-gram scan


def _first_reason(df: pl.DataFrame, rules: Sequence[str]) -> pl.Series:
    expr = pl.lit(None, dtype=pl.String)
    for r in reversed(rules):
        expr = pl.when(pl.col(r)).then(pl.lit(r)).otherwise(expr)
    return df.select(expr.alias("r")).to_series()


def _as_series(texts) -> pl.Series:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if isinstance(texts, pa.Array):
        s = pl.from_arrow(texts)
        return s.cast(pl.String)
    return pl.Series("text", list(texts), dtype=pl.String)


# -- the cascade ---------------------------------------------------------------------------------------


def apply_filters(texts, config: Optional[FilterConfig] = None) -> FilterResult:
    """Evaluate every enabled filter of `config` (default: every registered one) on every document."""
    config = FilterConfig() if config is None else config
    batch = Batch(_as_series(texts).fill_null(""))
    n = len(batch.text)
    frames, seconds = [], batch.seconds
    for f, cfg in config:
        if cfg.enabled:
            t0 = time.perf_counter()
            frames.append(f.rule(batch, cfg))
            seconds[f.name] = time.perf_counter() - t0
    failed_df = pl.concat(frames, how="horizontal") if frames else pl.DataFrame(height=n)
    rules = failed_df.columns
    reason = _first_reason(failed_df, rules) if rules else pl.Series([None] * n, dtype=pl.String)
    filter_reason = {}
    for f, _ in config:
        own = [r for r in rules if r.split(":")[0] == f.name]
        if own:
            filter_reason[f.name] = _first_reason(failed_df, own).to_list()
    failed = {r: failed_df[r].to_numpy() for r in rules}
    stats = {r: {"failed_documents": int(failed[r].sum()), "first_failure_documents": int((reason == r).sum())}
             for r in rules}
    return FilterResult(
        keep=reason.is_null().to_numpy(), reason=reason.to_list(), texts=batch.text.to_arrow(),
        failed=failed, filter_reason=filter_reason, stats=stats, seconds=seconds, python_docs=batch.python_docs)


# -- why a document was rejected: the measured figure beside its threshold -------------------------------


@dataclass(frozen=True)
class Measure:
    """A rule's measured figure on one document beside its threshold (`op`: the rule fires when
    `value op threshold`); value None for a yes/no rule (a NUL byte, lorem ipsum, a curly bracket)."""

    rule: str
    value: Optional[float]
    op: str
    threshold: Optional[float]

    def __str__(self) -> str:
        if self.value is None or self.threshold is None:
            return self.rule
        return f"{self.rule} {compared(self.value, self.threshold, self.op)}"


def compared(value: float, threshold: float, op: str) -> str:
    """`0.78 < 0.80`: integers as integers, other figures with as many decimals (2 to 6) as it takes for
    the two to read differently."""
    if float(value).is_integer() and float(threshold).is_integer():
        return f"{int(value):,} {op} {int(threshold):,}"
    for d in range(2, 7):
        a, b = f"{value:,.{d}f}", f"{threshold:,.{d}f}"
        if a != b:
            break
    return f"{a} {op} {b}"


def thresholds(config: FilterConfig) -> dict[str, tuple[str, Optional[float]]]:
    """rule -> (op, threshold) of every rule of `config` (None where the threshold is per document)."""
    return {rule: thr for f, cfg in config for rule, thr in f.thresholds(cfg).items()}


LIMIT = ":limit"  # a `values` column `<rule>:limit`: that rule's threshold per document


def measure(texts, config: Optional[FilterConfig] = None) -> list[dict[str, Measure]]:
    """Per document, every enabled rule's `Measure`: the figure `apply_filters` compares with the rule's
    threshold, computed the same way (on the text the filters before it handed on). For the few documents
    the UI explains: the repetition figures are exact per document, not the bulk pass's bounds."""
    config = FilterConfig() if config is None else config
    batch = Batch(_as_series(texts).fill_null(""))
    frames = [f.values(batch, cfg) for f, cfg in config if cfg.enabled]
    if not frames:
        return [{} for _ in range(len(batch.text))]
    vals = pl.concat(frames, how="horizontal").to_dicts()
    thr = thresholds(config)
    out = []
    for row in vals:
        limits = {r[:-len(LIMIT)]: row.pop(r) for r in [r for r in row if r.endswith(LIMIT)]}
        out.append({r: Measure(r, v, thr[r][0], limits[r] if r in limits else thr[r][1]) for r, v in row.items()})
    return out
