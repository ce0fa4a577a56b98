"""mix_assets/console/metadata.py as the UI shows it: tables cut to the columns that decide (the UI cuts a wider one
at 1,600 px) with every column beside them as Markdown, counts and shares formatted, samples shown literally."""

from types import SimpleNamespace

import dagster as dg

from mix_assets.console import metadata as md
from mix_assets.console import charts
from mix_assets.stages.filters import metadata as filters_md
from mix_assets_tests.support.metadata_views import MARKDOWN, MAX_UI_COLUMNS, FakeStorage, columns, full_columns


def _kills():
    return [{"source": "web", "filter": f, "docs": 1_234_567, "failed_docs": 150_000, "kill_share": 0.1215,
             "killed_bytes_share": 0.09, "first_failure_docs": 120_000, "max_kill_share": 0.5}
            for f in ("gopher_quality", "c4")]


def _filter_summary():
    comp = [{"source": "web", "language": "en", "length_bucket": "< 200 chars", "docs_before": 10_000,
             "docs_after": 9_000, "bytes_before": 1_000_000, "bytes_after": 900_000, "kept_share": 0.9}]
    domains = [{"kind": "source", "domain": "web", "docs_before": 10_000, "docs_after": 9_000, "kept_share": 0.9}]
    return SimpleNamespace(kills=_kills(), composition=comp, domains=domains, documents=10_000, kept=9_000,
                           over_expected=[])


def _sample(text: str, reason="gopher_quality:alpha_words 0.78 < 0.80", doc_id="web-000017"):
    return {"source": "web", "filter": "gopher_quality", "doc_id": doc_id, "reason": reason, "text": text}


def test_kill_rates_keep_the_deciding_columns_and_the_full_table_beside_them():
    got = filters_md.document_filters(FakeStorage(), _filter_summary(), ([], 0), [])
    cols = columns(got["kill_rates"])
    assert len(cols) <= MAX_UI_COLUMNS and cols[0] == "source" and "kill_share" in cols
    assert full_columns(got["kill_rates_md"]) == filters_md.KILL_COLUMNS
    assert len(columns(got["domains"])) <= MAX_UI_COLUMNS and "kept_share" in columns(got["domains"])
    assert isinstance(got["domains_md"], dg.MarkdownMetadataValue)
    assert full_columns(got["composition"]) == filters_md.FILTER_COMPOSITION_COLUMNS  # Markdown only
    assert columns(filters_md.kill_rates_expected(_filter_summary())["kill_rates"]) == cols


def test_every_table_is_narrow_enough_and_formats_its_numbers():
    rows = [{"name": "a", "count": 1_234_567, "kept_share": 0.1234, "tiny_share": 0.00123, "zero_share": 0.0,
             "ratio": 3.14159, "flag": True}]
    t = md.table(rows)
    assert [r.data for r in t.records] == [{"name": "a", "count": "1,234,567", "kept_share": "12.3%",
                                             "tiny_share": "0.12%", "zero_share": "0%", "ratio": "3.142",
                                             "flag": "yes"}]
    assert {c.name: c.type for c in t.schema.columns}["count"] == "int"  # the schema keeps the kind of value
    assert "| a | 1,234,567 | 12.3% | 0.12% | 0% | 3.142 | yes |" in md.markdown_table(rows * 20).value


def test_a_full_table_the_ui_would_show_inline_is_a_list_that_wraps():
    """Markdown under 1,000 characters shows inline, where a wide table is cut like a table entry."""
    rows = [{"source": "python_reference", "filter": "gopher_repetition", "docs": 1_234_567, "kill_share": 0.5}]
    short = md.markdown_table(rows).value
    assert len(short) < md.MD_INLINE_CHARS and not short.startswith("|")
    assert short == "- source `python_reference` · filter `gopher_repetition` · docs 1,234,567 · kill_share 50.0%"
    long = md.markdown_table(rows * 40).value  # shown in a dialog, as wide as the page: a table
    assert len(long) >= md.MD_INLINE_CHARS and long.startswith("| source | filter | docs | kill_share |")
    assert md.markdown_table(rows, ["source", "docs"]).value.startswith("| source | docs |")  # narrow: a table


def test_reject_samples_render_literally():
    """A stored text is shown as it is: `object.__add__(self, other)` was a bold "add" (Markdown emphasis)."""
    rows = [_sample("object.__add__(self, other) returns *new* <b>x</b> | a `tick` [l](http://x)"),
            _sample("``` fenced? ```", reason="", doc_id="web_1__x__")]
    rows[1]["filter"] = "kept"
    out = filters_md.document_filters(FakeStorage(), _filter_summary(), (rows, 0), [])["rejects"].value
    html = MARKDOWN.render(out)
    assert "<code>object.__add__(self, other) returns *new* &lt;b&gt;x&lt;/b&gt; | a `tick` [l](http://x)</code>" in html
    assert "<strong>add</strong>" not in html and "<em>new</em>" not in html and "<a href" not in html
    assert "<code>``` fenced? ```</code>" in html and "<code>web_1__x__</code>" in html
    assert "<code>gopher_quality:alpha_words 0.78 &lt; 0.80</code>" in html  # the figure beside its threshold


def test_code_span_holds_any_backticks():
    for text in ["plain", "a `b` c", "``double``", "`edge", "edge`", " both ", "a|b", "x\ny"]:
        html = MARKDOWN.render("| t |\n|---|\n" + charts.markdown_table([{"t": charts.code_span(text)}]).split("\n", 2)[2])
        inner = html.split("<code>", 1)[1].split("</code>", 1)[0]
        assert inner == " ".join(text.splitlines()).replace("&", "&amp;").replace("<", "&lt;"), (text, html)


def test_a_stored_chart_is_drawn_once_per_parameters(tmp_path):
    """console/metadata.stored_chart: the second ask with the same parameters reads what the first drew (no
    matplotlib), other parameters draw again; without a storage it always draws."""
    from mix_assets.core.storage import Storage

    storage, drawn = Storage(str(tmp_path)), []

    def draw(tag):
        drawn.append(tag)
        return f"chart {tag}"

    p = {"bands": 9, "rows": 13, "threshold": 0.8}
    assert md.stored_chart(storage, "s_curve", p, lambda: draw("a")) == "chart a"
    assert md.stored_chart(storage, "s_curve", dict(p), lambda: draw("b")) == "chart a"
    assert md.stored_chart(storage, "s_curve", {**p, "threshold": 0.7}, lambda: draw("c")) == "chart c"
    assert md.stored_chart(None, "s_curve", p, lambda: draw("d")) == "chart d"
    assert drawn == ["a", "c", "d"]

def test_a_chart_drawn_from_the_same_inputs_is_taken_from_the_last_materialisation():
    drawn = []

    def draw(v):
        drawn.append(v)
        return f"chart of {v}"

    first = md.chart_once("overlap_chart", {"web": 3}, lambda: draw(3))
    assert drawn == [3] and first["overlap_chart"].value == "chart of 3"
    again = md.chart_once("overlap_chart", {"web": 3}, lambda: draw(3), previous=first)
    assert drawn == [3] and again == first  # not drawn: the same key names the same bytes
    other = md.chart_once("overlap_chart", {"web": 4}, lambda: draw(4), previous=first)
    assert drawn == [3, 4] and other["overlap_chart"].value == "chart of 4"
    assert other["overlap_chart_key"] != first["overlap_chart_key"]
    # a previous materialisation without the key (older code) or without the chart: drawn
    for prev in ({"overlap_chart": first["overlap_chart"]}, {"overlap_chart_key": first["overlap_chart_key"]}):
        md.chart_once("overlap_chart", {"web": 3}, lambda: draw(3), previous=prev)
    assert drawn == [3, 4, 3, 3]
