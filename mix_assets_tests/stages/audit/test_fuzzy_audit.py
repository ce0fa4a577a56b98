"""no_fuzzy_eval_overlap: the fuzzy contamination advisory on contamination_report (WARN, never blocks)."""

import json

import dagster as dg
import pyarrow.parquet as pq
import pytest

from mix_assets.stages.audit import assets as A
from mix_assets.stages.audit import eval_scan as audit_lib
from mix_assets.core import layout, lineage
from mix_assets.stages.manifest.builder import review_config_json
from mix_assets_tests.stages.audit.test_audit_assets import checks, run
from mix_assets_tests.support.audit_fixtures import NEAR_COPY, Res, make_corpus, make_spec


def test_a_one_word_edit_the_13gram_audit_misses_warns_and_blocks_nothing(tmp_path):
    spec = make_spec(tmp_path)
    corpus = make_corpus(near_copy=True)
    result = run(spec, corpus)
    assert result.success  # a WARN: the masks, split and everything downstream still ran
    done = {e.asset_key for e in result.get_asset_materialization_events()}
    assert dg.AssetKey("validation_split") in done
    ev = checks(result)
    assert ev[A.ZERO_EVAL_OVERLAP].passed  # the exact audit never saw the near copy
    fz = ev[A.NO_FUZZY_EVAL_OVERLAP]
    assert not fz.passed and fz.severity == dg.AssetCheckSeverity.WARN
    assert "1 document(s)" in fz.description and "books-0008" not in fz.description
    assert fz.metadata["fuzzy_only_docs"].value == 1 and fz.metadata["fuzzy_only_docs/books"].value == 1
    assert fz.metadata["leaks"].value == 0
    storage = Res(spec).storage
    docs = pq.read_table(storage.local_path(layout.FUZZY_DOCS)).to_pylist()
    exact = {d for ids in corpus.planted.values() for d in ids}
    assert {r["doc_id"] for r in docs if not r["exact_hit"]} == {"books-0008"}
    # the planted, recased and stem-only (web-0011: the stem is most of the item) copies the exact audit found
    assert {r["doc_id"] for r in docs if r["exact_hit"]} == exact
    assert all(r["tasks"] == ["demo_qa"] and r["max_jaccard"] >= 0.6 for r in docs)
    report = json.loads(storage.read_text(layout.FUZZY_REPORT))
    assert report["advisory"] and report["sources"]["books"]["tasks"]["demo_qa"]["fuzzy_only_docs"] == 1
    assert report["denominators"]["demo_qa"]["items_indexed"] == 7
    words = NEAR_COPY.lower().split()
    for key in storage.list("audit/"):  # ids and counts only
        data = open(storage.local_path(key), "rb").read().lower()
        assert " ".join(words[2:7]).encode() not in data, key


def test_without_near_copies_the_advisory_passes(tmp_path):
    spec = make_spec(tmp_path)
    result = run(spec, make_corpus())
    fz = checks(result)[A.NO_FUZZY_EVAL_OVERLAP]
    assert fz.passed and "all flagged by the 13-gram audit" in fz.description
    assert fz.metadata["matched_docs"].value == 4 and fz.metadata["indexed_items"].value == 7
    # one pass: eval_registry builds the item index once, contamination_report's map pass matches it
    storage = Res(spec).storage
    assert layout.FUZZY_INDEX_META in lineage.read_record(storage, "eval_registry")["outputs"]
    assert layout.FUZZY_DOCS in lineage.read_record(storage, "contamination_report")["outputs"]
    report = next(e.materialization for e in result.get_asset_materialization_events()
                  if e.asset_key == A.CONTAMINATION_REPORT_KEY)  # the fuzzy match's share of that pass:
    assert fz.metadata["elapsed_seconds"].value == report.metadata[A.FUZZY_SECONDS].value


def test_the_check_refuses_a_fuzzy_report_from_other_settings(tmp_path):
    spec = make_spec(tmp_path)
    run(spec, make_corpus())
    other = make_spec(tmp_path, fuzzy={"threshold": 0.7})
    with pytest.raises(audit_lib.AuditInputError, match="fuzzy_contamination.json: params .* differ"):
        audit_lib.read_fuzzy_report(Res(other).storage, other)


def test_disabled_there_is_no_check_and_the_review_config_never_holds_it(tmp_path):
    spec = make_spec(tmp_path, fuzzy={"enabled": False})
    assert A.NO_FUZZY_EVAL_OVERLAP not in checks(run(spec))
    for s in (spec, make_spec(tmp_path)):
        cfg = json.loads(review_config_json(s.model_dump(mode="json")))
        assert "fuzzy" not in cfg["audit"] and "ngram" in cfg["audit"]
