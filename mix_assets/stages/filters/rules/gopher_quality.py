"""Gopher quality rules: Rae et al. 2021, "Scaling Language Models: Methods, Analysis & Insights from Training
Gopher", arXiv 2112.11446, App. A.1.1, as datatrove 0.10.1 implements them
(`datatrove/pipeline/filters/gopher_quality_filter.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import polars as pl

from mix_assets.stages.filters.kernels import PUNCTUATION_SET, char_class, gt, lt, ratio, splitlines
from mix_assets.stages.filters.rule import Batch, Filter


_NON_SYMBOL = f"[^{char_class(PUNCTUATION_SET)}]"  # a word with any character outside PUNCTUATION_SET


@dataclass(frozen=True)
class GopherQualityFilter:
    """Gopher quality rules (arXiv 2112.11446 A.1.1): datatrove GopherQualityFilter,
    pipeline/filters/gopher_quality_filter.py, same defaults. None switches a rule off."""

    enabled: bool = True
    min_doc_words: Optional[int] = 50  # words with a non-punctuation character
    max_doc_words: Optional[int] = 100_000
    min_avg_word_length: Optional[float] = 3
    max_avg_word_length: Optional[float] = 10
    max_symbol_word_ratio: Optional[float] = 0.1  # count("#") and count("..."/"…") per token, separately
    max_bullet_lines_ratio: Optional[float] = 0.9  # lines starting with • or -
    max_ellipsis_lines_ratio: Optional[float] = 0.3  # lines ending with ... or …
    min_alpha_words_ratio: Optional[float] = 0.8  # datatrove's `max_non_alpha_words_ratio`
    min_stop_words: Optional[int] = 2  # distinct stop words present (case-sensitive)
    stop_words: tuple = ("the", "be", "to", "of", "and", "that", "have", "with")


def _gopher_quality(text: pl.Series, toks: pl.Series, cfg: GopherQualityFilter, values: bool = False) -> pl.DataFrame:
    t, w = pl.col("text"), pl.col("toks")
    lines = splitlines(t)
    nonsym_len = w.list.eval(pl.element().filter(pl.element().str.contains(_NON_SYMBOL)).str.len_chars())
    n_words = w.list.len()
    stats = pl.DataFrame({"text": text, "toks": toks}).select(
        n_words=n_words,
        n_nonsym=nonsym_len.list.len(),
        avg_len=nonsym_len.list.mean(),
        hash_ratio=ratio(t.str.count_matches("#", literal=True), n_words),
        ellipsis_ratio=ratio(t.str.count_matches("...", literal=True) + t.str.count_matches("…", literal=True), n_words),
        bullet=lines.list.eval(pl.element().str.contains(r"^\s*[•\-]")).list.mean(),
        end_ellipsis=lines.list.eval(pl.element().str.contains(r"(?:\.\.\.|…)\s*$")).list.mean(),
        alpha=w.list.eval(pl.element().str.contains(r"\p{L}")).list.mean(),
        stop=w.list.eval(pl.element().filter(pl.element().is_in(list(cfg.stop_words))).unique()).list.len(),
    )
    c = pl.col
    if values:
        return stats.select(*(c(col).cast(pl.Float64).alias(rule) for rule, col in _QUALITY_STATS.items()))
    return stats.select(
        lt(c("n_nonsym"), cfg.min_doc_words).alias("gopher_quality:min_doc_words"),
        gt(c("n_nonsym"), cfg.max_doc_words).alias("gopher_quality:max_doc_words"),
        lt(c("avg_len"), cfg.min_avg_word_length).alias("gopher_quality:min_avg_word_length"),
        gt(c("avg_len"), cfg.max_avg_word_length).alias("gopher_quality:max_avg_word_length"),
        gt(c("hash_ratio"), cfg.max_symbol_word_ratio).alias("gopher_quality:hash_ratio"),
        gt(c("ellipsis_ratio"), cfg.max_symbol_word_ratio).alias("gopher_quality:ellipsis_ratio"),
        gt(c("bullet"), cfg.max_bullet_lines_ratio).alias("gopher_quality:bullet_lines"),
        gt(c("end_ellipsis"), cfg.max_ellipsis_lines_ratio).alias("gopher_quality:ellipsis_lines"),
        lt(c("alpha"), cfg.min_alpha_words_ratio).alias("gopher_quality:alpha_words"),
        lt(c("stop"), cfg.min_stop_words).alias("gopher_quality:stop_words"),
    )


# the statistic each Gopher quality rule compares with its threshold
_QUALITY_STATS = {
    "gopher_quality:min_doc_words": "n_nonsym", "gopher_quality:max_doc_words": "n_nonsym",
    "gopher_quality:min_avg_word_length": "avg_len", "gopher_quality:max_avg_word_length": "avg_len",
    "gopher_quality:hash_ratio": "hash_ratio", "gopher_quality:ellipsis_ratio": "ellipsis_ratio",
    "gopher_quality:bullet_lines": "bullet", "gopher_quality:ellipsis_lines": "end_ellipsis",
    "gopher_quality:alpha_words": "alpha", "gopher_quality:stop_words": "stop",
}


def rule(batch: Batch, cfg: GopherQualityFilter) -> pl.DataFrame:
    return _gopher_quality(batch.text, batch.tokens(), cfg)


def values(batch: Batch, cfg: GopherQualityFilter) -> pl.DataFrame:
    return _gopher_quality(batch.text, batch.tokens(), cfg, values=True)


def thresholds(cfg: GopherQualityFilter) -> dict:
    return {"gopher_quality:min_doc_words": ("<", cfg.min_doc_words),
            "gopher_quality:max_doc_words": (">", cfg.max_doc_words),
            "gopher_quality:min_avg_word_length": ("<", cfg.min_avg_word_length),
            "gopher_quality:max_avg_word_length": (">", cfg.max_avg_word_length),
            "gopher_quality:hash_ratio": (">", cfg.max_symbol_word_ratio),
            "gopher_quality:ellipsis_ratio": (">", cfg.max_symbol_word_ratio),
            "gopher_quality:bullet_lines": (">", cfg.max_bullet_lines_ratio),
            "gopher_quality:ellipsis_lines": (">", cfg.max_ellipsis_lines_ratio),
            "gopher_quality:alpha_words": ("<", cfg.min_alpha_words_ratio),
            "gopher_quality:stop_words": ("<", cfg.min_stop_words)}


FILTER = Filter("gopher_quality", GopherQualityFilter, rule, values, thresholds,
                length_rules=("gopher_quality:min_doc_words",))
