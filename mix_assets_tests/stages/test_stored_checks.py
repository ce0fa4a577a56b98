"""Stored check results (stages/common.stored_check): shards_audit_clean re-emitted for a reused manifest.

One private demo: A (full build: the audit decodes the shards) -> A again (manifest reused in place: the stored
audit re-emitted, no shard decoded) -> B (packing edited: a new manifest, audited) -> A (restored from the store:
A's stored audit and its audit/shards_audit.json come back) -> A with its stored result turned into a failure
(re-emitted failing: the gate still holds published_revision back).
"""

from __future__ import annotations

import json

import dagster as dg
import pytest
import yaml

from mix_assets.config import load_spec
from mix_assets.core import layout, lineage, objects
from mix_assets.resources import storage_for
from mix_assets.stages import common
from mix_assets.stages.audit import published
from mix_assets.stages.manifest.assets import KNOWN_CLEAN_PIECES, SHARDS_AUDIT_CLEAN
from mix_assets.stages.split import assets as split_assets
from mix_assets.stages.split.assets import VAL_DISJOINT_FROM_TRAIN
from mix_assets_tests.test_integrity_lineage import failures, materialize, private_demo

pytestmark = pytest.mark.slow


def _audit(result, check: str = SHARDS_AUDIT_CLEAN) -> dg.AssetCheckEvaluation:
    return next(e for e in result.get_asset_check_evaluations() if e.check_name == check)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stored_checks")
    cfg_a = private_demo(tmp)
    d = yaml.safe_load(cfg_a.read_text())
    d["packing"]["shard_tokens"] = d["packing"]["shard_tokens"] // 2
    cfg_b = tmp / "demo_b.yaml"
    cfg_b.write_text(yaml.safe_dump(d, sort_keys=False))
    instance = dg.DagsterInstance.ephemeral()
    storage = storage_for(load_spec(cfg_a))
    calls: list[str] = []
    real = published.audit_published

    def counted(*a, label="published audit", **k):
        calls.append(label)
        return real(*a, label=label, **k)

    real_scan = split_assets.cross_split_near_dups

    def counted_scan(*a, **k):
        calls.append(VAL_DISJOINT_FROM_TRAIN)
        return real_scan(*a, **k)

    runs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(published, "audit_published", counted)
        mp.setattr(split_assets, "cross_split_near_dups", counted_scan)
        for name, cfg in (("A", cfg_a), ("A2", cfg_a), ("B", cfg_b), ("A3", cfg_a)):
            n = len(calls)
            r = materialize(cfg, instance)
            assert r.success, failures(r)
            runs[name] = {"result": r, "audits": calls[n:].count(SHARDS_AUDIT_CLEAN),
                          "scans": calls[n:].count(VAL_DISJOINT_FROM_TRAIN),
                          "manifest": lineage.read_record(storage, "manifest")["key"],
                          "report": json.loads(storage.read_text(layout.SHARDS_AUDIT)),
                          "fingerprint": json.loads(storage.read_text(layout.MANIFEST))["fingerprint"]}
        # A's stored audit turned into a failure: a stored failure must still fail the gate
        name = common.check_record_name("manifest", SHARDS_AUDIT_CLEAN)
        rec = next(json.loads(storage.read_text(k)) for k in storage.list(f"{objects.KEYED}/{name}")
                   if json.loads(storage.read_text(k))["input_keys"]["manifest"] == runs["A"]["manifest"])
        stored = dg.deserialize_value(rec["dagster"])
        stored["checks"][0]["passed"] = False
        stored["checks"][0]["description"] = "planted failure"
        rec["dagster"] = dg.serialize_value(stored)
        storage.write_text(objects.keyed_key(name, rec["key"]), json.dumps(rec))
        n = len(calls)
        r = materialize(cfg_a, instance)
        runs["A4"] = {"result": r, "audits": calls[n:].count(SHARDS_AUDIT_CLEAN)}
    return {"runs": runs, "storage": storage, "cfg": cfg_a}


def test_a_no_change_rebuild_re_emits_the_audit_without_decoding(demo):
    a, a2 = demo["runs"]["A"], demo["runs"]["A2"]
    assert a["audits"] == 1 and "reused" not in _audit(a["result"]).metadata
    assert a2["audits"] == 0  # no shard decoded
    ev = _audit(a2["result"])
    assert ev.passed and f"of manifest {a['manifest'][:12]}" in ev.metadata["reused"].value
    assert ev.description == _audit(a["result"]).description
    assert a2["report"] == a["report"]


def test_val_disjoint_from_train_is_re_emitted_while_the_split_is_reused(demo):
    runs = demo["runs"]
    assert runs["A"]["scans"] == 1 and runs["A2"]["scans"] == 0
    assert runs["B"]["scans"] == 0  # a packing edit leaves validation_split's key as it was
    ev = _audit(runs["A2"]["result"], VAL_DISJOINT_FROM_TRAIN)
    assert ev.passed and "of validation_split" in ev.metadata["reused"].value
    assert {k: v for k, v in ev.metadata.items() if k != "reused"} == \
        dict(_audit(runs["A"]["result"], VAL_DISJOINT_FROM_TRAIN).metadata)


def test_a_changed_manifest_is_audited_again(demo):
    a, b = demo["runs"]["A"], demo["runs"]["B"]
    assert b["manifest"] != a["manifest"]
    assert b["audits"] == 1 and "reused" not in _audit(b["result"]).metadata
    assert b["report"]["fingerprint"] == b["fingerprint"] != a["fingerprint"]
    # B cuts A's documents into other shards: the documents A's audit found clean are not hashed again
    # (stages/audit/published.KnownClean; the same report as a full audit: stages/audit/test_published_known.py)
    assert _audit(a["result"]).metadata[KNOWN_CLEAN_PIECES].value == 0
    assert _audit(b["result"]).metadata[KNOWN_CLEAN_PIECES].value > 0


def test_back_to_a_restores_its_audit_and_report(demo):
    a, a3 = demo["runs"]["A"], demo["runs"]["A3"]
    assert a3["manifest"] == a["manifest"] and a3["audits"] == 0
    assert _audit(a3["result"]).passed and "reused" in _audit(a3["result"]).metadata
    # the report file published_revision requires is A's again, not B's
    assert a3["report"] == a["report"] and a3["report"]["fingerprint"] == a["fingerprint"]


def test_a_stored_failure_still_fails_the_gate(demo):
    a4 = demo["runs"]["A4"]
    r = a4["result"]
    assert not r.success and a4["audits"] == 0
    ev = _audit(r)
    assert not ev.passed and "planted failure" in ev.description and "reused" in ev.metadata
    assert "published_revision" in ev.description  # held back
    mats = {e.asset_key.to_user_string() for e in r.all_events if e.is_step_materialization}
    assert "published_revision" not in mats


def test_token_shards_record_names_its_token_cache_key_which_gc_finds_current(demo):
    from mix_assets import gc

    storage = demo["storage"]
    key = lineage.read_record(storage, "token_shards")["key"]
    used = objects.read_keyed(storage, "token_shards", key)["uses"]["token_cache"]
    assert storage.list(f"{layout.TOKEN_CACHE_DIR}/{used}")  # the cache that build encoded with
    assert gc.current_token_cache_key(storage) == used
    p = gc.plan(storage, keep_days=0, sources=[s.name for s in load_spec(demo["cfg"]).sources])
    assert used in p.keep_token_cache and not p.remove_token_cache


def test_the_audit_scans_with_eval_registrys_files_and_reports_what_a_rebuilt_registry_gives(demo):
    from mix_assets.stages.manifest.assets import EVAL_REFERENCE, STORED_REFERENCE

    a, storage = demo["runs"]["A"], demo["storage"]
    assert _audit(a["result"]).metadata[EVAL_REFERENCE].value == STORED_REFERENCE
    # the storage holds A's mix again (A3 restored it): the standalone audit parses the eval files itself
    rebuilt = published.audit_published(storage.uri(layout.MIX_DIR), load_spec(demo["cfg"]))
    assert rebuilt == a["report"]
