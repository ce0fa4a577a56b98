"""The whole demo graph with its storage root on S3 (the real SeaweedFS server of `s3server.py`)."""

from __future__ import annotations

import json
import shutil

import dagster as dg
import pytest

from mix_assets.config import load_spec
from mix_assets.definitions import build_definitions
from mix_assets.core import layout
from mix_assets.format.checker import check_manifest
from mix_assets.core.transport import split_s3_url
from mix_assets.resources import storage_for
from mix_assets_tests.support.s3server import WRITER
from mix_assets_tests.support.ui_harness import REPO, config_variant


@pytest.mark.slow
@pytest.mark.s3
def test_demo_graph_on_an_s3_storage_root(seaweedfs, monkeypatch, tmp_path):
    # credentials from the ordinary chain; the endpoint only from the config's storage.s3_endpoint_url
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", WRITER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRITER[1])
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    root = seaweedfs.url("graph")
    cfg = config_variant(REPO / "configs" / "demo.yaml", tmp_path / "mix.yaml", {
        "storage": {"root": str(tmp_path / "never-used"), "s3_endpoint_url": seaweedfs.endpoint,
                    "cache_dir": str(tmp_path / "cache")},
        "publish": {"url": str(tmp_path / "published")},
    })
    spec = load_spec(cfg)
    defs = build_definitions(spec, storage_root=root)

    instance = dg.DagsterInstance.ephemeral()
    everything = [*defs.assets, *defs.asset_checks]
    result = dg.materialize(everything, resources=defs.resources, instance=instance, raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    graph = defs.resolve_asset_graph()
    done = {e.asset_key for e in result.get_asset_materialization_events()}
    assert done == set(graph.get_all_asset_keys())
    evals = result.get_asset_check_evaluations()
    # nothing published yet: fingerprint_reproduced has nothing to compare with and reports no result
    skipped = dg.AssetCheckKey(dg.AssetKey("manifest"), "fingerprint_reproduced")
    assert {e.asset_check_key for e in evals} == set(graph.asset_check_keys) - {skipped}
    assert all(e.passed for e in evals), [(e.check_name, e.metadata) for e in evals if not e.passed]

    # every artifact is an object under the root's prefix; nothing went to a local storage root
    assert not (tmp_path / "never-used").exists()
    bucket, prefix = split_s3_url(root)
    client = seaweedfs.client("reader")
    objects = {o["Key"].removeprefix(prefix + "/"): o["Size"]
               for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
               for o in page.get("Contents", [])}
    manifest = json.loads(client.get_object(Bucket=bucket, Key=f"{prefix}/{layout.MANIFEST}")["Body"].read())
    assert manifest["totals"]["shards"] > 0
    for f in manifest["files"]:
        assert objects[f"{layout.MIX_DIR}/{f['path']}"] == f["bytes"], f["path"]
    for key in (layout.DEDUP_KEYS, layout.CONTAMINATION_REPORT, layout.EXCLUSION_MASKS, layout.VALIDATION_SPLIT,
                layout.TOKENIZER_IDENTITY, layout.PUBLISHED, *(layout.RAW_DOCS.format(source=s.name)
                                                               for s in spec.sources)):
        assert key in objects, key
    st = storage_for(spec.model_copy(update={"storage": spec.storage.model_copy(update={"root": root})}))
    assert check_manifest(manifest, lambda rel: open(st.local_path(f"{layout.MIX_DIR}/{rel}"), "rb")) == []
    # the published copy (local here) is the same revision
    record = json.loads(st.read_text(layout.PUBLISHED))
    published = json.loads((tmp_path / "published" / record["revision"] / "manifest.json").read_text())
    assert published["fingerprint"] == manifest["fingerprint"]
    assert list((tmp_path / "cache").rglob("*.tmp")) == []  # no staging file left behind

    # a rebuild from the tokenizer on deletes the old manifest and shards on S3 and reproduces the revision
    again = dg.materialize(everything, resources=defs.resources, instance=instance, raise_on_error=False,
                           selection=dg.AssetSelection.assets("tokenizer").downstream()
                           - dg.AssetSelection.assets("published_revision"))
    assert again.success, [e.message for e in again.all_events if e.is_failure]
    ev = {e.check_name: e for e in again.get_asset_check_evaluations()}
    assert ev["fingerprint_reproduced"].passed and ev["manifest_self_consistent"].passed
    assert "nothing published" not in (ev["fingerprint_reproduced"].description or "")
    rebuilt = json.loads(st.read_text(layout.MANIFEST))
    assert rebuilt["fingerprint"] == manifest["fingerprint"]
    shards = {f"{layout.MIX_DIR}/{sh['path']}" for sp in rebuilt["splits"].values() for sh in sp["shards"]}
    assert set(st.list(f"{layout.MIX_DIR}/train")) | set(st.list(f"{layout.MIX_DIR}/val")) == shards

    # the publish check alone, in a fresh process's shoes: nothing of the mix in the local cache yet
    shutil.rmtree(tmp_path / "cache")
    alone = dg.materialize(everything, resources=defs.resources, instance=instance, raise_on_error=False,
                           selection=dg.AssetSelection.checks(dg.AssetCheckKey(dg.AssetKey("published_revision"),
                                                                               "published_readable_from_empty_cache")))
    assert alone.success, [e.message for e in alone.all_events if e.is_failure]
    (ev,) = alone.get_asset_check_evaluations()
    assert ev.passed, ev.metadata

    # manifest_self_consistent sees the bucket's mix/ folder: an object the manifest does not list fails it
    st.write_bytes(f"{layout.MIX_DIR}/train/train-99999.bin", b"\0\0")
    stray = dg.materialize(everything, resources=defs.resources, instance=instance, raise_on_error=False,
                           selection=dg.AssetSelection.checks(dg.AssetCheckKey(dg.AssetKey("manifest"),
                                                                               "manifest_self_consistent")))
    (ev,) = stray.get_asset_check_evaluations()
    assert not ev.passed and "train/train-99999.bin: present in the mix directory" in str(ev.metadata["problem_list"])

    # the working shards lost: token_shards is restored from the object store on S3 (server-side copies of
    # blobs re-hashed first), not recomputed, and the manifest's checks pass on the restored bytes
    st.delete_prefix(f"{layout.MIX_DIR}/train/")
    third = dg.materialize(everything, resources=defs.resources, instance=instance, raise_on_error=False,
                           selection=dg.AssetSelection.assets("token_shards", "manifest"))
    assert third.success, [e.message for e in third.all_events if e.is_failure]
    mats = {e.asset_key.to_user_string(): e.event_specific_data.materialization
            for e in third.all_events if e.is_step_materialization}
    assert mats["token_shards"].metadata["reused"].value["restored"] >= manifest["totals"]["shards"] // 2
    ev = {e.check_name: e for e in third.get_asset_check_evaluations()}
    assert ev["manifest_self_consistent"].passed and ev["no_empty_shard"].passed
