"""stages/audit/metadata.py as the UI shows it: the overlap table keeps its deciding figure, the fuzzy figures
appear once each."""

from types import SimpleNamespace

import numpy as np
import pyarrow as pa

from mix_assets.stages.audit import metadata as md
from mix_assets_tests.support.metadata_views import MAX_UI_COLUMNS, FakeStorage, cells, columns, full_columns


def _scan():
    tally = SimpleNamespace(
        overlap_total=1_500, contaminated={"web": 3, "code": 0}, docs_scanned={"web": 12_000, "code": 800},
        overlap_ngrams={"web": np.array([1_500]), "code": np.array([0])})
    rows = [{"source": s, "task": "demo_qa", "docs_scanned": n, "docs_with_overlap": d, "overlap_ngrams": o,
             "registry_ngrams": 98_765} for s, n, d, o in (("web", 12_000, 3, 1_500), ("code", 800, 0, 0))]
    return SimpleNamespace(tally=tally, masked_docs=0, rows=lambda: rows)


def test_overlap_table_keeps_its_deciding_figure():
    got = md.zero_eval_overlap(_scan())
    cols = columns(got["overlap"])
    assert len(cols) <= MAX_UI_COLUMNS and cols[:2] == ["source", "task"] and "overlap_ngrams" in cols
    assert cells(got["overlap"], "overlap_ngrams") == ["1,500", "0"]
    assert "registry_ngrams" in full_columns(got["overlap_md"]) and "98,765" in got["overlap_md"].value


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
    meta = md.fuzzy_contamination(FakeStorage(), "audit/fuzzy.json", "audit/fuzzy_docs.parquet", got, 1.0)
    # a source x task row holds only that pair's figures: no per-task or per-source value repeated on it
    assert full_columns(meta["matches_md"]) == ["source", "task", "docs_matched", "fuzzy_only_docs"]
    assert columns(meta["matches"]) == ["source", "task", "fuzzy_only_docs"] and len(meta["matches"].records) == 4
    for key in ("matches", "sources", "tasks"):
        assert len(columns(meta[key])) <= MAX_UI_COLUMNS, key
    assert cells(meta["tasks"], "task") == list(tasks) and cells(meta["tasks"], "items_indexed") == ["1,000", "1,001"]
    assert cells(meta["sources"], "docs_scanned") == ["100", "200"]

