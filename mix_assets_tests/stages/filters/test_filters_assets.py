"""document_filters in the graph: absent without `filters:`, green on the demo, reused per source, and
`no_domain_vanished` stopping the run when a mis-set threshold deletes a domain."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml

from mix_assets.stages.filters import assets as filter_assets
from mix_assets.stages.dedup.assets import build_dedup_assets
from mix_assets.stages.sources.assets import build_source_assets
from mix_assets.config import load_spec
from mix_assets.stages.filters import decisions
from mix_assets.core import layout
from mix_assets.core.storage import Storage
from mix_assets.resources import MixResource
from mix_assets_tests.test_audit_published_demo import demo_config


def _demo(tmp_path, edit=None):
    """configs/demo.yaml (absolute paths) edited by `edit`, written where the run's MixResource reads it."""
    cfg = demo_config(tmp_path)
    if edit:
        data = yaml.safe_load(cfg.read_text())
        edit(data)
        cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_spec(cfg)


def _source(data: dict, name: str) -> dict:
    return next(s for s in data["sources"] if s["name"] == name)


def _run(spec, instance=None, with_sources=True):
    mix = MixResource(config_path=spec.config_path)
    assets = [*(build_source_assets(spec) if with_sources else []), *filter_assets.build_filter_assets(spec),
              build_dedup_assets(spec)[0]]
    return dg.materialize(assets, resources={"mix": mix}, instance=instance or dg.DagsterInstance.ephemeral(),
                          raise_on_error=False)


def _checks(res) -> dict:
    return {c.check_name: c for c in res.get_asset_check_evaluations()}


def _materialized(res) -> set[str]:
    return {m.asset_key.to_user_string() for m in res.get_asset_materialization_events()}


def test_without_filters_there_is_no_filter_asset_and_dedup_reads_raw_only(tmp_path):
    def strip(data):
        data.pop("filters")
        for s in data["sources"]:
            s.pop("filters", None)

    spec = _demo(tmp_path, strip)
    assert filter_assets.build_filter_assets(spec) == [] and filter_assets.filter_deps(spec) == []
    deps = {k.to_user_string() for k in build_dedup_assets(spec)[0].asset_deps[dg.AssetKey("dedup_keys")]}
    assert deps == {f"raw/{s.name}" for s in spec.sources}
    assert "\"filters\"" not in spec.canonical_json()


def test_demo_cascade_is_green_and_an_edited_override_re_runs_only_its_source(tmp_path):
    spec = _demo(tmp_path)
    inst = dg.DagsterInstance.ephemeral()
    res = _run(spec, inst)
    assert res.success
    checks = _checks(res)
    assert all(checks[c].passed for c in (filter_assets.NO_DOMAIN_VANISHED, filter_assets.KILL_RATES_EXPECTED,
                                          filter_assets.BREVITY_KEPT, filter_assets.KEEP_SHARE_HELD,
                                          "clusters_consistent"))
    storage = Storage(root=str(tmp_path / "storage"))
    dec = decisions.read_decisions(storage, [s.name for s in spec.sources])
    assert set(dec) == {s.name for s in spec.sources}
    assert all(t.column("language").null_count == 0 for t in dec.values())  # a language on every document
    # the row-group-at-a-time report is the per-document reference's, byte for byte
    from mix_assets_tests.oracles import decisions_reference as ref
    assert storage.read_text(layout.FILTER_REPORT) == decisions.report_json(
        ref.summarise(dec, decisions.guard_for(spec)))
    keys = storage.read_bytes(layout.DEDUP_KEYS)
    # every rejected document has its dedup_keys row and never survives a cluster holding a kept one
    import pyarrow.parquet as pq
    dk = pq.read_table(storage.source(layout.DEDUP_KEYS)).to_pylist()
    rejected = decisions.rejected_ids(storage, list(dec))
    assert rejected and set(rejected) <= {r["doc_id"] for r in dk}
    survivors = {r["cluster_id"] for r in dk if r["doc_id"] not in rejected}
    assert not survivors & set(rejected)

    def looser(data):
        _source(data, "stories")["filters"] = {"fineweb": {"enabled": False}}

    res = _run(_demo(tmp_path, looser), inst, with_sources=False)
    md = next(m.materialization.metadata for m in res.get_asset_materialization_events()
              if m.asset_key.path == ["document_filters"])
    assert res.success and md["reused_sources"].value == "encyclopedia, math, python_reference"
    assert storage.read_bytes(layout.DEDUP_KEYS) == keys  # fineweb rejected nothing in stories


@pytest.mark.parametrize("planted", ["source", "length bucket"])
def test_a_mis_set_threshold_that_deletes_a_domain_stops_the_run(tmp_path, planted):
    def mis_set(data):
        if planted == "source":  # stories' documents hold ~90 words: a 150-word minimum deletes the source
            _source(data, "stories")["filters"] = {"gopher_quality": {"min_doc_words": 150}}
        else:  # every document under 1,000 characters, whatever its source
            data["filters"]["gopher_quality"] = {"min_doc_words": 180}
            for s in data["sources"]:
                s.setdefault("filters", {}).setdefault("gopher_quality", {})["min_doc_words"] = 180

    res = _run(_demo(tmp_path, mis_set))
    gate = _checks(res)[filter_assets.NO_DOMAIN_VANISHED]
    assert not res.success and not gate.passed
    want = "source stories" if planted == "source" else "length_bucket 200 - 1000 chars"
    assert want in gate.description and "Held back (not run): dedup_keys" in gate.description
    assert "document_filters" in _materialized(res) and "dedup_keys" not in _materialized(res)


@pytest.mark.slow
def test_demo_masks_explain_every_rejected_document_and_every_gate_is_green(tmp_path):
    import pyarrow.parquet as pq

    from mix_assets.definitions import build_definitions

    spec = _demo(tmp_path)
    defs = build_definitions(spec)
    sel = dg.AssetSelection.all() - dg.AssetSelection.assets("published_revision")
    res = dg.materialize(list(defs.assets), resources=defs.resources, instance=dg.DagsterInstance.ephemeral(),
                         selection=sel, raise_on_error=False)
    assert res.success and [c.check_name for c in res.get_asset_check_evaluations() if not c.passed] == []
    storage = Storage(root=str(tmp_path / "storage"))
    rejected = decisions.rejected_ids(storage, [s.name for s in spec.sources])
    masks = {r["doc_id"]: r["reasons"] for r in pq.read_table(storage.source(layout.EXCLUSION_MASKS)).to_pylist()}
    assert rejected and all(reason in masks[d] for d, reason in rejected.items())
    split = set(pq.read_table(storage.source(layout.VALIDATION_SPLIT)).column("doc_id").to_pylist())
    assert not split & set(rejected)
    # the samples beside the rejects hold no run of scrub_words eval-item words
    from mix_assets.stages.audit import metadata as audit_md
    from mix_assets.stages.audit import contamination as ct
    from mix_assets.stages.audit.eval_scan import scrub_hashes

    meta = next(m.materialization.metadata for m in res.get_asset_materialization_events()
                if m.asset_key.path == ["document_filters"])
    assert "kept" in meta["rejects"].value and "gopher_quality" in meta["rejects"].value
    texts = [t for _, t in audit_md.metadata_strings(meta)]
    assert ct.leaking_strings(texts, scrub_hashes(spec), spec.audit.scrub_words) == []


def test_a_keep_share_the_filters_do_not_reach_warns_and_the_run_goes_on(tmp_path):
    def optimistic(data):  # the demo's cascade rejects documents (its green run asserts some)
        data["filters"]["keep_share"] = 0.999

    res = _run(_demo(tmp_path, optimistic))
    check = _checks(res)[filter_assets.KEEP_SHARE_HELD]
    assert res.success and not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.description.startswith("kept less than the raw sample assumed: ")
    rows = check.metadata["kept_bytes_shares"].value.records
    shares = {r.data["source"]: check.metadata[f"kept_bytes_share/{r.data['source']}"].value for r in rows}
    below = [s for s, v in shares.items() if v < 0.999]
    assert below and check.metadata["below_keep_share_sources"].value == len(below)
    assert all(f"{s} " in check.description for s in below)
