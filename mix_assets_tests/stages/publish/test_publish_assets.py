"""published_revision + published_readable_from_empty_cache through Dagster (local and SeaweedFS targets)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest

from mix_assets.stages.manifest.assets import SHARDS_AUDIT_RECORD
from mix_assets.stages.publish.assets import PUBLISHED_READABLE, build_publish_assets
from mix_assets.stages.publish.target import read_only_target
from mix_assets.config import parse_spec
from mix_assets.core import layout
from mix_assets.stages.publish import publish as pub
from mix_assets.core.storage import Storage
from mix_assets_tests.support.synthetic_mix import build_synthetic_mix
from mix_assets_tests.support.tokens_fixtures import stamp


def make_spec(tmp_path: Path, publish: dict):
    return parse_spec({
        "name": "synthetic", "target_tokens": 1000,
        "sources": [{"name": "web", "loader": {"kind": "jsonl", "paths": ["x.jsonl"]}, "text_field": "text",
                     "license": "cc-by", "rationale": "broad english prose for general knowledge", "share": 1.0}],
        "storage": {"root": str(tmp_path / "storage")},
        "publish": publish,
    }, str(tmp_path / "mix.yaml"))


def audited(tmp_path: Path, manifest: dict) -> dict:
    """Stand in for the manifest asset and a passing shards_audit_clean: their lineage and audit records."""
    st = Storage(str(tmp_path / "storage"))
    stamp(st, "manifest", [layout.MANIFEST])
    st.write_text(layout.SHARDS_AUDIT, json.dumps({"fingerprint": manifest["fingerprint"], "passed": True,
                                                   "overlap_total": 0}))
    stamp(st, SHARDS_AUDIT_RECORD, [layout.SHARDS_AUDIT], ["manifest"])
    return manifest


def mix_resource(spec):
    return dg.ResourceDefinition.hardcoded_resource(
        SimpleNamespace(spec=spec, storage=Storage(spec.storage.root)))


def run(spec, extra_assets=(), selection=None):
    return dg.materialize([*extra_assets, *build_publish_assets(spec)], resources={"mix": mix_resource(spec)},
                          instance=dg.DagsterInstance.ephemeral(), raise_on_error=False, selection=selection)


def check_eval(result):
    evals = [e for e in result.get_asset_check_evaluations() if e.check_name == PUBLISHED_READABLE]
    assert len(evals) == 1
    return evals[0]


def test_local_target_publishes_and_the_gate_passes_then_catches_tampering(tmp_path):
    spec = make_spec(tmp_path, {"url": str(tmp_path / "published")})
    manifest = audited(tmp_path, build_synthetic_mix(tmp_path / "storage" / "mix"))
    result = run(spec)
    assert result.success
    mat = result.asset_materializations_for_node("published_revision")[0].metadata
    rev = pub.revision_id(manifest["fingerprint"])
    assert mat["revision"].value == rev and mat["created"].value is True
    ev = check_eval(result)
    assert ev.passed and ev.metadata["verified_files"].value == len(manifest["files"]) + 2
    assert ev.metadata["verified_bytes"].value == mat["published_bytes"].value
    total = sum(sp["samples"] for sp in manifest["splits"].values())
    assert ev.metadata["total_samples"].value == total and ev.metadata["compared_samples"].value > 0
    assert f"of {total:,} samples, " in ev.description and "through the reader" in ev.description
    record = json.loads((tmp_path / "storage" / layout.PUBLISHED).read_text())
    assert record["location"] == str(tmp_path / "published" / rev)

    shard = tmp_path / "published" / rev / "train" / "train-00000.bin"
    shard.write_bytes(b"\x00" + shard.read_bytes()[1:] if shard.read_bytes()[0] else b"\x01" + shard.read_bytes()[1:])
    gate_only = run(spec, selection=dg.AssetSelection.checks_for_assets(dg.AssetKey("published_revision")))
    assert not gate_only.success  # the blocking check fails on the tampered revision
    ev = check_eval(gate_only)
    assert not ev.passed and str(shard) in ev.description


def test_republish_repairs_a_shard_deleted_at_the_target_and_the_gate_passes_again(tmp_path):
    spec = make_spec(tmp_path, {"url": str(tmp_path / "published")})
    manifest = audited(tmp_path, build_synthetic_mix(tmp_path / "storage" / "mix"))
    assert run(spec).success
    rev = pub.revision_id(manifest["fingerprint"])
    shard = tmp_path / "published" / rev / "train" / "train-00001.bin"
    want = shard.read_bytes()
    shard.unlink()
    assert not run(spec, selection=dg.AssetSelection.checks_for_assets(dg.AssetKey("published_revision"))).success
    again = run(spec)  # before: "already holds this content; nothing uploaded" and the gate failed forever
    assert again.success and check_eval(again).passed
    mat = again.asset_materializations_for_node("published_revision")[0].metadata
    assert (mat["created"].value, mat["uploaded_files"].value, mat["uploaded_bytes"].value) == (False, 1, len(want))
    assert shard.read_bytes() == want


def test_a_failed_upstream_gate_stops_publishing_in_the_run(tmp_path):
    spec = make_spec(tmp_path, {"url": str(tmp_path / "published")})
    audited(tmp_path, build_synthetic_mix(tmp_path / "storage" / "mix"))

    @dg.asset(name="manifest", check_specs=[dg.AssetCheckSpec("manifest_self_consistent", asset="manifest",
                                                               blocking=True)])
    def manifest():
        return dg.MaterializeResult(check_results=[dg.AssetCheckResult(passed=False)])

    result = run(spec, extra_assets=[manifest])
    assert not result.success
    assert result.asset_materializations_for_node("published_revision") == []
    assert not (tmp_path / "published").exists()


def test_automation_never_requests_a_publish_past_a_failed_gate(tmp_path):
    spec = make_spec(tmp_path, {"url": str(tmp_path / "published")})
    gate_passes = {"value": False}

    @dg.asset(name="manifest", check_specs=[dg.AssetCheckSpec("manifest_self_consistent", asset="manifest",
                                                               blocking=True)])
    def manifest():
        return dg.MaterializeResult(check_results=[dg.AssetCheckResult(passed=gate_passes["value"])])

    assets = dg.Definitions(assets=[manifest, *build_publish_assets(spec)], resources={"mix": mix_resource(spec)})
    instance = dg.DagsterInstance.ephemeral()
    target = dg.AssetKey("published_revision")
    tick = dg.evaluate_automation_conditions(defs=assets, instance=instance)
    dg.materialize([manifest], instance=instance, raise_on_error=False)  # the gate fails
    tick = dg.evaluate_automation_conditions(defs=assets, instance=instance, cursor=tick.cursor)
    assert tick.get_num_requested(target) == 0

    gate_passes["value"] = True
    dg.materialize([manifest], instance=instance)
    tick = dg.evaluate_automation_conditions(defs=assets, instance=instance, cursor=tick.cursor)
    assert tick.get_num_requested(target) == 1


@pytest.mark.s3
def test_s3_target_with_a_read_only_verifier(tmp_path, seaweedfs, monkeypatch):
    from mix_assets_tests.support.s3server import READER, WRITER

    url = seaweedfs.url("asset")
    spec = make_spec(tmp_path, {"url": url, "s3_endpoint_url": seaweedfs.endpoint,
                                "read_credentials_env": "MIX_PUBLISH_READ"})
    manifest = audited(tmp_path, build_synthetic_mix(tmp_path / "storage" / "mix"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", WRITER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRITER[1])
    monkeypatch.setenv("MIX_PUBLISH_READ_ACCESS_KEY_ID", READER[0])
    monkeypatch.setenv("MIX_PUBLISH_READ_SECRET_ACCESS_KEY", READER[1])
    result = run(spec)
    assert result.success
    ev = check_eval(result)
    assert ev.passed and ev.metadata["verified_files"].value == len(manifest["files"]) + 2
    reader = read_only_target(spec)
    with pytest.raises(Exception, match="AccessDenied"):
        reader.put_bytes("intruder", b"x")


def test_latest_moves_only_once_the_gate_has_read_the_revision_back(tmp_path):
    import shutil

    spec = make_spec(tmp_path, {"url": str(tmp_path / "published")})
    target = pub.LocalTarget(tmp_path / "published")
    m1 = audited(tmp_path, build_synthetic_mix(tmp_path / "storage" / "mix", seed=1))
    assert run(spec).success
    rev1 = pub.revision_id(m1["fingerprint"])
    assert pub.read_latest(target) == rev1
    shutil.rmtree(tmp_path / "storage" / "mix")
    m2 = audited(tmp_path, build_synthetic_mix(tmp_path / "storage" / "mix", seed=2))
    rev2 = pub.revision_id(m2["fingerprint"])
    alone = run(spec, selection=dg.AssetSelection.assets("published_revision").without_checks())
    assert alone.success and (tmp_path / "published" / rev2 / "manifest.json").exists()
    assert pub.read_latest(target) == rev1  # before: published_revision pointed `latest` at rev2 itself
    shard = tmp_path / "published" / rev2 / "train" / "train-00000.bin"
    shard.write_bytes(shard.read_bytes()[::-1])
    gate_only = run(spec, selection=dg.AssetSelection.checks_for_assets(dg.AssetKey("published_revision")))
    ev = check_eval(gate_only)
    assert not ev.passed and "`latest` not moved" in ev.description and "latest" not in ev.metadata
    assert pub.read_latest(target) == rev1
    again = run(spec)  # repairs the shard; the gate passes and moves `latest`
    assert again.success and check_eval(again).metadata["latest"].value == rev2
    assert pub.read_latest(target) == rev2


def test_published_revision_fails_fast_while_another_run_holds_the_storage_root(tmp_path, monkeypatch):
    import os
    import socket
    import time

    from mix_assets.core import runlock

    monkeypatch.setenv("MIX_LOCK_WAIT_SECONDS", "0")  # fail at once (the default waits 300 s)
    spec = make_spec(tmp_path, {"url": str(tmp_path / "published")})
    audited(tmp_path, build_synthetic_mix(tmp_path / "storage" / "mix"))
    now = time.time()
    lease = tmp_path / "storage" / runlock.LEASE_KEY
    lease.parent.mkdir(parents=True, exist_ok=True)
    lease.write_text(json.dumps({"owner": {"run_id": "run-B-rewriting-mix", "step": "token_shards",
                                           "host": socket.gethostname(), "pid": os.getpid()},
                                 "token": "t", "acquired_at": now, "heartbeat_at": now, "ttl_seconds": 600}))
    result = run(spec)
    assert not result.success
    err = result.get_step_failure_events()[0].event_specific_data.error.to_string()
    # before: published mix/ while the other run was rewriting it
    assert "run-B-rewriting-mix" in err and "step token_shards" in err
    assert not (tmp_path / "published").exists()
