"""Artifacts reused by key (stages/common.reused, core/objects.py) and gc (mix_assets/gc.py) on the demo.

One private demo per module (test_integrity_lineage.private_demo), built in order:
  A (full build) -> A again (every asset reused in place) -> B (packing.shard_tokens halved: token_shards
  and manifest computed, twice A's shard files) -> A (all restored from the store, A's fingerprint) -> B with one of
  B's shard blobs damaged (refused, recomputed, B's fingerprint) -> gc.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml

from mix_assets import gc
from mix_assets.config import load_spec
from mix_assets.core import lineage, objects
from mix_assets.resources import storage_for
from mix_assets_tests.test_integrity_lineage import failures, materialize, private_demo

pytestmark = pytest.mark.slow

PUBLISHED_REVISION = "published_revision"  # publishes to the target: a side effect, never reused


def _materialisations(result) -> dict[str, dg.AssetMaterialization]:
    return {e.asset_key.to_user_string(): e.event_specific_data.materialization
            for e in result.all_events if e.is_step_materialization}


def _fingerprint(cfg: Path) -> str:
    storage = storage_for(load_spec(cfg))
    return json.loads(storage.read_text("mix/manifest.json"))["fingerprint"]


def _run(cfg: Path, instance) -> dict:
    r = materialize(cfg, instance)
    assert r.success, failures(r)
    mats = _materialisations(r)
    return {"fingerprint": _fingerprint(cfg), "mats": mats,
            "reused": {k for k, m in mats.items() if "reused" in m.metadata},
            "versions": {k: m.tags.get("dagster/data_version") for k, m in mats.items()}}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reuse")
    cfg_a = private_demo(tmp)
    d = yaml.safe_load(cfg_a.read_text())
    d["packing"]["shard_tokens"] = d["packing"]["shard_tokens"] // 2  # twice A's shard files
    cfg_b = tmp / "demo_b.yaml"
    cfg_b.write_text(yaml.safe_dump(d, sort_keys=False))
    instance = dg.DagsterInstance.ephemeral()
    runs = {"A": _run(cfg_a, instance), "A2": _run(cfg_a, instance), "B": _run(cfg_b, instance)}
    storage = storage_for(load_spec(cfg_a))
    b_shards = objects.read_keyed(storage, "token_shards", lineage.read_record(storage, "token_shards")["key"])
    runs["A3"] = _run(cfg_a, instance)
    # damage one of B's shard blobs in place (B's working files were replaced by A's, so it is B's alone)
    shard = next(p for p in sorted(b_shards["outputs"]) if p.endswith(".bin"))
    blob = Path(storage.root) / objects.object_key(b_shards["outputs"][shard])
    data = bytearray(blob.read_bytes())
    data[0] ^= 0xFF
    blob.write_bytes(bytes(data))
    r = materialize(cfg_b, instance)
    runs["B2"] = {"result": r, "fingerprint": _fingerprint(cfg_b) if r.success else None,
                  "reused": {k for k, m in _materialisations(r).items() if "reused" in m.metadata},
                  "blob": blob, "sha": b_shards["outputs"][shard]}
    return {"tmp": tmp, "A": cfg_a, "B": cfg_b, "instance": instance, "runs": runs, "storage": storage}


def test_a_second_build_with_nothing_changed_reuses_every_asset(demo):
    a, a2 = demo["runs"]["A"], demo["runs"]["A2"]
    assert not a["reused"]
    assets = set(a2["mats"]) - {PUBLISHED_REVISION}
    assert a2["reused"] == assets and len(assets) >= 10
    assert a2["fingerprint"] == a["fingerprint"]
    # published_revision re-derived every artifact's code_version from the config the revision carries
    said = a["mats"][PUBLISHED_REVISION].metadata["config_reproduces_keys"].value
    assert said.startswith("13 of 13 artifacts"), said
    assert a2["versions"] == a["versions"]  # the artifact keys: nothing downstream reads Unsynced
    meta = a2["mats"]["token_shards"].metadata["reused"].value
    assert meta["restored"] == 0 and meta["files"] > 3
    # the stored check results come back with the reuse (raw's blocking gates evaluate as when computed)
    assert a2["mats"]["raw/stories"].metadata.keys() >= a["mats"]["raw/stories"].metadata.keys() - {"peak_rss_mb"}


def test_config_a_then_b_then_a_restores_a_from_the_store(demo):
    runs = demo["runs"]
    a, b, a3 = runs["A"], runs["B"], runs["A3"]
    assert b["fingerprint"] != a["fingerprint"]
    assert {"token_shards", "manifest"}.isdisjoint(b["reused"])
    assert {"dedup_keys", "tokenizer"} <= b["reused"]  # upstream of the edit: reused in place
    assert a3["reused"] == set(a3["mats"]) - {PUBLISHED_REVISION}
    assert a3["fingerprint"] == a["fingerprint"] and a3["versions"] == a["versions"]
    assert a3["mats"]["token_shards"].metadata["reused"].value["restored"] > 0
    # no shard of B's key stayed beside A's: mix/ holds exactly the files A's manifest lists
    root = Path(demo["storage"].root) / "mix"
    listed = {f["path"] for f in json.loads((root / "manifest.json").read_text())["files"]}
    on_disk = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "manifest.json"}
    assert on_disk == listed


def test_a_damaged_blob_is_refused_and_the_asset_recomputed(demo):
    b, b2 = demo["runs"]["B"], demo["runs"]["B2"]
    assert b2["result"].success, failures(b2["result"])
    assert "token_shards" not in b2["reused"] and "tokenizer" in b2["reused"]
    warned = [e.message for e in b2["result"].all_events if "not reusing token_shards" in (e.message or "")]
    assert not warned or "changed in the object store" in warned[0]
    assert b2["fingerprint"] == b["fingerprint"]
    # the recomputed shard was filed again under its name, with the right bytes
    assert objects.blob_problem(demo["storage"], b2["sha"]) is None


def test_gc_keeps_what_the_records_and_publications_need_and_a_rebuild_still_works(demo, capsys):
    storage, cfg_a = demo["storage"], demo["A"]
    # C: packing edited, built up to manifest only (not published): its keyed artifacts are garbage once A is back
    d = yaml.safe_load(cfg_a.read_text())
    d["packing"]["seq_len"] = d["packing"]["seq_len"] // 4
    cfg_c = demo["tmp"] / "demo_c.yaml"
    cfg_c.write_text(yaml.safe_dump(d, sort_keys=False))
    r = materialize(cfg_c, demo["instance"], selection="*manifest")
    assert r.success, failures(r)
    c_shards = lineage.read_record(storage, "token_shards")["key"]
    _run(cfg_a, demo["instance"])
    assert gc.main([str(cfg_a), "--dry-run", "--keep-days", "0"]) == 0
    out = capsys.readouterr().out
    assert f"would remove keyed/token_shards/{c_shards}.json" in out and " MB)" in out
    assert objects.read_keyed(storage, "token_shards", c_shards) is not None  # a dry run removes nothing
    assert gc.main([str(cfg_a), "--keep-days", "0"]) == 0
    assert objects.read_keyed(storage, "token_shards", c_shards) is None
    # kept: every current record's artifact, and B's (published), with all their blobs
    pub_b = [k for k in storage.list(objects.KEYED + "/published_revision")]
    assert len(pub_b) >= 2
    for rec_key in storage.list("lineage"):
        rec = json.loads(storage.read_text(rec_key))
        if rec.get("key") and rec_key.count("/") >= 1 and objects.read_keyed(storage, rec["asset"], rec["key"]):
            assert all(objects.blob_problem(storage, sha) is None
                       for sha in objects.read_keyed(storage, rec["asset"], rec["key"])["outputs"].values())
    b = demo["runs"]["B"]
    again = _run(demo["B"], demo["instance"])  # B was published: still all in the store after gc
    assert again["fingerprint"] == b["fingerprint"] and "token_shards" in again["reused"]
    rebuilt = _run(cfg_c, demo["instance"])  # C's artifacts went: recomputed, and it still builds
    assert "token_shards" not in rebuilt["reused"]
    shutil.rmtree(demo["tmp"] / "cache", ignore_errors=True)
