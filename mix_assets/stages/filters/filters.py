"""The filter cascade over a batch of texts (polars), no Dagster: each filter's rules are in rules/<name>.py,
the kernels they share in kernels.py.

`apply_filters(texts, config)` runs sanity -> Gopher repetition -> Gopher quality -> C4 -> FineWeb
(the order of datatrove's examples/fineweb.py@05194d39, which runs C4 with filter_no_terminal_punct
off; the default here is the class default, on). Every filter is evaluated on every document; the
document's reason is the first failing rule (`<filter>:<rule>`, an open set of strings), and the C4
line modifier hands its rewritten text to FineWeb, as in the pipeline. `measure` gives the figures the
rules compare with their thresholds, for the documents the UI explains.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Optional, Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from mix_assets.stages.filters.kernels import _tokens
from mix_assets.stages.filters.rules.sanity import SanityFilter, _sanity
from mix_assets.stages.filters.rules.gopher_quality import GopherQualityFilter, _gopher_quality
from mix_assets.stages.filters.rules.gopher_repetition import GopherRepetitionFilter, _gopher_repetition, _repetition_values
from mix_assets.stages.filters.rules.c4 import C4Filter, _c4
from mix_assets.stages.filters.rules.fineweb import FineWebFilter, _fineweb, _word_counts

__all__ = [
    "FilterConfig", "FilterResult", "apply_filters", "FILTER_ORDER",
]


@dataclass(frozen=True)
class FilterConfig:
    sanity: SanityFilter = field(default_factory=SanityFilter)
    gopher_repetition: GopherRepetitionFilter = field(default_factory=GopherRepetitionFilter)
    gopher_quality: GopherQualityFilter = field(default_factory=GopherQualityFilter)
    c4: C4Filter = field(default_factory=C4Filter)
    fineweb: FineWebFilter = field(default_factory=FineWebFilter)

    @classmethod
    def only(cls, *names: str) -> "FilterConfig":
        """Defaults with every filter but `names` switched off."""
        unknown = set(names) - set(FILTER_ORDER)
        if unknown:
            raise ValueError(f"unknown filter(s) {sorted(unknown)}; known: {list(FILTER_ORDER)}")
        return cls(**{f.name: f.default_factory(enabled=f.name in names) for f in fields(cls)})


FILTER_ORDER = ("sanity", "gopher_repetition", "gopher_quality", "c4", "fineweb")


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


def apply_filters(texts, config: FilterConfig = FilterConfig()) -> FilterResult:
    """Evaluate every enabled filter on every document of the batch (see the module docstring)."""
    text = _as_series(texts).fill_null("")
    n = len(text)
    frames, seconds, python_docs = [], {}, 0
    out_text = text
    toks = None
    for name in FILTER_ORDER:
        cfg = getattr(config, name)
        if not cfg.enabled:
            continue
        t0 = time.perf_counter()
        if name in ("gopher_quality", "gopher_repetition") and toks is None:
            toks = _tokens(text)
        if name == "sanity":
            frames.append(_sanity(text, cfg))
        elif name == "gopher_quality":
            frames.append(_gopher_quality(text, toks, cfg))
        elif name == "gopher_repetition":
            f, python_docs, seconds["gopher_repetition:python_scan"] = _gopher_repetition(text, toks, cfg)
            frames.append(f)
        elif name == "c4":
            f, rewritten = _c4(text, cfg)
            frames.append(f)
            if cfg.mode == "modify":
                c4_keep = ~f.select(pl.any_horizontal(pl.all())).to_series()
                out_text = pl.select(pl.when(c4_keep).then(rewritten).otherwise(text)).to_series()
        elif name == "fineweb":
            frames.append(_fineweb(out_text, cfg, _word_counts(out_text, text, toks)))
        seconds[name] = time.perf_counter() - t0
    failed_df = pl.concat(frames, how="horizontal") if frames else pl.DataFrame(height=n)
    rules = failed_df.columns
    reason = _first_reason(failed_df, rules) if rules else pl.Series([None] * n, dtype=pl.String)
    filter_reason = {}
    for name in FILTER_ORDER:
        own = [r for r in rules if r.split(":")[0] == name]
        if own:
            filter_reason[name] = _first_reason(failed_df, own).to_list()
    failed = {r: failed_df[r].to_numpy() for r in rules}
    stats = {r: {"failed_documents": int(failed[r].sum()), "first_failure_documents": int((reason == r).sum())}
             for r in rules}
    return FilterResult(
        keep=reason.is_null().to_numpy(), reason=reason.to_list(), texts=out_text.to_arrow(),
        failed=failed, filter_reason=filter_reason, stats=stats, seconds=seconds, python_docs=python_docs)


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
    """rule -> (op, threshold) of every rule of `config` (`sanity:control_chars`'s is per document)."""
    sa, gq, gr, c4, fw = (config.sanity, config.gopher_quality, config.gopher_repetition, config.c4, config.fineweb)
    out = {"sanity:empty": ("<", sa.min_chars), "sanity:binary": ("", None), "sanity:control_chars": (">", None),
           "sanity:too_long": (">", sa.max_chars),
           "gopher_quality:min_doc_words": ("<", gq.min_doc_words), "gopher_quality:max_doc_words": (">", gq.max_doc_words),
           "gopher_quality:min_avg_word_length": ("<", gq.min_avg_word_length),
           "gopher_quality:max_avg_word_length": (">", gq.max_avg_word_length),
           "gopher_quality:hash_ratio": (">", gq.max_symbol_word_ratio),
           "gopher_quality:ellipsis_ratio": (">", gq.max_symbol_word_ratio),
           "gopher_quality:bullet_lines": (">", gq.max_bullet_lines_ratio),
           "gopher_quality:ellipsis_lines": (">", gq.max_ellipsis_lines_ratio),
           "gopher_quality:alpha_words": ("<", gq.min_alpha_words_ratio),
           "gopher_quality:stop_words": ("<", gq.min_stop_words),
           "gopher_repetition:empty": ("", None),
           "gopher_repetition:dup_para_frac": (">", gr.dup_para_frac),
           "gopher_repetition:dup_para_char_frac": (">", gr.dup_para_char_frac),
           "gopher_repetition:dup_line_frac": (">", gr.dup_line_frac),
           "gopher_repetition:dup_line_char_frac": (">", gr.dup_line_char_frac),
           **{f"gopher_repetition:top_{k}_gram": (">", t) for k, t in gr.top_n_grams},
           **{f"gopher_repetition:duplicated_{k}_n_grams": (">", t) for k, t in gr.dup_n_grams},
           "c4:lorem_ipsum": ("", None), "c4:curly_bracket": ("", None),
           "c4:too_few_sentences": ("<", c4.min_num_sentences),
           "fineweb:empty": ("", None), "fineweb:line_punct_ratio": ("<", fw.line_punct_thr),
           "fineweb:short_line_ratio": (">", fw.short_line_thr), "fineweb:char_dup_ratio": (">", fw.char_duplicates_ratio),
           "fineweb:list_ratio": (">", fw.new_line_ratio)}
    return out


def measure(texts, config: FilterConfig = FilterConfig()) -> list[dict[str, Measure]]:
    """Per document, every enabled rule's `Measure`: the figure `apply_filters` compares with the rule's
    threshold, computed the same way (FineWeb on the C4-rewritten text in mode "modify"). For the few
    documents the UI explains: the repetition figures are exact per document, not the bulk pass's bounds."""
    text = _as_series(texts).fill_null("")
    frames, toks, out_text = [], None, text
    for name in FILTER_ORDER:
        cfg = getattr(config, name)
        if not cfg.enabled:
            continue
        if name in ("gopher_quality", "gopher_repetition") and toks is None:
            toks = _tokens(text)
        if name == "sanity":
            frames.append(_sanity(text, cfg, values=True))
        elif name == "gopher_quality":
            frames.append(_gopher_quality(text, toks, cfg, values=True))
        elif name == "gopher_repetition":
            frames.append(_repetition_values(text, toks, cfg))
        elif name == "c4":
            flags, rewritten = _c4(text, cfg)
            frames.append(_c4(text, cfg, values=True)[0])
            if cfg.mode == "modify":
                c4_keep = ~flags.select(pl.any_horizontal(pl.all())).to_series()
                out_text = pl.select(pl.when(c4_keep).then(rewritten).otherwise(text)).to_series()
        elif name == "fineweb":
            frames.append(_fineweb(out_text, cfg, _word_counts(out_text, text, toks), values=True))
    if not frames:
        return [{} for _ in range(len(text))]
    vals = pl.concat(frames, how="horizontal").to_dicts()
    thr = thresholds(config)
    out = []
    for row in vals:
        limit = row.pop("sanity:control_chars:limit", None)
        out.append({r: Measure(r, v, thr[r][0], limit if r == "sanity:control_chars" else thr[r][1])
                    for r, v in row.items()})
    return out
