"""The sources stage's config sections: a source (`SourceSpec`), its loader (hub dataset, JSON Lines,
Parquet, text folder), its document limits, and the embedded demo corpus (stages/sources/demo_corpus.py)."""

from __future__ import annotations

import codecs
import re
import string
from typing import Annotated, Literal, Optional, Union
from urllib.parse import urlsplit

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from mix_assets.core.spec import NAME, Strict


def _known_encoding(v: Optional[str]) -> Optional[str]:
    if v is not None:
        try:
            codecs.lookup(v)
        except LookupError:
            raise ValueError(f"unknown encoding {v!r} (a Python codec name, e.g. 'utf-8', 'cp1252')") from None
    return v


def template_fields(template: str) -> list[str]:
    """The field names of a str.format template, refusing anything but plain `{name}` fields: no
    attribute or index access, positional fields, conversions or format specs (a template only
    joins row fields; nothing in it may evaluate anything)."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ValueError(f"not a valid template: {e} (write a literal brace as {{{{ or }}}})") from None
    names = []
    for _, name, spec, conv in parts:
        if name is None:
            continue
        shown = "{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
        head = re.split(r"[.\[]", name, maxsplit=1)[0]
        if not head or head.isdigit():
            raise ValueError(f"template field {shown!r} is positional; name a row field, e.g. {{question}}")
        if head != name:
            raise ValueError(f"template fields are plain field names like {{question}}; {shown!r} reads an "
                             "attribute or an index")
        if conv or spec:
            raise ValueError(f"template field {shown!r} has a conversion or format spec; use plain {{{name}}}")
        names.append(name)
    if not names:
        raise ValueError("the template names no field, e.g. {question}")
    return sorted(set(names))


class HubDataset(Strict):
    """A Hugging Face hub dataset at a pinned revision."""

    kind: Literal["hub"] = "hub"
    repo_id: str  # e.g. "HuggingFaceFW/fineweb-edu"; a local directory laid out like a hub repo also works
    revision: str  # commit sha or tag; a branch name is refused (not reproducible)
    config_name: Optional[str] = None  # the dataset's configuration ("subset"), if it has several
    data_files: Optional[list[str]] = None  # glob(s) inside the repo when only part of it is wanted
    streaming: Optional[bool] = None  # None: stream when the repo is far larger than the budget

    @field_validator("revision")
    @classmethod
    def _pinned(cls, v: str) -> str:
        if v in {"main", "master", "HEAD", ""}:
            raise ValueError("must pin a commit sha or a tag, not a moving branch")
        return v


class LocalJsonl(Strict):
    """One or more local JSON Lines files (globs allowed)."""

    kind: Literal["jsonl"] = "jsonl"
    paths: list[str]  # files or globs, relative to the config file's directory


class LocalParquet(Strict):
    """One or more local Parquet files (globs allowed)."""

    kind: Literal["parquet"] = "parquet"
    paths: list[str]  # files or globs, relative to the config file's directory


URL_PLACEHOLDERS = ("name", "stem", "path")  # a text file's name, its name without the last suffix, its path


def url_template_fields(template: str) -> list[str]:
    """The placeholders of a text-folder source's `url_template` (each one of URL_PLACEHOLDERS, plain `{stem}`,
    at least one), refusing anything else; the template must render an absolute URL (`scheme://host/...`)."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ValueError(f"not a valid template: {e} (write a literal brace as {{{{ or }}}})") from None
    known = ", ".join("{" + p + "}" for p in URL_PLACEHOLDERS)
    names = []
    for _, name, spec, conv in parts:
        if name is None:
            continue
        shown = "{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
        if name not in URL_PLACEHOLDERS:
            raise ValueError(f"unknown placeholder {shown!r}; known: {known}")
        if conv or spec:
            raise ValueError(f"placeholder {shown!r} has a conversion or format spec; use plain {{{name}}}")
        names.append(name)
    if not names:
        raise ValueError(f"names no placeholder ({known}): every file would get the same URL; give each file "
                         "its URL with `urls:` (file name -> URL) instead")
    example = template.format(**{p: "x" for p in URL_PLACEHOLDERS})
    if not absolute_url(example):
        raise ValueError(f"does not render an absolute URL (scheme://host/...): {example!r}")
    return sorted(set(names))


def absolute_url(url: str) -> bool:
    """Whether `url` has a scheme and a host (`https://www.gutenberg.org/ebooks/972`)."""
    try:
        parts = urlsplit(url)
        return bool(parts.scheme and parts.hostname) and not any(c.isspace() for c in url)
    except ValueError:
        return False


class TextFolder(Strict):
    """A folder of plain-text files; each file is split into documents by `unit`."""

    kind: Literal["text"] = "text"
    paths: list[str]  # folders, files or globs, relative to the config file's directory
    unit: Literal["file", "paragraphs", "lines"] = "paragraphs"  # how a file becomes documents
    group_chars: int = Field(0, ge=0)  # >0: join consecutive paragraphs/lines up to this many chars
    encoding: str = "utf-8"  # bytes that do not decode are counted per file, never fatal
    fallback_encoding: Optional[str] = None  # e.g. "cp1252": tried when `encoding` fails (counted)
    # The URL of the file each document comes from, kept as raw/<source>'s `url` column (filters.url), as a JSONL or
    # Parquet source's url_field: a template over the file's {name}, {stem} or {path} (below the folder common
    # to the source's files; each percent-encoded), e.g. "https://www.gutenberg.org/ebooks/{stem}" ...
    url_template: Optional[str] = None
    # ... and/or file -> URL, a file named by its name or its path below that folder (wins over the template);
    # a file given neither has no URL (counted as url_missing, kept)
    urls: Optional[dict[str, str]] = None

    @field_validator("encoding", "fallback_encoding")
    @classmethod
    def _codec(cls, v: Optional[str]) -> Optional[str]:
        return _known_encoding(v)

    @field_validator("urls")
    @classmethod
    def _sorted(cls, v: Optional[dict[str, str]]) -> Optional[dict[str, str]]:
        # in key order: the published config (sorted JSON) must read back to the same raw/<source> code version
        return dict(sorted(v.items())) if v is not None else None

    @model_serializer(mode="wrap")
    def _omit_unset_urls(self, handler: SerializerFunctionWrapHandler) -> dict:
        out = handler(self)
        for k in ("url_template", "urls"):
            if out.get(k, 0) is None:
                out.pop(k)  # configs without file URLs keep their published bytes (and raw/<source>'s config input)
        return out


Loader = Annotated[Union[HubDataset, LocalJsonl, LocalParquet, TextFolder], Field(discriminator="kind")]


class SourceSpec(Strict):
    """One source of the mix."""

    name: str = Field(pattern=NAME)  # asset key raw/<name>; also the doc_id prefix
    loader: Loader  # where the rows come from
    split: str = "train"  # the split read (hub / datasets builders); local loaders ignore it
    text_field: Optional[str] = None  # the field holding the text ...
    template: Optional[str] = None  # ... or a str.format template joining fields, "{question}\n{answer}"
    # JSONL, Parquet and hub sources: the field holding each document's URL, kept as raw/<source>'s `url` column
    # (filters.url); a text-folder source has no fields: its loader gives each file's URL (url_template, urls)
    url_field: Optional[str] = None
    license: str = Field(min_length=1)  # licence as stated by the source
    rationale: str = Field(min_length=20)  # the corpus property relied on (shown in the UI)
    share: float = Field(gt=0, le=1)  # fraction of N (unique tokens) this source provides
    epochs: float = Field(1.0, ge=1, le=8)  # times its unique tokens repeat in the token stream
    priority: int = 0  # keep-rule tie-break across sources (higher survives)
    max_doc_chars: int = Field(1_000_000, gt=0)  # longer documents are dropped and counted
    min_doc_chars: int = Field(1, ge=1)  # shorter documents (after strip) are dropped as empty
    # merged over the mix's `filters:` field by field, e.g. {gopher_quality: {enabled: false}}
    filters: Optional[dict] = None

    @model_serializer(mode="wrap")
    def _omit_unset_filters(self, handler: SerializerFunctionWrapHandler) -> dict:
        out = handler(self)
        if out.get("filters") is None:
            out.pop("filters", None)  # configs without filters keep their published bytes
        if out.get("url_field", 0) is None:
            out.pop("url_field")  # likewise without a URL field
        return out

    @field_validator("template")
    @classmethod
    def _plain_template(cls, v: Optional[str]) -> Optional[str]:
        if v is not None:
            template_fields(v)
        return v

    @model_validator(mode="after")
    def _text_or_template(self) -> "SourceSpec":
        if self.min_doc_chars > self.max_doc_chars:
            raise ValueError(
                f"min_doc_chars ({self.min_doc_chars}) exceeds max_doc_chars ({self.max_doc_chars})"
            )
        if self.loader.kind == "text":
            if self.text_field or self.template:
                raise ValueError("a text-folder source takes neither text_field nor template")
        elif bool(self.text_field) == bool(self.template):
            raise ValueError("give exactly one of text_field or template")
        if self.url_field and self.loader.kind == "text":
            raise ValueError(f"source {self.name}: url_field is read from JSONL, Parquet and hub rows: a text-folder "
                             "source's documents are pieces of files, with no field to hold a URL; give each file's "
                             "URL with loader.url_template (e.g. \"https://www.gutenberg.org/ebooks/{stem}\") or "
                             "loader.urls (file name -> URL), or switch filters.url off for it")
        if self.loader.kind == "text":
            self._check_file_urls(self.loader)
        return self

    def _check_file_urls(self, loader: TextFolder) -> None:
        if loader.url_template is not None:
            try:
                url_template_fields(loader.url_template)
            except ValueError as e:
                raise ValueError(f"source {self.name}: loader.url_template {loader.url_template!r}: {e}") from None
        for key, url in (loader.urls or {}).items():
            if not key.strip():
                raise ValueError(f"source {self.name}: loader.urls: an empty file name")
            if not absolute_url(url):
                raise ValueError(f"source {self.name}: loader.urls[{key!r}]: {url!r} is not an absolute URL "
                                 "(scheme://host/...)")

    @property
    def has_url(self) -> bool:
        """Whether raw/<source> carries a `url` column: a url_field, or a text folder's file URLs."""
        loader = self.loader
        return bool(self.url_field) or (loader.kind == "text" and bool(loader.url_template or loader.urls))

    @property
    def fields(self) -> list[str]:
        """Row fields this source reads."""
        if self.template:
            return template_fields(self.template)
        return [self.text_field] if self.text_field else []


class DemoCorpusSpec(Strict):
    """The embedded demo corpus, generated offline and deterministically before it is read."""

    path: str = "../build/demo_corpus"  # where it is generated, relative to the config file's directory
    seed: int = 7  # generator seed (independent of the mix seed)
    docs_per_source: int = Field(400, ge=20)  # documents per generated source
