"""A toy document filter, registered only by the tests (test_toy_filter.py): the whole of what adding a filter
takes, beside its one registry line. It rejects shouting (a document whose letters are mostly capitals) and
documents of very few words (a length rule, so the brevity WARN watches it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import polars as pl

from mix_assets.stages.filters.kernels import gt, lt, ratio
from mix_assets.stages.filters.rule import Batch, Filter


@dataclass(frozen=True)
class ToyFilter:
    """The `filters.toy` section: its fields and defaults. None switches a rule off."""

    enabled: bool = True
    min_words: Optional[int] = 3  # fewer whitespace-separated words -> toy:few_words
    max_upper_share: Optional[float] = 0.5  # a larger share of capitals among the letters -> toy:shouting


def _figures(text: pl.Series) -> pl.DataFrame:
    t = pl.col("text")
    return pl.DataFrame({"text": text}).select(
        words=t.str.count_matches(r"\S+"),
        upper=ratio(t.str.count_matches(r"\p{Lu}"), t.str.count_matches(r"\p{L}")))


def rule(batch: Batch, cfg: ToyFilter) -> pl.DataFrame:
    """One bool column per rule, True where the document fails it, in the order the rules are tried."""
    c = pl.col
    return _figures(batch.text).select(lt(c("words"), cfg.min_words).alias("toy:few_words"),
                                       gt(c("upper"), cfg.max_upper_share).alias("toy:shouting"))


def values(batch: Batch, cfg: ToyFilter) -> pl.DataFrame:
    """The figure each rule compares with its threshold (what the UI shows beside a rejected sample)."""
    return _figures(batch.text).select(pl.col("words").cast(pl.Float64).alias("toy:few_words"),
                                       pl.col("upper").cast(pl.Float64).alias("toy:shouting"))


def thresholds(cfg: ToyFilter) -> dict:
    return {"toy:few_words": ("<", cfg.min_words), "toy:shouting": (">", cfg.max_upper_share)}


FILTER = Filter("toy", ToyFilter, rule, values, thresholds, length_rules=("toy:few_words",))
