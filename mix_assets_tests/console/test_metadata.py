"""mix_assets/console/metadata.py as the UI shows it: tables cut to the columns that decide (the UI cuts a wider one
at 1,600 px) with every column beside them as Markdown, counts and shares formatted, samples shown literally."""

import re
from types import SimpleNamespace

import dagster as dg
import numpy as np
import pyarrow as pa
from markdown_it import MarkdownIt

from mix_assets.console import metadata as md
from mix_assets.console import charts
from mix_assets.stages.filters import metadata as filters_md

MAX_UI_COLUMNS = 3  # what the asset page shows of a table at 1,600 px (~450 px: kill_rates showed 3.5 of 8)
_MD = MarkdownIt("commonmark").enable("table")  # the UI renders metadata Markdown with GFM (react-markdown)


class _Storage:
    def uri(self, key: str) -> str:
        return f"/store/{key}"


def _columns(v: dg.TableMetadataValue) -> list[str]:
    return [c.name for c in v.schema.columns]


def _cells(v: dg.TableMetadataValue, column: str) -> list:
    return [r.data[column] for r in v.records]


def _full_columns(v: dg.MarkdownMetadataValue) -> list[str]:
    """The columns of a `<table>_md`: its header, or (a short one, shown inline) its first row's pairs."""
    text = v.value
    if text.startswith("| "):
        return [c.strip() for c in text.splitlines()[0].strip("| ").split(" | ")]
    return re.findall(r"(?:^- | · )(\w+) ", text.splitlines()[0])


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
    got = filters_md.document_filters(_Storage(), _filter_summary(), ([], 0), [])
    cols = _columns(got["kill_rates"])
    assert len(cols) <= MAX_UI_COLUMNS and cols[0] == "source" and "kill_share" in cols
    assert _full_columns(got["kill_rates_md"]) == filters_md.KILL_COLUMNS
    assert len(_columns(got["domains"])) <= MAX_UI_COLUMNS and "kept_share" in _columns(got["domains"])
    assert isinstance(got["domains_md"], dg.MarkdownMetadataValue)
    assert _full_columns(got["composition"]) == filters_md.FILTER_COMPOSITION_COLUMNS  # Markdown only
    assert _columns(filters_md.kill_rates_expected(_filter_summary())["kill_rates"]) == cols


def test_exclusion_masks_composition_keeps_what_its_gates_read(tmp_path):
    import pyarrow.parquet as pq

    from mix_assets.stages.dedup.dedup import EXCLUSION_SCHEMA

    pq.write_table(EXCLUSION_SCHEMA.empty_table(), tmp_path / "masks.parquet")
    storage = SimpleNamespace(uri=lambda k: f"/store/{k}", source=lambda k: str(tmp_path / "masks.parquet"))
    comp = [{"source": s, "docs_before": 20_000, "docs_after": 18_000, "bytes_before": 9_000_000,
             "bytes_after": 8_000_000, "tokens_before": 2_500_000, "tokens_after": 2_000_000, "share_before": 0.5,
             "share_after": 0.48, "lost_token_share": 0.2} for s in ("web", "code")]
    m = SimpleNamespace(documents=40_000, excluded_docs=4_000, per_reason={"exact_dup": 3_000, "near_dup": 1_000},
                        mask_contaminated=True, composition=comp, samples=[], contaminated_ids=[], contaminated_docs=0)
    got = md.exclusion_masks(storage, "masks", m)
    cols = _columns(got["composition"])
    assert len(cols) <= MAX_UI_COLUMNS and cols[0] == "source", cols
    assert {"tokens_after", "lost_token_share"} <= set(cols)  # source_budgets_met, source_loss_within_limit
    assert _cells(got["composition"], "tokens_after") == ["2,000,000", "2,000,000"]
    assert _cells(got["composition"], "lost_token_share") == ["20.0%", "20.0%"]
    assert _full_columns(got["composition_md"]) == md.COMPOSITION_COLUMNS


def _scan():
    tally = SimpleNamespace(
        overlap_total=1_500, contaminated={"web": 3, "code": 0}, docs_scanned={"web": 12_000, "code": 800},
        overlap_ngrams={"web": np.array([1_500]), "code": np.array([0])})
    rows = [{"source": s, "task": "demo_qa", "docs_scanned": n, "docs_with_overlap": d, "overlap_ngrams": o,
             "registry_ngrams": 98_765} for s, n, d, o in (("web", 12_000, 3, 1_500), ("code", 800, 0, 0))]
    return SimpleNamespace(tally=tally, masked_docs=0, rows=lambda: rows)


def test_overlap_table_keeps_its_deciding_figure():
    got = md.zero_eval_overlap(_scan())
    cols = _columns(got["overlap"])
    assert len(cols) <= MAX_UI_COLUMNS and cols[:2] == ["source", "task"] and "overlap_ngrams" in cols
    assert _cells(got["overlap"], "overlap_ngrams") == ["1,500", "0"]
    assert "registry_ngrams" in _full_columns(got["overlap_md"]) and "98,765" in got["overlap_md"].value


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


def test_per_source_is_a_table_not_a_json_blob():
    sources = {s: {"train_tokens": 1_000_000, "val_tokens": 10_000, "budget_tokens": 1_000_000, "epochs": 1.0,
                   "unique_documents": 4_321} for s in ("web", "code")}
    m = {"fingerprint": "f" * 64, "files": [], "sources": sources,
         "totals": {k: 1 for k in ("train_tokens", "val_tokens", "train_samples", "val_samples", "shards",
                                   "dropped_tail_tokens")}}
    got = md.manifest(_Storage(), "mix/manifest.json", m)
    assert isinstance(got["per_source"], dg.TableMetadataValue), type(got["per_source"])
    assert _cells(got["per_source"], "source") == ["web", "code"]
    assert _cells(got["per_source"], "train_tokens") == ["1,000,000", "1,000,000"]
    assert len(_columns(got["per_source"])) <= MAX_UI_COLUMNS
    assert "unique_documents" in got["per_source_md"].value and "4,321" in got["per_source_md"].value


def test_fuzzy_figures_appear_once_per_task_and_once_per_source():
    tasks = ("qa", "math")
    report = {
        "docs_scanned": 300, "docs_matched": 2, "fuzzy_only_docs": 1,
        "params": {"threshold": 0.8, "shingle": 5, "num_perm": 128},
        "denominators": {t: {"items_indexed": 1_000 + i, "items_matched": i, "items_too_short": 7} for i, t in
                         enumerate(tasks)},
        "sources": {s: {"docs_scanned": 100 * (j + 1), "docs_matched": j, "fuzzy_only_docs": 0,
                        "tasks": {t: {"docs_matched": j, "fuzzy_only_docs": 0} for t in tasks}}
                    for j, s in enumerate(("web", "code"))},
    }
    got = SimpleNamespace(report=report, docs=pa.table({"doc_id": pa.array([], pa.string())}))
    meta = md.fuzzy_contamination(_Storage(), "audit/fuzzy.json", "audit/fuzzy_docs.parquet", got, 1.0)
    # a source x task row holds only that pair's figures: no per-task or per-source value repeated on it
    assert _full_columns(meta["matches_md"]) == ["source", "task", "docs_matched", "fuzzy_only_docs"]
    assert _columns(meta["matches"]) == ["source", "task", "fuzzy_only_docs"] and len(meta["matches"].records) == 4
    for key in ("matches", "sources", "tasks"):
        assert len(_columns(meta[key])) <= MAX_UI_COLUMNS, key
    assert _cells(meta["tasks"], "task") == list(tasks) and _cells(meta["tasks"], "items_indexed") == ["1,000", "1,001"]
    assert _cells(meta["sources"], "docs_scanned") == ["100", "200"]


def test_reject_samples_render_literally():
    """A stored text is shown as it is: `object.__add__(self, other)` was a bold "add" (Markdown emphasis)."""
    rows = [_sample("object.__add__(self, other) returns *new* <b>x</b> | a `tick` [l](http://x)"),
            _sample("``` fenced? ```", reason="", doc_id="web_1__x__")]
    rows[1]["filter"] = "kept"
    out = filters_md.document_filters(_Storage(), _filter_summary(), (rows, 0), [])["rejects"].value
    html = _MD.render(out)
    assert "<code>object.__add__(self, other) returns *new* &lt;b&gt;x&lt;/b&gt; | a `tick` [l](http://x)</code>" in html
    assert "<strong>add</strong>" not in html and "<em>new</em>" not in html and "<a href" not in html
    assert "<code>``` fenced? ```</code>" in html and "<code>web_1__x__</code>" in html
    assert "<code>gopher_quality:alpha_words 0.78 &lt; 0.80</code>" in html  # the figure beside its threshold


def test_dup_samples_on_exclusion_masks_render_literally(tmp_path):
    import pyarrow.parquet as pq

    from mix_assets.stages.dedup.dedup import EXCLUSION_SCHEMA

    pq.write_table(EXCLUSION_SCHEMA.empty_table(), tmp_path / "masks.parquet")
    storage = SimpleNamespace(uri=lambda k: f"/store/{k}", source=lambda k: str(tmp_path / "masks.parquet"))
    dup = SimpleNamespace(reason="near_dup", excluded="a__b__", kept="c", jaccard=0.91,
                          excluded_text="object.__add__(self, other)", kept_text="def __init__(self):")
    comp = [{c: 1 for c in md.COMPOSITION_COLUMNS} | {"source": "web"}]
    m = SimpleNamespace(documents=2, excluded_docs=1, per_reason={"exact_dup": 0, "near_dup": 1},
                        mask_contaminated=True, composition=comp, samples=[dup], contaminated_ids=["x__y__"],
                        contaminated_docs=1)
    html = _MD.render(md.exclusion_masks(storage, "masks", m)["rejects"].value)
    assert "<code>object.__add__(self, other)</code>" in html and "<code>def __init__(self):</code>" in html
    assert "<strong>" not in html.replace("<strong>near_dup</strong>", "").replace(
        "<strong>exact_dup</strong>", "").replace("<strong>contaminated</strong>", "")


def test_code_span_holds_any_backticks():
    for text in ["plain", "a `b` c", "``double``", "`edge", "edge`", " both ", "a|b", "x\ny"]:
        html = _MD.render("| t |\n|---|\n" + charts.markdown_table([{"t": charts.code_span(text)}]).split("\n", 2)[2])
        inner = html.split("<code>", 1)[1].split("</code>", 1)[0]
        assert inner == " ".join(text.splitlines()).replace("&", "&amp;").replace("<", "&lt;"), (text, html)
