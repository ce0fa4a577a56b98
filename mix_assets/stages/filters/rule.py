"""What a document filter is to the cascade: a `Filter` (each rules/<name>.py defines one, registry.py lists
them in cascade order) and the `Batch` of texts its rule reads (polars, no Dagster)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import polars as pl

from mix_assets.stages.filters import kernels


class Batch:
    """The texts of one batch as the cascade holds them when it reaches a filter.

    `original`: the texts as given (nulls as ""); `text`: the same after the line modifiers that ran before
    (C4 in mode "modify"): what a rule judges. A rule may report extra wall seconds in `seconds`
    (`"<filter>:<part>"`) and the documents it had to scan one by one in `python_docs`."""

    def __init__(self, text: pl.Series):
        self.original = self.text = text
        self.seconds: dict[str, float] = {}
        self.python_docs = 0
        self._tokens: Optional[tuple[pl.Series, pl.Series]] = None  # (the text they split, its tokens)

    def tokens(self) -> pl.Series:
        """`kernels.TOKEN_RE` tokens (spaCy-like words and punctuation) of every document of `text`, split once
        for every rule that reads them."""
        if self._tokens is None or self._tokens[0] is not self.text:
            self._tokens = (self.text, kernels.tokens(self.text))
        return self._tokens[1]

    def word_counts(self) -> pl.Series:
        """`TOKEN_RE` matches per document of `text`: from the tokens already split where a modifier left the
        text unchanged, counted afresh elsewhere (or everywhere when no rule split them)."""
        if self._tokens is None:
            return kernels.word_counts(self.text, self.text, None)
        return kernels.word_counts(self.text, *self._tokens)

    def rewrite(self, keep: pl.Series, rewritten: pl.Series) -> None:
        """A line modifier's output: the documents it keeps (`keep`) read as `rewritten` from the next filter on."""
        self.text = pl.select(pl.when(keep).then(rewritten).otherwise(self.text)).to_series()


Thresholds = dict[str, tuple[str, Optional[float]]]


@dataclass(frozen=True)
class Filter:
    """One document filter: what the cascade, the config section and the UI read of it.

    - `name`: the prefix of its rules (`<name>:<rule>`), the key of its `filters:` section, its kill-rate row;
    - `config`: a frozen dataclass of its settings, `enabled: bool = True` first; the section's fields and
      defaults (an unknown key in the section is refused);
    - `rule(batch, cfg)`: a frame of one bool column per rule, `<name>:<rule>`, True where the document fails
      it, in the order its rules are tried (a document's reason is its first failing rule);
    - `values(batch, cfg)`: the same columns as Float64: the figure each rule compares with its threshold
      (null for a yes/no rule); an extra `<name>:<rule>:limit` column is that rule's threshold per document;
      what the UI shows beside a rejected sample, computed for a few documents only;
    - `thresholds(cfg)`: {rule: (op, threshold)}, op the comparison that fires ("<", ">"; "" for yes/no);
    - `length_rules`: its rules that judge a document by its length (the `brevity_kept` WARN watches them);
    - `section`: False when it has no `filters:` section (sanity: the raw stage applies its rules from the
      source's limits, so document_filters runs it switched off).
    """

    name: str
    config: type
    rule: Callable[[Batch, object], pl.DataFrame]
    values: Callable[[Batch, object], pl.DataFrame]
    thresholds: Callable[[object], Thresholds]
    length_rules: tuple[str, ...] = ()
    section: bool = True
