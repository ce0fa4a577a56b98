import json
import os
import sys
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
from dagster._serdes import serialize_value

from mix_assets.assets import audit as A
from mix_assets.lib import layout

from .audit_fixtures import CANARY, EVAL_ROWS, Res, make_corpus, make_spec, standins

_TEST_OPENED: list[str] = []


def _hook(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        p = os.fsdecode(args[0])
        mode = args[1] if len(args) > 1 else None
        writing = isinstance(mode, str) and any(c in mode for c in "wax")  # the fixture writing it
        if p.endswith("test.jsonl") and "/evals/" in p and not writing:
            _TEST_OPENED.append(p)


sys.addaudithook(_hook)


def run(spec, corpus=None, selection=None, instance=None):
    corpus = corpus or make_corpus()
    assets = [*standins(spec, corpus), *A.build_audit_assets(spec)]
    return dg.materialize(
        assets,
        resources={A.RESOURCE_KEY: Res(spec)},
        instance=instance or dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
        selection=selection,
    )


def not_run(result, step: str) -> bool:
    """The step was planned in this run but never executed (a blocking check upstream failed)."""
    return result.job_def.graph.has_node_named(step) and result.is_node_untouched(step)


def checks(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_planted_copies_found_masked_and_zero_after(tmp_path):
    spec = make_spec(tmp_path)
    corpus = make_corpus()
    result = run(spec, corpus)
    assert result.success
    ev = checks(result)
    assert ev[A.DENOMINATORS_NONEMPTY].passed
    assert ev[A.AUDIT_ARTIFACT_SCRUBBED].passed
    assert ev[A.ZERO_EVAL_OVERLAP].passed
    assert ev[A.ZERO_EVAL_OVERLAP].metadata["overlap_total_after_masks"].value == 0
    assert ev[A.ZERO_EVAL_OVERLAP].metadata["kept_docs_scanned"].value == 100 - 4
    storage = Res(spec).storage
    found = pq.read_table(storage.local_path(layout.CONTAMINATED_DOCS)).to_pylist()
    assert {(r["source"], r["doc_id"]) for r in found} == {
        (s, d) for s, ids in corpus.planted.items() for d in ids
    }
    assert all(r["tasks"] == ["demo_qa"] and r["overlap_ngrams"] > 0 for r in found)
    report = json.loads(storage.read_text(layout.CONTAMINATION_REPORT))
    assert report["sources"]["web"]["docs_scanned"] == 40
    assert report["sources"]["web"]["tasks"]["demo_qa"]["docs_with_overlap"] == 3
    assert report["overlap_total"] == sum(r["overlap_ngrams"] for r in found)
    assert report["denominators"]["demo_qa"]["rows"] == 4
    assert report["denominators"]["demo_qa"]["items"] == 7  # stem + each choice
    registry = json.loads(storage.read_text(layout.EVAL_REGISTRY))
    assert registry["tasks"]["demo_qa"]["rows_per_split"] == {"validation": 4}
    # WARN per source above 2 %: web 3/40 fails naming web, books 1/60 passes.
    web, books = ev[A.source_rate_check_name("web")], ev[A.source_rate_check_name("books")]
    assert not web.passed and web.severity == dg.AssetCheckSeverity.WARN and "web" in web.description
    assert books.passed
    assert not _TEST_OPENED


def test_masking_off_fails_the_gate_and_skips_downstream(tmp_path):
    spec = make_spec(tmp_path, mask=False)
    result = run(spec)
    assert not result.success
    ev = checks(result)
    gate = ev[A.ZERO_EVAL_OVERLAP]
    assert not gate.passed and gate.severity == dg.AssetCheckSeverity.ERROR
    assert gate.metadata["overlap_after_masks/web"].value > 0
    assert gate.metadata["overlap_after_masks/books"].value > 0
    assert "web" in gate.description and "books" in gate.description
    done = {e.asset_key for e in result.get_asset_materialization_events()}
    assert dg.AssetKey("exclusion_masks") in done
    assert dg.AssetKey("validation_split") not in done
    assert not_run(result, "validation_split")


def test_task_with_zero_rows_fails_denominators(tmp_path):
    spec = make_spec(tmp_path)
    empty = tmp_path / "evals" / "empty_task"
    empty.mkdir(parents=True)
    (empty / "validation.jsonl").write_text("")
    task = {"name": "empty_task", "dataset": {"kind": "local", "path": str(empty)}, "scored_split": "validation",
            "audit_splits": ["validation"], "fields": ["question"], "min_rows": 1}
    good = spec.audit.tasks[0].model_dump(mode="json")
    spec = make_spec(tmp_path, tasks=[good, task])
    result = run(spec)
    ev = checks(result)[A.DENOMINATORS_NONEMPTY]
    assert not ev.passed and "empty_task" in ev.description and "demo_qa" not in ev.description
    md = ev.metadata
    assert md["rows/empty_task"].value == 0 and md["min_rows/empty_task"].value == 1
    assert md["rows/demo_qa"].value == 4
    assert not_run(result, "contamination_report")


def test_canary_never_in_audit_outputs(tmp_path):
    spec = make_spec(tmp_path)
    instance = dg.DagsterInstance.ephemeral()
    result = run(spec, instance=instance)
    assert result.success
    root = Path(spec.storage.root)
    audited = [p for p in root.rglob("*") if p.is_file() and not p.relative_to(root).parts[0] == "raw"]
    assert any("audit" in p.parts for p in audited)
    item_words = EVAL_ROWS[2]["question"].lower().split()
    probe = " ".join(item_words[3:9])  # six consecutive item words
    for p in audited:
        data = p.read_bytes().lower()
        assert CANARY.encode() not in data, p
        assert probe.encode() not in data, p
    logs = serialize_value(instance.all_logs(result.run_id)).lower()
    assert CANARY not in logs and probe not in logs
    assert "quartermaster" not in logs


def test_scrub_check_names_the_leaking_file_not_the_text(tmp_path):
    spec = make_spec(tmp_path)
    instance = dg.DagsterInstance.ephemeral()
    assert run(spec, instance=instance).success
    storage = Res(spec).storage
    leak = EVAL_ROWS[0]["question"]
    storage.write_text("audit/debug_dump.json", json.dumps({"sample_match": leak.upper()}))
    result = run(spec, instance=instance, selection=[A.CONTAMINATION_REPORT_KEY])
    ev = checks(result)[A.AUDIT_ARTIFACT_SCRUBBED]
    assert not ev.passed and "audit/debug_dump.json" in ev.description
    assert "lighthouse" not in ev.description.lower()
    assert not result.success
