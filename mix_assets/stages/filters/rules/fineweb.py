"""FineWeb rules: Penedo et al. 2024, arXiv 2406.17557 section 3.6, as datatrove 0.10.1's `FineWebQualityFilter`
has them (`pipeline/filters/fineweb_quality_filter.py`: duplicated-line character share 0.01, and the 0.3
newlines-per-word rule the paper does not list)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import polars as pl

from mix_assets.stages.filters.kernels import TERMINAL_PUNCTUATION, char_class, dups, gt, lt, ratio
from mix_assets.stages.filters.rule import Batch, Filter


_TERMINAL_END = f"[{char_class(TERMINAL_PUNCTUATION)}]$"


@dataclass(frozen=True)
class FineWebFilter:
    """FineWeb rules (arXiv 2406.17557 3.6): datatrove FineWebQualityFilter,
    pipeline/filters/fineweb_quality_filter.py, same defaults. None switches a rule off."""

    enabled: bool = True
    line_punct_thr: Optional[float] = 0.12  # share of lines ending in terminal punctuation, below -> drop
    line_punct_exclude_zero: bool = False
    short_line_thr: Optional[float] = 0.67
    short_line_length: int = 30
    char_duplicates_ratio: Optional[float] = 0.01  # the paper's text says 0.1
    new_line_ratio: Optional[float] = 0.3


def _fineweb(text: pl.Series, cfg: FineWebFilter, words: pl.Series, values: bool = False) -> pl.DataFrame:
    """`words`: `TOKEN_RE` matches per document (`word_counts`); `values`: the figures the rules compare."""
    t = pl.col("text")
    lines = t.str.split("\n").list.eval(pl.element().filter(pl.element().str.strip_chars() != ""))
    nl = lines.list.len()
    _, dup_chars = dups(lines)
    st = pl.DataFrame({"text": text, "words": words}).select(
        nl=nl,
        punct=lines.list.eval(pl.element().str.contains(_TERMINAL_END)).list.mean(),
        short=lines.list.eval(pl.element().str.len_chars() <= cfg.short_line_length).list.mean(),
        dup=ratio(dup_chars, t.str.len_chars() - t.str.count_matches("\n", literal=True)),
        newline=ratio(t.str.count_matches("\n", literal=True), pl.col("words")),
    )
    c = pl.col
    if values:
        return st.select(pl.lit(None, pl.Float64).alias("fineweb:empty"),
                         *(c(col).cast(pl.Float64).alias(f"fineweb:{rule}") for rule, col in (
                             ("line_punct_ratio", "punct"), ("short_line_ratio", "short"),
                             ("char_dup_ratio", "dup"), ("list_ratio", "newline"))))
    punct = lt(c("punct"), cfg.line_punct_thr)
    if cfg.line_punct_exclude_zero:
        punct = punct & (c("punct") != 0)
    return st.select(
        (c("nl") == 0).alias("fineweb:empty"),
        punct.alias("fineweb:line_punct_ratio"),
        gt(c("short"), cfg.short_line_thr).alias("fineweb:short_line_ratio"),
        gt(c("dup"), cfg.char_duplicates_ratio).alias("fineweb:char_dup_ratio"),
        gt(c("newline"), cfg.new_line_ratio).alias("fineweb:list_ratio"),
    )


def rule(batch: Batch, cfg: FineWebFilter) -> pl.DataFrame:
    return _fineweb(batch.text, cfg, batch.word_counts())


def values(batch: Batch, cfg: FineWebFilter) -> pl.DataFrame:
    return _fineweb(batch.text, cfg, batch.word_counts(), values=True)


def thresholds(cfg: FineWebFilter) -> dict:
    return {"fineweb:empty": ("", None), "fineweb:line_punct_ratio": ("<", cfg.line_punct_thr),
            "fineweb:short_line_ratio": (">", cfg.short_line_thr),
            "fineweb:char_dup_ratio": (">", cfg.char_duplicates_ratio),
            "fineweb:list_ratio": (">", cfg.new_line_ratio)}


FILTER = Filter("fineweb", FineWebFilter, rule, values, thresholds)
