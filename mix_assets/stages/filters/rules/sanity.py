"""The sanity filter: this project's own raw-text rules (stages/sources/sources.py `not_text`, `min_doc_chars`,
`max_doc_chars`): empty, binary-looking and overlong texts."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from mix_assets.stages.filters.rule import Batch, Filter


# The raw stage's control-character rule (stages/sources/sources.py applies it with these)
CONTROL_SHARE_MAX = 0.01
CONTROL_ALLOWED = 2


_CONTROL = "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd]"  # as stages/sources/sources.py _CONTROL


@dataclass(frozen=True)
class SanityFilter:
    """Empty, binary-looking and overlong texts (stages/sources/sources.py rules, as the raw stage applies them)."""

    enabled: bool = True
    min_chars: int = 1  # after strip(); shorter -> sanity:empty
    max_chars: int = 1_000_000  # longer -> sanity:too_long
    max_control_share: float = CONTROL_SHARE_MAX  # C0/C1 controls and U+FFFD -> sanity:control_chars
    control_allowed: int = CONTROL_ALLOWED  # this many are always allowed (stray form feeds)


def _sanity(text: pl.Series, cfg: SanityFilter, values: bool = False) -> pl.DataFrame:
    t = pl.col("text")
    n = t.str.len_chars()
    ctrl = t.str.count_matches(_CONTROL)
    if values:  # the measured figures (control_chars: against its limit max(allowed, share * chars))
        return pl.DataFrame({"text": text}).select(
            t.str.strip_chars().str.len_chars().cast(pl.Float64).alias("sanity:empty"),
            pl.lit(None, pl.Float64).alias("sanity:binary"),
            ctrl.cast(pl.Float64).alias("sanity:control_chars"),
            pl.max_horizontal(pl.lit(cfg.control_allowed), cfg.max_control_share * n).cast(pl.Float64)
            .alias("sanity:control_chars:limit"),
            n.cast(pl.Float64).alias("sanity:too_long"))
    return pl.DataFrame({"text": text}).select(
        (t.str.strip_chars().str.len_chars() < cfg.min_chars).alias("sanity:empty"),
        t.str.contains("\x00", literal=True).alias("sanity:binary"),
        (ctrl > pl.max_horizontal(pl.lit(cfg.control_allowed), cfg.max_control_share * n)).alias("sanity:control_chars"),
        (n > cfg.max_chars).alias("sanity:too_long"),
    )


def rule(batch: Batch, cfg: SanityFilter) -> pl.DataFrame:
    return _sanity(batch.text, cfg)


def values(batch: Batch, cfg: SanityFilter) -> pl.DataFrame:
    return _sanity(batch.text, cfg, values=True)


def thresholds(cfg: SanityFilter) -> dict:
    # control_chars's threshold is per document (its `:limit` column)
    return {"sanity:empty": ("<", cfg.min_chars), "sanity:binary": ("", None), "sanity:control_chars": (">", None),
            "sanity:too_long": (">", cfg.max_chars)}


FILTER = Filter("sanity", SanityFilter, rule, values, thresholds, length_rules=("sanity:empty",), section=False)
