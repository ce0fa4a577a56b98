import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
from dagster._serdes import serialize_value

from mix_assets.stages.audit import assets as A
from mix_assets.config import REPO_ROOT
from mix_assets.core import layout

from mix_assets_tests.support.audit_fixtures import CANARY, EVAL_ROWS, Res, make_corpus, make_spec, standins, write_card_repo

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
        resources={"mix": Res(spec)},
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
    assert ev[A.ZERO_EVAL_OVERLAP].metadata["kept_overlap_ngrams"].value == 0
    assert ev[A.ZERO_EVAL_OVERLAP].metadata["kept_docs"].value == 100 - 4
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
    assert gate.metadata["kept_overlap_ngrams/web"].value > 0
    assert gate.metadata["kept_overlap_ngrams/books"].value > 0
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
    # the failing gate names what it held back (the UI shows those as failed, the gated asset green)
    held = ev.description.split("Held back (not run): ")[1]
    assert "contamination_report" in held and "validation_split" in held and "exclusion_masks" in held
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


def test_eval_error_through_dagster_never_quotes_the_cell(tmp_path):
    """A hub eval whose card types do not match its rows (pyarrow's cast error quotes the cell), run by
    `dagster asset materialize` (a step subprocess, compute logs captured) on a SQLite instance: the
    canary is in no file of the instance, no compute log, no storage file and not in the CLI output."""
    repo = write_card_repo(tmp_path / "castrepo", "  - name: question\n    dtype: int64\n",
                           [{"question": f"In the {CANARY} story who counted?"},
                            {"question": f"Next {CANARY} row"}])
    task = {"name": "hub_cast", "dataset": {"kind": "hub", "repo_id": str(repo), "revision": "v1.0"},
            "scored_split": "validation", "audit_splits": ["validation"], "fields": ["question"], "min_rows": 1}
    spec = make_spec(tmp_path, tasks=[task])
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "MIX_"))}
    env.update({"DAGSTER_HOME": str(home), "MIX_CONFIG": spec.config_path, "HF_HUB_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    out = subprocess.run([str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m",
                          "mix_assets.definitions", "--select", "eval_registry"],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    files = [p for p in [*home.rglob("*"), *Path(spec.storage.root).rglob("*")] if p.is_file()]
    assert any(p.suffix == ".db" for p in files) and any("compute_logs" in p.parts for p in files)
    for p in files:
        assert CANARY.encode() not in p.read_bytes(), p
    assert CANARY not in out.stdout and CANARY not in out.stderr
    assert out.returncode != 0 and "hub_cast" in out.stderr and "data/validation.parquet" in out.stderr
    assert any("hub_cast" in p.read_text(errors="replace") for p in files if p.suffix == ".err")


def test_rows_without_audited_text_are_counted_apart_and_fail_min_rows(tmp_path):
    folder = tmp_path / "evals" / "half_empty"
    folder.mkdir(parents=True)
    rows = [{"question": f"{r['question']} ({i})", "choices": r["choices"]} for i, r in enumerate(EVAL_ROWS * 8)]
    rows = rows[:30] + [{"question": None, "choices": []}] * 30
    (folder / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = {"name": "half_empty", "dataset": {"kind": "local", "path": str(folder)}, "scored_split": "validation",
            "audit_splits": ["validation"], "fields": ["question", "choices"], "min_rows": 50}
    spec = make_spec(tmp_path, tasks=[task])
    result = run(spec, selection=[A.EVAL_REGISTRY_KEY])
    ev = checks(result)[A.DENOMINATORS_NONEMPTY]
    assert not ev.passed and "half_empty" in ev.description
    assert ev.metadata["rows/half_empty"].value == 30
    meta = json.loads(Res(spec).storage.read_text(layout.EVAL_REGISTRY))["tasks"]["half_empty"]
    assert (meta["rows"], meta["empty_rows"], meta["rows_per_split"]) == (30, 30, {"validation": 30})
    full = next(m.materialization.metadata for m in result.get_asset_materialization_events())["denominators_md"]
    assert "task `half_empty` · rows 30 · empty_rows 30 · min_rows 50 ·" in full.value  # one row: a list, inline


def test_registry_of_valid_rows_has_no_empty_rows_key(tmp_path):
    """Outputs for valid inputs stay byte-identical: the count appears only when non-zero."""
    spec = make_spec(tmp_path)
    assert run(spec).success
    storage = Res(spec).storage
    assert "empty_rows" not in storage.read_text(layout.EVAL_REGISTRY)
    assert "empty_rows" not in storage.read_text(layout.CONTAMINATION_REPORT)


def test_a_recomputed_report_with_the_same_counts_shows_its_last_chart_without_drawing(tmp_path, monkeypatch):
    """contamination_report computed again (no artifact reuse) with unchanged counts takes overlap_chart from its
    last materialisation (console/metadata.chart_once): the same markdown, matplotlib never called."""
    from mix_assets.console import charts
    from mix_assets.stages.common import NO_REUSE_ENV

    spec, corpus = make_spec(tmp_path), make_corpus()
    instance = dg.DagsterInstance.ephemeral()
    first = run(spec, corpus, instance=instance)
    assert first.success
    monkeypatch.setenv(NO_REUSE_ENV, "1")
    monkeypatch.setattr(charts, "contamination_md", lambda *a, **k: (_ for _ in ()).throw(AssertionError("drawn")))
    again = run(spec, corpus, selection=[A.CONTAMINATION_REPORT_KEY], instance=instance)
    assert again.success

    def chart_of(result):
        ev = [e for e in result.get_asset_materialization_events() if e.asset_key == A.CONTAMINATION_REPORT_KEY]
        md = ev[-1].materialization.metadata
        assert "reused" not in md  # computed, not an artifact reused whole
        return md["overlap_chart"].value, md["overlap_chart_key"].value

    assert chart_of(again) == chart_of(first) and chart_of(first)[0].startswith("![")
