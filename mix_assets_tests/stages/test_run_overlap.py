"""Two runs on one storage root (issue 25, 2.1; issue 27 item 7): the run lease, which only publishing holds, and the
checks that see another run's mix/."""

from __future__ import annotations

import json
import os
import socket
import time

import dagster as dg

from mix_assets.stages.manifest.assets import MANIFEST_SELF_CONSISTENT, SHARDS_AUDIT_CLEAN
from mix_assets.core import layout, runlock
from mix_assets_tests.support.tokens_stage import run, setup


def _failure_text(result) -> str:
    out = []
    for ev in result.get_step_failure_events():
        err = ev.event_specific_data.error
        while err is not None:
            out.append(err.message)
            err = err.cause
    return "\n".join(out)


def test_manifest_checks_fail_cleanly_when_another_run_rewrote_mix(tmp_path):
    spec, assets, res = setup(tmp_path)
    assert run(assets, res).success
    manifest = json.loads((tmp_path / "storage" / layout.MANIFEST).read_text())
    # what a second run of the same config does first in token_shards: it clears mix/train/ to rewrite it
    gone = manifest["splits"]["train"]["shards"][0]["path"]
    for p in (tmp_path / "storage" / "mix" / "train").iterdir():
        p.unlink()
    checks = [dg.AssetCheckKey(dg.AssetKey("manifest"), n) for n in (MANIFEST_SELF_CONSISTENT, SHARDS_AUDIT_CLEAN)]
    again = run(assets, res, selection=dg.AssetSelection.checks(*checks))
    # before: shards_audit_clean crashed (ManifestError: "train/train-00000.bin: listed in files ... but not found")
    assert "ManifestError" not in _failure_text(again), _failure_text(again)
    evals = {e.check_name: e for e in again.get_asset_check_evaluations()}
    assert set(evals) == {MANIFEST_SELF_CONSISTENT, SHARDS_AUDIT_CLEAN}
    audit = evals[SHARDS_AUDIT_CLEAN]
    assert not audit.passed and gone in audit.description and "another run" in audit.description
    assert not evals[MANIFEST_SELF_CONSISTENT].passed
    # the audit record says so too: published_revision refuses this manifest
    report = json.loads((tmp_path / "storage" / layout.SHARDS_AUDIT).read_text())
    assert report["passed"] is False and report["fingerprint"] == manifest["fingerprint"]


def _lease(storage, run_id: str, heartbeat_age: float, ttl: float = 600.0) -> None:
    now = time.time()
    body = {"owner": {"run_id": run_id, "step": "token_shards", "host": socket.gethostname(), "pid": os.getpid()},
            "token": "t-" + run_id, "acquired_at": now - heartbeat_age, "heartbeat_at": now - heartbeat_age,
            "ttl_seconds": ttl}
    path = storage / runlock.LEASE_KEY
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body))


def test_another_runs_publish_lease_does_not_hold_back_a_build(tmp_path):
    """The run lease serialises only publishing and `latest` (common.LEASED_STEPS): a build step writes its
    run's checkout (core/checkout.py), which no other live run writes."""
    spec, assets, res = setup(tmp_path)
    assert run(assets, res).success
    storage = tmp_path / "storage"
    _lease(storage, "run-B-publishing", heartbeat_age=1.0)
    # before: token_shards failed at once, "in use by run run-B-publishing (step token_shards ...)"
    again = run(assets, res, selection=[dg.AssetKey("tokenizer"), dg.AssetKey("token_shards")])
    assert again.success, _failure_text(again)
    assert json.loads((storage / runlock.LEASE_KEY).read_text())["owner"]["run_id"] == "run-B-publishing"
    assert not (storage / "checkouts").exists()  # the lease is no claim on the checkout: it built in main


def test_the_run_lease_is_not_written_through_a_symlink_out_of_the_storage_root(tmp_path):
    import types

    import pytest

    from mix_assets.stages.common import run_lock
    from mix_assets.core.storage import Storage, StorageLinkError

    root, outside = tmp_path / "storage", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    (root / "locks").symlink_to(outside, target_is_directory=True)
    ctx = types.SimpleNamespace(run=types.SimpleNamespace(run_id="run-A"), log=types.SimpleNamespace(info=print))
    # before: the lease (and its .cas lock file) were written into elsewhere/, and deleted there
    with pytest.raises(StorageLinkError, match=rf"{root / 'locks'} is a symlink to {outside}, outside the storage root"):
        with run_lock(ctx, Storage(str(root)), "published_revision"):
            pass
    assert list(outside.iterdir()) == []
    (root / "locks").unlink()
    with run_lock(ctx, Storage(str(root)), "published_revision"):  # a real folder: the lease is taken and released
        assert json.loads((root / runlock.LEASE_KEY).read_text())["owner"]["run_id"] == "run-A"
