"""A failed gate fails its run with one summary: which gate, why, what was held back, what is still published.

The UI opens a finished run's log scrolled to its end, and the last rows are the run's RUN_FAILURE
event: it repeats the error of the first failed step. So the failed gate's step carries the summary
as its error (`common.gated`), and the run is tagged with the gate and the revision still published
(the Runs list shows user tags). The check evaluations and the gated asset's materialization are
recorded as before, and Dagster still skips everything downstream.
"""

from __future__ import annotations

import json

import dagster as dg
import yaml

from mix_assets.stages.audit import assets as A
from mix_assets.stages.common import FAILED_GATE_TAG, STILL_PUBLISHED_TAG
from mix_assets.config import load_spec
from mix_assets_tests.stages.audit.test_audit_assets import checks, not_run
from mix_assets_tests.support.audit_fixtures import Res, make_corpus, make_spec, standins

REV = "rev-0123456789abcdef"


@dg.asset(key="published_revision", deps=["validation_split"])
def _published_revision() -> None:
    """Stand-in for the publish step at the bottom of the graph."""


def run(spec, instance, publish: bool = True):
    """The audit stage between stand-ins, with a stand-in published_revision below validation_split."""
    assets = [*standins(spec, make_corpus()), *A.build_audit_assets(spec), *([_published_revision] if publish else [])]
    return dg.materialize(assets, resources={"mix": Res(spec)}, instance=instance, raise_on_error=False)


def _spec(tmp_path, published: str | None, **kw):
    """The audit fixture's mix with its own publish target; `published`: the revision `latest` names."""
    spec = make_spec(tmp_path, **kw)
    data = yaml.safe_load(open(spec.config_path))
    data["publish"] = {"url": str(tmp_path / "published")}
    with open(spec.config_path, "w") as fh:
        yaml.safe_dump(data, fh, sort_keys=False)
    if published is not None:
        (tmp_path / "published" / published).mkdir(parents=True)
        (tmp_path / "published" / published / "manifest.json").write_text("{}")
        (tmp_path / "published" / "latest").write_text(json.dumps({"revision": published}))
    return load_spec(spec.config_path)


def _run_failure(instance, result) -> tuple[str, str]:
    """(message, error message) of the run's RUN_FAILURE event: the row the run page opens on."""
    (rec,) = instance.all_logs(result.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    return rec.dagster_event.message, rec.dagster_event.event_specific_data.error.message


def test_failed_gate_summary_names_gate_reason_held_back_and_published_revision(tmp_path):
    spec = _spec(tmp_path, REV, mask=False)
    instance = dg.DagsterInstance.ephemeral()
    result = run(spec, instance=instance)
    assert not result.success
    _, err = _run_failure(instance, result)
    assert "Gate exclusion_masks:zero_eval_overlap failed: kept documents still overlap the eval registry in " \
           "sources: web, books" in err, err
    assert "Held back (not run): published_revision, validation_split." in err, err
    assert f"Still published: {REV} ({tmp_path / 'published'}/latest); this run published nothing." in err, err
    assert "blocking asset check failed" not in err  # Dagster's generic message is replaced, not added to
    tags = instance.get_run_by_id(result.run_id).tags
    assert tags[FAILED_GATE_TAG] == "exclusion_masks:zero_eval_overlap" and tags[STILL_PUBLISHED_TAG] == REV
    # the same step failure (the run page's "Errored" step), with the parts as metadata
    (failure,) = result.get_step_failure_events()
    assert failure.step_key == "exclusion_masks_zero_eval_overlap"
    meta = failure.step_failure_data.user_failure_data.metadata
    assert meta["held_back"].value == "published_revision, validation_split"
    assert meta["still_published"].value == REV
    # nothing else changed: the check is recorded as failed, the gated asset materialized, downstream skipped
    assert not checks(result)[A.ZERO_EVAL_OVERLAP].passed
    assert dg.AssetKey("exclusion_masks") in {e.asset_key for e in result.get_asset_materialization_events()}
    assert not_run(result, "validation_split")


def test_gate_inside_an_asset_and_nothing_published_yet(tmp_path):
    """A gate evaluated in its asset's own step (eval_registry's denominators_nonempty), no `latest` yet."""
    good = make_spec(tmp_path).audit.tasks[0].model_dump(mode="json")
    empty = tmp_path / "evals" / "empty_task"
    empty.mkdir(parents=True)
    (empty / "validation.jsonl").write_text("")
    task = {"name": "empty_task", "dataset": {"kind": "local", "path": str(empty)}, "scored_split": "validation",
            "audit_splits": ["validation"], "fields": ["question"], "min_rows": 1}
    spec = _spec(tmp_path, None, tasks=[good, task])
    instance = dg.DagsterInstance.ephemeral()
    result = run(spec, instance=instance)
    _, err = _run_failure(instance, result)
    assert "Gate eval_registry:denominators_nonempty failed: " in err and "empty_task" in err, err
    assert "Held back (not run): contamination_report, exclusion_masks, published_revision, validation_split." in err, err
    assert f"Nothing is published at {tmp_path / 'published'} yet (no latest)." in err, err
    assert instance.get_run_by_id(result.run_id).tags[STILL_PUBLISHED_TAG] == "none"
    assert dg.AssetKey("eval_registry") in {e.asset_key for e in result.get_asset_materialization_events()}
    assert not_run(result, "contamination_report")


def test_unreadable_latest_is_said_not_hidden(tmp_path):
    spec = _spec(tmp_path, None, mask=False)
    (tmp_path / "published").mkdir()
    (tmp_path / "published" / "latest").write_text("not json")
    instance = dg.DagsterInstance.ephemeral()
    _, err = _run_failure(instance, run(spec, instance=instance))
    assert "Gate exclusion_masks:zero_eval_overlap failed" in err
    assert f"Published revision: unknown ({tmp_path / 'published'}/latest cannot be read: JSONDecodeError" in err, err


def test_a_run_without_the_publish_step_does_not_claim_it_published_nothing(tmp_path):
    """Only a run that held published_revision back says "this run published nothing"."""
    spec = _spec(tmp_path, REV, mask=False)
    instance = dg.DagsterInstance.ephemeral()
    _, err = _run_failure(instance, run(spec, instance=instance, publish=False))
    assert "Held back (not run): validation_split." in err, err
    assert f"Published now: {REV} ({tmp_path / 'published'}/latest)." in err and "Still published" not in err, err


def test_passing_and_warning_checks_leave_the_run_alone(tmp_path):
    """Masks on: the gate passes; contamination_rate_ok_web fails as a WARN (non-blocking): no failure, no tag."""
    spec = _spec(tmp_path, REV)
    instance = dg.DagsterInstance.ephemeral()
    result = run(spec, instance=instance)
    assert result.success
    assert not checks(result)[A.source_rate_check_name("web")].passed
    assert FAILED_GATE_TAG not in instance.get_run_by_id(result.run_id).tags
