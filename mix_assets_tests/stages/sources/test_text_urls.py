"""A text-folder source's file URLs (loader.url_template / loader.urls): each document carries the URL of the
file it comes from as raw/<source>'s `url` column, as a JSONL / Parquet source's url_field does; the config
refuses a bad template or mapping naming the source and the field; without them raw/<source> is as before."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from mix_assets.config import MixConfigError, load_spec
from mix_assets.core import layout
from mix_assets.core.storage import Storage
from mix_assets.stages.sources import sources as lib

from mix_assets_tests.conftest import minimal_config, source, write_config

TEMPLATE = "https://www.gutenberg.org/ebooks/{stem}"


def _books(tmp_path):
    d = tmp_path / "books"
    (d / "more").mkdir(parents=True)
    (d / "972.txt").write_text("The Devil's Dictionary.\n\nABSENT, adj. Peculiarly exposed to the tongue.\n")
    (d / "more" / "1661.txt").write_text("To Sherlock Holmes she is always the woman.\n")
    (d / "My Book.txt").write_text("A book whose file name holds a space.\n")
    return d


def _spec(tmp_path, **loader):
    src = source("books", {"kind": "text", "paths": ["books"], "unit": "paragraphs", **loader})
    return load_spec(write_config(tmp_path, minimal_config(sources=[src])))


def _urls(spec) -> dict:
    return {r.origin: r.url for r in lib.iter_rows(spec, spec.sources[0])}


def test_a_template_gives_every_document_its_files_url(tmp_path):
    _books(tmp_path)
    spec = _spec(tmp_path, url_template=TEMPLATE)
    assert spec.sources[0].has_url
    assert _urls(spec) == {"972.txt#0": "https://www.gutenberg.org/ebooks/972",
                           "972.txt#1": "https://www.gutenberg.org/ebooks/972",
                           "My Book.txt#0": "https://www.gutenberg.org/ebooks/My%20Book",  # percent-encoded
                           "more/1661.txt#0": "https://www.gutenberg.org/ebooks/1661"}
    spec = _spec(tmp_path, url_template="https://example.org/{path}?file={name}")
    assert _urls(spec)["more/1661.txt#0"] == "https://example.org/more/1661.txt?file=1661.txt"


def test_a_per_file_url_wins_over_the_template_and_a_file_given_neither_has_none(tmp_path):
    _books(tmp_path)
    spec = _spec(tmp_path, url_template=TEMPLATE, urls={"My Book.txt": "https://example.org/my-book"})
    assert _urls(spec)["My Book.txt#0"] == "https://example.org/my-book"
    assert _urls(spec)["972.txt#0"] == "https://www.gutenberg.org/ebooks/972"
    spec = _spec(tmp_path, urls={"more/1661.txt": "https://www.gutenberg.org/ebooks/1661"})  # by its path
    assert _urls(spec) == {"972.txt#0": None, "972.txt#1": None, "My Book.txt#0": None,
                           "more/1661.txt#0": "https://www.gutenberg.org/ebooks/1661"}


def test_a_per_file_url_naming_no_file_or_several_fails_naming_source_and_key(tmp_path):
    d = _books(tmp_path)
    with pytest.raises(lib.SourceError, match=r"source books: loader.urls: '1662.txt' is none of its files \(a "
                                              r"file's name or its path below .*books: 972.txt, "):
        spec = _spec(tmp_path, urls={"1662.txt": "https://x.org/a"})
        list(lib.iter_rows(spec, spec.sources[0]))
    (d / "more" / "972.txt").write_text("A second file of the same name.\n")
    with pytest.raises(lib.SourceError, match=r"source books: loader.urls: '972.txt' names 2 files \(972.txt, "
                                              r"more/972.txt\); give its path below"):
        spec = _spec(tmp_path, urls={"972.txt": "https://x.org/a"})
        list(lib.iter_rows(spec, spec.sources[0]))
    with pytest.raises(lib.SourceError, match=r"loader.urls: '1661.txt' and 'more/1661.txt' both name more/1661.txt"):
        spec = _spec(tmp_path, urls={"1661.txt": "https://x.org/a", "more/1661.txt": "https://x.org/b"})
        list(lib.iter_rows(spec, spec.sources[0]))


@pytest.mark.parametrize("loader, message", [
    ({"url_template": "https://x.org/{ebook}"},
     r"source books: loader.url_template 'https://x.org/\{ebook\}': unknown placeholder '\{ebook\}'; known: "
     r"\{name\}, \{stem\}, \{path\}"),
    ({"url_template": "https://x.org/{}"}, r"source books: loader.url_template .*unknown placeholder '\{\}'"),
    ({"url_template": "https://x.org/{stem.upper}"}, r"unknown placeholder '\{stem.upper\}'"),
    ({"url_template": "https://x.org/{stem:>9}"}, r"placeholder '\{stem:>9\}' has a conversion or format spec"),
    ({"url_template": "https://x.org/{stem"}, r"source books: loader.url_template .*not a valid template"),
    ({"url_template": "https://x.org/book"}, r"names no placeholder .*every file would get the same URL; give each "
                                             r"file its URL with `urls:`"),
    ({"url_template": "gutenberg.org/ebooks/{stem}"}, r"does not render an absolute URL \(scheme://host/...\): "
                                                      r"'gutenberg.org/ebooks/x'"),
    ({"urls": {"972.txt": "ebook 972"}}, r"source books: loader.urls\['972.txt'\]: 'ebook 972' is not an absolute URL"),
])
def test_the_config_refuses_a_bad_template_or_url_naming_source_and_field(tmp_path, loader, message):
    with pytest.raises(MixConfigError, match=message):
        _spec(tmp_path, **loader)


def test_url_field_on_a_text_folder_points_at_the_loaders_file_urls(tmp_path):
    src = source("books", {"kind": "text", "paths": ["books"]}, url_field="url")
    with pytest.raises(MixConfigError, match=r"source books: url_field is read from JSONL, Parquet and hub rows: .*"
                                             r"give each file's URL with loader.url_template .* or loader.urls"):
        load_spec(write_config(tmp_path, minimal_config(sources=[src])))


def test_without_file_urls_raw_is_written_as_before(tmp_path):
    """No url_template / urls: the source's dump (raw/<source>'s code version and key) is the one written before
    the option existed, and raw/<source> holds no `url` column: the bytes of the documents the same source
    gives with a template, without that column."""
    _books(tmp_path)
    plain = _spec(tmp_path)
    assert not plain.sources[0].has_url
    assert lib.source_fields_read(plain.sources[0]) == (  # as main at 7ff94f0 wrote it
        '{"name":"books","loader":{"kind":"text","paths":["books"],"unit":"paragraphs","group_chars":0,'
        '"encoding":"utf-8","fallback_encoding":null},"text_field":null,"template":null,"share":1.0,"epochs":1.0,'
        '"max_doc_chars":1000000,"min_doc_chars":1}')
    storage = Storage(root=str(tmp_path / "storage"))
    key = layout.RAW_DOCS.format(source="books")
    lib.read_raw_source(storage, plain, "books")
    before = open(storage.source(key), "rb").read()
    assert pq.read_schema(storage.source(key)).names == lib.DOC_SCHEMA.names

    with_urls = _spec(tmp_path, url_template=TEMPLATE)
    assert "url_template" in lib.source_fields_read(with_urls.sources[0])  # a template changes raw's key
    lib.read_raw_source(storage, with_urls, "books")
    t = pq.read_table(storage.source(key))
    assert t.column("url").to_pylist() == [_urls(with_urls)[o] for o in t.column("origin").to_pylist()]
    pq.write_table(t.drop(["url"]), tmp_path / "direct.parquet", compression="zstd", use_dictionary=True,
                   write_statistics=True)
    assert (tmp_path / "direct.parquet").read_bytes() == before


def test_the_published_config_reads_back_to_the_same_raw_code_version(tmp_path):
    """The published mix_config.json is sorted JSON: a `urls` mapping given in another order must read back to
    the same source dump (raw/<source>'s code version), or published_revision refuses the mix."""
    import json

    from mix_assets.config import parse_spec

    _books(tmp_path)
    spec = _spec(tmp_path, urls={"more/1661.txt": "https://www.gutenberg.org/ebooks/1661",
                                 "972.txt": "https://www.gutenberg.org/ebooks/972"})
    again = parse_spec(json.loads(spec.canonical_json()), "mix_config.json")
    assert lib.source_fields_read(again.sources[0]) == lib.source_fields_read(spec.sources[0])


@pytest.mark.shared_data
def test_the_shared_samples_ebook_urls_are_the_numbers_their_files_headers_give(tmp_path, shared_data):
    """configs/shared-sample.yaml gives each Project Gutenberg file the page of the ebook its header names
    (`[EBook #972]`): checked for every file of every source whose documents carry a gutenberg.org URL."""
    import re

    from mix_assets_tests.support.shared_data import real_mix_config

    spec = load_spec(real_mix_config(tmp_path, shared_data))
    checked = 0
    for src in spec.sources:
        if src.loader.kind != "text" or not src.has_url:
            continue
        files, base = lib._expand(spec, src, src.loader.paths, folder_ok=True)
        for f, url in zip(files, lib.text_file_urls(src, src.loader, files, base)):
            m = re.fullmatch(r"https://www\.gutenberg\.org/ebooks/(\d+)", url or "")
            if m:
                head = f.read_bytes()[:3000].decode("utf-8", "replace")
                assert re.search(rf"\[ebook #{m.group(1)}\]", head, re.I), (f, url)
                checked += 1
    assert checked == 6  # the four gutenberg books, Sherlock Holmes and Botchan
