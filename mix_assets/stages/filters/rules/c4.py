"""C4 line rules: Raffel et al. 2020, arXiv 1910.10683 section 2.2, as datatrove 0.10.1's `C4QualityFilter` has
them (`pipeline/filters/c4_filters.py`, which keeps lines of >= 3 words and documents of >= 5 sentences,
where the paper says 5 words / 3 sentences). In mode "modify" its rewritten text is what FineWeb reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import polars as pl

from mix_assets.stages.filters.kernels import TERMINAL_PUNCTUATION, TOKEN_RE, char_class, lt, presplit, splitlines
from mix_assets.stages.filters.rule import Batch, Filter


_SENT_END = f"^[{char_class(TERMINAL_PUNCTUATION)}]$"


@dataclass(frozen=True)
class C4Filter:
    """C4 line rules (arXiv 1910.10683 2.2): datatrove C4QualityFilter, pipeline/filters/c4_filters.py,
    same defaults (split_paragraph=True). mode "modify": a kept document's text becomes its kept lines
    (as datatrove does); mode "filter": the same keep/drop decision, the text is left as it was."""

    enabled: bool = True
    mode: str = "modify"
    remove_citations: bool = True  # [1], [edit], [citation needed]
    filter_no_terminal_punct: bool = True  # FineWeb ran C4 with this off
    min_num_sentences: Optional[int] = 5  # of the kept lines; fewer -> c4:too_few_sentences
    min_words_per_line: Optional[int] = 3
    max_word_length: Optional[int] = 1000  # a line with a longer word is dropped
    filter_lorem_ipsum: bool = True  # drops the document
    filter_javascript: bool = True  # drops the line
    filter_curly_bracket: bool = True  # drops the document
    filter_policy: bool = True  # drops the line
    policy_substrings: tuple = ("terms of use", "privacy policy", "cookie policy", "uses cookies",
                                "use of cookies", "use cookies")

    def __post_init__(self):
        if self.mode not in ("modify", "filter"):
            raise ValueError(f"C4Filter.mode must be 'modify' or 'filter', got {self.mode!r}")


def _sentences(lines: pl.DataFrame) -> pl.DataFrame:
    """Sentences per line as spaCy's sentencizer counts them: a new one starts at each word token that
    follows a terminal-punctuation token (with only punctuation tokens between)."""
    tok = (lines.select("lid", tok=presplit(pl.col("line")).str.extract_all(TOKEN_RE)).explode("tok").drop_nulls("tok")
           .with_columns(end=pl.col("tok").str.contains(_SENT_END),
                         word=pl.col("tok").str.contains(r"[^\p{P}]")))
    tok = tok.with_columns(cum=pl.col("end").cum_sum().over("lid")).filter("word")
    # a line that opens with end marks ("." then words) has that "." as a sentence of its own
    starts = pl.col("cum") > pl.col("cum").shift(1).over("lid").fill_null(0)
    return tok.group_by("lid").agg(sent=starts.sum() + 1)


# A sentence starts at a word token (one with a character outside \p{P}; tokens hold no whitespace) after
# a token that is one terminal character: a line without a terminal character followed, anywhere later, by
# a character outside \p{P} and \s has no second sentence (`presplit` only inserts spaces).
_MAY_START_SENTENCE = f"(?s)[{char_class(TERMINAL_PUNCTUATION)}].*[^\\p{{P}}\\s]"


def _few_words(line: pl.Expr, k: Optional[int]) -> pl.Expr:
    """Fewer than k runs of non-space (`count_matches(r"\\S+") < k`, as a match that stops at the k-th run)."""
    if k is None or k <= 0:
        return pl.lit(False)
    return ~line.str.contains(r"\S+" + (f"(?:\\s+\\S+){{{k - 1}}}" if k > 1 else ""))


def _c4(text: pl.Series, cfg: C4Filter, values: bool = False) -> tuple[pl.DataFrame, pl.Series]:
    """(rule columns, the kept lines joined by newlines per document); `values`: the rules' figures
    (sentences of the kept lines; lorem ipsum and curly brackets are yes/no) instead of the rule columns."""
    ndoc = len(text)
    lines = (pl.DataFrame({"text": text}).with_row_index("doc")
             .select("doc", line=splitlines(pl.col("text"))).explode("line")
             .with_row_index("lid").with_columns(pl.col("line").str.strip_chars()))
    s = pl.col("line")
    long_word = pl.lit(False) if cfg.max_word_length is None else s.str.contains(f"\\S{{{cfg.max_word_length + 1}}}")
    cleaned = s.str.replace_all(r"\[\d*]|\[edit]|\[citation needed]", "") if cfg.remove_citations else s
    lines = lines.with_columns(few=_few_words(s, cfg.min_words_per_line), long=long_word, line=cleaned)
    low = s.str.to_lowercase()
    no_term = (~s.str.contains(r"[.?!\"']$") | s.str.ends_with("...")) if cfg.filter_no_terminal_punct else pl.lit(False)
    reach = ~pl.col("long") & ~no_term & ~pl.col("few")
    lorem = reach & low.str.contains("lorem ipsum", literal=True) if cfg.filter_lorem_ipsum else pl.lit(False)
    js = reach & ~lorem & low.str.contains("javascript", literal=True) if cfg.filter_javascript else pl.lit(False)
    curly = reach & ~lorem & ~js & s.str.contains("{", literal=True) if cfg.filter_curly_bracket else pl.lit(False)
    pol = (reach & low.str.contains_any(list(cfg.policy_substrings)) if cfg.filter_policy else pl.lit(False))
    lines = lines.with_columns(lorem=lorem, curly=curly, kept=reach & ~lorem & ~js & ~curly & ~pol)
    kept = lines.filter("kept")
    if cfg.min_num_sentences is not None:
        # every kept line holds a sentence: only documents with fewer kept lines than the minimum
        # need their sentences counted
        few_lines = pl.len().over("doc") < cfg.min_num_sentences
        many = pl.col("line").str.contains(_MAY_START_SENTENCE)  # the others hold one sentence
        kept = kept.join(_sentences(kept.filter(few_lines & many)), on="lid", how="left").with_columns(
            pl.col("sent").fill_null(1))
    else:
        kept = kept.with_columns(sent=pl.lit(0))
    per_doc = kept.group_by("doc").agg(sent=pl.col("sent").sum(), out=pl.col("line").str.join("\n"))
    first = lines.group_by("doc").agg(
        lorem=pl.col("lid").filter("lorem").min(), curly=pl.col("lid").filter("curly").min())
    docs = (pl.DataFrame({"doc": pl.int_range(ndoc, eager=True).cast(pl.UInt32)})
            .join(first, on="doc", how="left").join(per_doc, on="doc", how="left"))
    lo, cu = pl.col("lorem"), pl.col("curly")
    if values:
        return docs.select(pl.lit(None, pl.Float64).alias("c4:lorem_ipsum"), pl.lit(None, pl.Float64).alias("c4:curly_bracket"),
                           pl.col("sent").fill_null(0).cast(pl.Float64).alias("c4:too_few_sentences")), \
            docs["out"].fill_null("").str.strip_chars()
    out = docs.select(
        (lo.is_not_null() & (cu.is_null() | (lo <= cu))).alias("c4:lorem_ipsum"),
        (cu.is_not_null() & (lo.is_null() | (cu < lo))).alias("c4:curly_bracket"),
        lt(pl.col("sent").fill_null(0), cfg.min_num_sentences).alias("c4:too_few_sentences"),
    )
    return out, docs["out"].fill_null("").str.strip_chars()


def _hand_on(batch: Batch, cfg: C4Filter, failed: pl.DataFrame, rewritten: pl.Series) -> None:
    """Mode "modify": the documents C4 keeps read as their kept lines from the next filter on."""
    if cfg.mode == "modify":
        batch.rewrite(~failed.select(pl.any_horizontal(pl.all())).to_series(), rewritten)


def rule(batch: Batch, cfg: C4Filter) -> pl.DataFrame:
    failed, rewritten = _c4(batch.text, cfg)
    _hand_on(batch, cfg, failed, rewritten)
    return failed


def values(batch: Batch, cfg: C4Filter) -> pl.DataFrame:
    failed, rewritten = _c4(batch.text, cfg)
    figures = _c4(batch.text, cfg, values=True)[0]
    _hand_on(batch, cfg, failed, rewritten)
    return figures


def thresholds(cfg: C4Filter) -> dict:
    return {"c4:lorem_ipsum": ("", None), "c4:curly_bracket": ("", None),
            "c4:too_few_sentences": ("<", cfg.min_num_sentences)}


FILTER = Filter("c4", C4Filter, rule, values, thresholds, length_rules=("c4:too_few_sentences",))
