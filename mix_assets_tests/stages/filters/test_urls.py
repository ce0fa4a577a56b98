"""The URL / domain filter: blocklists from files (a domain blocks its subdomains, substrings anywhere in the
URL), each keyed by its content and optionally pinned, malformed lines failing with file and line, unparseable
URLs counted, rejections `url:<list>` in document_filters' decisions."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.core import engine
from mix_assets.stages.filters import decisions, urls
from mix_assets.stages.filters.cascade import FilterConfig
from mix_assets.stages.filters.config import FiltersSpec


def _lists(tmp_path, domains="# ad hosts\nbad.example\n*.tracker.test  # and its subdomains\n", subs="casino\n"):
    (tmp_path / "domains.txt").write_text(domains)
    (tmp_path / "subs.txt").write_text(subs)
    return [{"name": "adult", "path": "domains.txt", "kind": "domains"},
            {"name": "spam", "path": "subs.txt", "kind": "substrings"}]


def _params(tmp_path, **kw) -> urls.UrlParams:
    return urls.UrlParams("url", urls.resolve(_lists(tmp_path, **kw), str(tmp_path)))


def test_a_domain_blocks_itself_and_its_subdomains_and_a_substring_anywhere(tmp_path):
    p = _params(tmp_path)
    got = urls.judge(["https://bad.example/page", "http://www.BAD.example:8080/x", "https://notbad.example/",
                      "https://a.b.tracker.test/?q=1", "https://shop.test/Casino-night", "https://fine.org/", None,
                      "not a url at all"], p)
    assert got.reason == ["url:adult", "url:adult", None, "url:adult", "url:spam", None, None, None]
    assert got.matched == {"adult": 3, "spam": 1} and got.missing == 1 and got.unparseable == 1


def test_unparseable_urls_are_rejected_when_the_config_says_so(tmp_path):
    p = urls.UrlParams("url", _params(tmp_path).lists, reject_unparseable=True)
    assert urls.judge(["http://", "no-dots", "https://ok.org/"], p).reason == ["url:unparseable"] * 2 + [None]


def test_a_malformed_blocklist_line_names_file_and_line(tmp_path):
    with pytest.raises(urls.BlocklistError, match=r"domains.txt:3: not a domain: 'http://x.com/path'"):
        _params(tmp_path, domains="ok.com\n\nhttp://x.com/path\n")
    with pytest.raises(urls.BlocklistError, match=r"domains.txt:1: not a domain: 'two words.com'"):
        _params(tmp_path, domains="two words.com\n")


def test_a_list_is_keyed_by_its_content_and_a_pin_refuses_another(tmp_path):
    a = _params(tmp_path)
    b = _params(tmp_path, domains="bad.example\nother.example\n")
    assert a.lists[0].sha256 != b.lists[0].sha256 and a.describe() != b.describe()
    lists = _lists(tmp_path)
    lists[0]["sha256"] = hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(urls.BlocklistError, match="blocklist 'adult' has sha256"):
        urls.resolve(lists, str(tmp_path))
    lists[0]["sha256"] = hashlib.sha256((tmp_path / "domains.txt").read_bytes()).hexdigest()
    assert urls.resolve(lists, str(tmp_path))[0].sha256 == lists[0]["sha256"]


def _docs(path, urls_col):
    n = len(urls_col)
    text = ["A perfectly ordinary document about rivers and stones."] * n
    pq.write_table(pa.table({"doc_id": [f"d{i}" for i in range(n)], "text": pa.array(text, pa.large_string()),
                             "n_chars": [len(t) for t in text], "n_bytes": [len(t) for t in text],
                             "url": urls_col}), path)


def test_document_filters_rejects_a_blocklisted_domain_and_subdomain_with_the_reason(tmp_path):
    path = tmp_path / "docs.parquet"
    _docs(path, ["https://bad.example/a", "https://sub.bad.example/b", "https://good.org/c", "%%%"])
    params = decisions.FilterParams(FilterConfig.only(), url=_params(tmp_path))
    t = decisions.decide_chunk(decisions.FilterChunk("web", engine.RowRange(str(path), 0, 4), params))
    assert t.column("reason").to_pylist() == ["url:adult", "url:adult", None, None]
    assert t.column("keep").to_pylist() == [False, False, True, True]
    assert decisions.filter_of("url:adult") == "url" and decisions.filter_order()[0] == "url"
    assert "url" in params.describe() and "url" not in decisions.FilterParams(FilterConfig.only()).describe()


def test_documents_without_the_url_column_fail_naming_file_and_field(tmp_path):
    path = tmp_path / "docs.parquet"
    _docs(path, ["https://x.org"])
    pq.write_table(pq.read_table(path).drop(["url"]), path)
    params = decisions.FilterParams(FilterConfig.only(), url=_params(tmp_path))
    with pytest.raises(decisions.FilterInputError, match=r"docs.parquet: no column 'url' \(filters.url.field\)"):
        decisions.decide_chunk(decisions.FilterChunk("web", engine.RowRange(str(path), 0, 1), params))


def test_the_config_section_and_a_dump_without_it():
    spec = FiltersSpec.model_validate({"url": {"lists": [{"name": "adult", "path": "d.txt", "kind": "domains"}]}})
    assert spec.active() == ["url"]
    assert "url" not in FiltersSpec.model_validate({"c4": {}}).model_dump(mode="json")
    with pytest.raises(Exception, match="kind"):
        FiltersSpec.model_validate({"url": {"lists": [{"name": "x", "path": "d.txt", "kind": "hosts"}]}})


def _web_rows():
    import random

    r = random.Random(3)
    words = "river stone market lantern harvest copper meadow orchard bridge signal quiet amber".split()
    hosts = ["bad.example", "news.bad.example", "good.org", "fine.net", "notbad.example"]
    return [{"text": " ".join(r.choice(words) for _ in range(60)) + ".", "page_url": f"https://{hosts[i % 5]}/p{i}"}
            for i in range(150)]


def _web_loader(tmp_path, kind: str, rows: list) -> dict:
    """The rows as a JSONL or a Parquet source's file."""
    import json

    if kind == "jsonl":
        (tmp_path / "web.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
        return {"kind": "jsonl", "paths": [str(tmp_path / "web.jsonl")]}
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "web.parquet")
    return {"kind": "parquet", "paths": [str(tmp_path / "web.parquet")]}


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_in_the_graph_a_url_field_reaches_raw_and_blocked_documents_are_masked_with_the_reason(tmp_path, kind):
    """raw/<source> carries the source's url_field as `url` (a JSONL or a Parquet source); document_filters rejects
    a blocklisted domain and its subdomain (`url:adult`), counted per list as metadata; exclusion_masks holds
    the reason."""
    import json

    import dagster as dg

    from mix_assets.config import load_spec
    from mix_assets.core import layout
    from mix_assets.core.storage import Storage
    from mix_assets.resources import MixResource
    from mix_assets.stages.dedup.assets import build_dedup_assets
    from mix_assets.stages.filters.assets import build_filter_assets
    from mix_assets.stages.sources.assets import build_source_assets
    from mix_assets_tests.conftest import minimal_config, source, write_config

    loader = _web_loader(tmp_path, kind, _web_rows())
    lists = _lists(tmp_path)
    cfg = minimal_config(sources=[source("web", loader, url_field="page_url")],
                         target_tokens=3000, headroom=1.1, filters={"url": {"lists": lists}, "keep_share": 0.5},
                         audit={"mask_contaminated": False, "tasks": []})
    cfg["storage"] = {"root": str(tmp_path / "storage"), "cache_dir": str(tmp_path / "cache")}
    spec = load_spec(write_config(tmp_path, cfg))
    res = dg.materialize([*build_source_assets(spec), *build_filter_assets(spec), *build_dedup_assets(spec)],
                         resources={"mix": MixResource(config_path=spec.config_path)},
                         instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert res.success
    storage = Storage(root=str(tmp_path / "storage"))
    raw = pq.read_table(storage.source(layout.RAW_DOCS.format(source="web")))
    blocked = {d for d, u in zip(raw.column("doc_id").to_pylist(), raw.column("url").to_pylist())
               if urls.host_of(u).endswith("bad.example") and not urls.host_of(u).startswith("notbad")}
    assert blocked and len(blocked) < raw.num_rows
    dec = decisions.read_decisions(storage, ["web"])["web"]
    got = {d for d, why in zip(dec.column("doc_id").to_pylist(), dec.column("reason").to_pylist()) if why == "url:adult"}
    assert got == blocked
    md = {m.asset_key.to_user_string(): m for m in res.get_asset_materialization_events()}["document_filters"]
    assert md.materialization.metadata["url_rejected/web/adult"].value == len(blocked)
    masks = pq.read_table(storage.source(layout.EXCLUSION_MASKS)).to_pylist()
    assert {m["doc_id"] for m in masks if "url:adult" in json.dumps(m)} == blocked


def test_a_parquet_url_that_is_not_a_string_fails_naming_file_row_and_field(tmp_path):
    from mix_assets.config import load_spec
    from mix_assets.stages.sources import sources
    from mix_assets_tests.conftest import minimal_config, source, write_config

    rows = [{"text": "An ordinary document about rivers.", "page_url": 7 * i} for i in range(3)]
    cfg = minimal_config(sources=[source("web", _web_loader(tmp_path, "parquet", rows), url_field="page_url")])
    spec = load_spec(write_config(tmp_path, cfg))
    with pytest.raises(sources.SourceError, match=r"web.parquet train:0: field 'page_url' holds int, expected a "
                                                  r"string \(a URL\)"):
        list(sources.iter_rows(spec, spec.source("web")))
    # without a url_field the column is not read: the rows carry no URL
    spec = load_spec(write_config(tmp_path, minimal_config(sources=[source("web", _web_loader(tmp_path, "parquet",
                                                                                              rows))])))
    assert [r.url for r in sources.iter_rows(spec, spec.source("web"))] == [None] * 3


def test_url_field_is_for_jsonl_parquet_and_hub_sources_and_absent_from_dumps_when_unset():
    from mix_assets.stages.sources.config import SourceSpec
    base = {"name": "web", "license": "test", "rationale": "A test source whose property is that it is small.",
            "share": 1.0}
    with pytest.raises(Exception, match="a text-folder source's documents are pieces of files, with no field"):
        SourceSpec.model_validate({**base, "loader": {"kind": "text", "paths": ["x"]}, "url_field": "url"})
    parquet = {**base, "loader": {"kind": "parquet", "paths": ["x.parquet"]}, "text_field": "text", "url_field": "u"}
    assert SourceSpec.model_validate(parquet).url_field == "u"
    jsonl = {**base, "loader": {"kind": "jsonl", "paths": ["x.jsonl"]}, "text_field": "text"}
    assert "url_field" not in SourceSpec.model_validate(jsonl).model_dump(mode="json")
    assert SourceSpec.model_validate({**jsonl, "url_field": "url"}).model_dump(mode="json")["url_field"] == "url"
