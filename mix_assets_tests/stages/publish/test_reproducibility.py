"""fingerprint_reproduced: a rebuild is compared with the revision last published from the same root."""

import json

import dagster as dg
import pytest

from mix_assets.stages.publish.reproducibility import FINGERPRINT_REPRODUCED, build_reproducibility_checks
from mix_assets.core import layout, lineage
from mix_assets.stages.publish import publish as pub
from mix_assets.stages.publish.input_keys import input_keys
from mix_assets.resources import MixResource
from mix_assets_tests.conftest import minimal_config, source, write_config
from mix_assets_tests.support.synthetic_mix import build_synthetic_mix


@pytest.fixture()
def mix(tmp_path):
    cfg = write_config(tmp_path, minimal_config(
        sources=[source("web", {"kind": "jsonl", "paths": ["web.jsonl"]})],
        publish={"url": str(tmp_path / "published")}))
    return MixResource(config_path=str(cfg))


@dg.asset(name="manifest")
def _manifest() -> None:
    """Stand-in: the test writes mix/ itself before each run."""


_STABLE_NUMBERS = {"n_drifts", "n_files_changed"}


def _evaluate(mix: MixResource) -> dg.AssetCheckEvaluation | None:
    """The check's evaluation, or None when it reported nothing (the UI shows "Skipped")."""
    checks = build_reproducibility_checks({dg.AssetKey("manifest")})
    res = dg.materialize([_manifest, *checks], resources={"mix": mix}, raise_on_error=False,
                         instance=dg.DagsterInstance.ephemeral())
    evs = [e for e in res.get_asset_check_evaluations() if e.check_name == FINGERPRINT_REPRODUCED]
    assert evs or res.success  # a skipped check fails nothing
    for ev in evs:  # numeric keys are the same on every evaluation (unbroken lines in Plots)
        assert _STABLE_NUMBERS <= set(ev.metadata), ev.metadata
    return evs[0] if evs else None


def _build(mix: MixResource, **kw) -> dict:
    root = mix.storage.root
    import shutil

    shutil.rmtree(f"{root}/{layout.MIX_DIR}", ignore_errors=True)
    return build_synthetic_mix(f"{root}/{layout.MIX_DIR}", **kw)


def _publish(mix: MixResource) -> None:
    target = pub.LocalTarget(mix.spec.resolve(mix.spec.publish.url))
    result = pub.publish(f"{mix.storage.root}/{layout.MIX_DIR}", target)
    mix.storage.write_text(layout.PUBLISHED, json.dumps(result.to_json()))


def _meta(ev, key):
    return ev.metadata[key].value


def test_no_publication_yet_then_reproduced(mix):
    _build(mix, seed=0)
    assert _evaluate(mix) is None  # nothing to compare with: skipped, not passed
    _publish(mix)
    manifest = _build(mix, seed=0)  # the same inputs rebuild the same bytes
    ev = _evaluate(mix)
    assert ev.passed and _meta(ev, "n_drifts") == 0
    assert _meta(ev, "published_fingerprint") == manifest["fingerprint"]
    assert ev.description.startswith("rebuild reproduced the published fingerprint")


def test_drift_fails_and_names_the_file_and_the_count(mix):
    first = _build(mix, seed=0, train_shards=(5, 4, 3))
    _publish(mix)
    budgets = {s: v["budget_tokens"] for s, v in first["sources"].items()}
    _build(mix, seed=0, train_shards=(5, 4, 4), budgets=budgets)  # same config, one more sample in the last shard
    ev = _evaluate(mix)
    assert not ev.passed and ev.severity == dg.AssetCheckSeverity.ERROR
    drift = _meta(ev, "drift_md")
    assert "train/train-00002.bin" in drift and "splits.train.samples" in drift and "totals.train_samples" in drift
    rows = {(r.data["kind"], r.data["what"]) for r in _meta(ev, "drift").records}
    assert ("file_changed", "train/train-00002.bin") in rows
    assert _meta(ev, "n_files_changed") == sum(k.startswith("file_") for k, _ in rows)
    assert ("count_changed", "splits.train.samples") in rows
    # unchanged shards are not reported
    assert not any("train-00000" in w for _, w in rows)


def test_changed_config_is_skipped_not_drift(mix, tmp_path):
    _build(mix, seed=0)
    _publish(mix)
    manifest = _build(mix, seed=1)
    manifest["config_sha256"] = "1" * 64
    (tmp_path / "storage" / layout.MANIFEST).write_text(json.dumps(manifest))
    assert _evaluate(mix) is None  # a new fingerprint is expected: nothing comparable, skipped


def test_missing_published_manifest_fails(mix, tmp_path):
    _build(mix, seed=0)
    mix.storage.write_text(layout.PUBLISHED, json.dumps({"revision": "rev-gone", "location": "nowhere"}))
    (tmp_path / "published").mkdir()
    ev = _evaluate(mix)
    assert not ev.passed and "rev-gone" in ev.description and "missing" in ev.description
    assert _meta(ev, "n_drifts") == 0


def test_skipped_check_says_why_on_its_page():
    """A check with no result reads "Skipped" in the UI with no text of its own: the check's description
    (its page's "About") names both cases and says a skip is not a pass."""
    (checks_def,) = build_reproducibility_checks({dg.AssetKey("manifest")})
    (spec,) = checks_def.check_specs
    assert spec.name == FINGERPRINT_REPRODUCED
    text = spec.description
    assert "Skipped (no result, grey) when there is nothing to compare with" in text, text
    assert "nothing published yet from this storage root" in text and "the config changed since" in text, text
    assert "Skipped is not a pass" in text, text


def test_drift_fails_the_run_with_the_gate_summary(mix):
    """A drifted rebuild fails its step with the gate summary (common.gated), naming what is still published."""
    first = _build(mix, seed=0, train_shards=(5, 4, 3))
    _publish(mix)
    budgets = {s: v["budget_tokens"] for s, v in first["sources"].items()}
    _build(mix, seed=0, train_shards=(5, 4, 4), budgets=budgets)
    checks = build_reproducibility_checks({dg.AssetKey("manifest")})
    res = dg.materialize([_manifest, *checks], resources={"mix": mix}, raise_on_error=False,
                         instance=dg.DagsterInstance.ephemeral())
    (failure,) = res.get_step_failure_events()
    err = failure.step_failure_data.error.message
    rev = pub.read_latest(pub.LocalTarget(mix.spec.resolve(mix.spec.publish.url)))
    assert f"Gate manifest:{FINGERPRINT_REPRODUCED} failed: fingerprint drift: published " in err, err
    assert f"Published now: {rev} (" in err, err  # no published_revision in this run: nothing held back


def _lineage(mix: MixResource, raw_version: str) -> None:
    """A manifest chain in storage: raw/web (a root) -> manifest."""
    lineage.write_record(mix.storage, "raw/web", {"raw/web/documents.parquet": raw_version}, {}, "code-raw")
    rec = lineage.read_record(mix.storage, "raw/web")
    lineage.write_record(mix.storage, "manifest", {layout.MANIFEST: "m"}, {"raw/web": rec["data_version"]},
                         "code-manifest")


def _publish_with_keys(mix: MixResource) -> None:
    """As `published_revision` records it: the publication with the revision's input keys."""
    _publish(mix)
    record = json.loads(mix.storage.read_text(layout.PUBLISHED))
    mix.storage.write_text(layout.PUBLISHED, json.dumps({**record, "input_keys": input_keys(mix.storage)}))


def test_same_input_keys_and_other_bytes_fail_blocking(mix):
    first = _build(mix, seed=0, train_shards=(5, 4, 3))
    _lineage(mix, "a" * 64)
    _publish_with_keys(mix)
    budgets = {s: v["budget_tokens"] for s, v in first["sources"].items()}
    _build(mix, seed=0, train_shards=(5, 4, 4), budgets=budgets)
    ev = _evaluate(mix)
    assert not ev.passed and ev.severity == dg.AssetCheckSeverity.ERROR
    assert "count(s) differ with the same input keys" in ev.description, ev.description
    assert _meta(ev, "input_keys_changed") == "" and "train/train-00002.bin" in _meta(ev, "drift_md")


def test_changed_input_keys_pass_with_the_revision_diff(mix):
    first = _build(mix, seed=0, train_shards=(5, 4, 3))
    _lineage(mix, "a" * 64)
    _publish_with_keys(mix)
    budgets = {s: v["budget_tokens"] for s, v in first["sources"].items()}
    _build(mix, seed=0, train_shards=(5, 4, 4), budgets=budgets)
    _lineage(mix, "b" * 64)  # raw/web read other documents
    ev = _evaluate(mix)
    assert ev.passed and ev.description.startswith("new revision: input keys changed (raw/web)"), ev.description
    assert _meta(ev, "input_keys_changed") == "raw/web"
    diff = _meta(ev, "revision_diff_json")
    assert "train/train-00002.bin" in diff["files"]["changed"] and _meta(ev, "n_files_changed") >= 1
    assert {r.data["source"] for r in _meta(ev, "revision_diff").records} == {r["source"] for r in diff["sources"]}
    assert "revision diff: " in _meta(ev, "revision_diff_md")


def test_changed_config_with_input_keys_is_a_new_revision(mix, tmp_path):
    _build(mix, seed=0)
    _lineage(mix, "a" * 64)
    _publish_with_keys(mix)
    manifest = _build(mix, seed=1)
    manifest["config_sha256"] = "1" * 64
    (tmp_path / "storage" / layout.MANIFEST).write_text(json.dumps(manifest))
    ev = _evaluate(mix)
    assert ev.passed and "input keys changed (the config)" in ev.description, ev.description
