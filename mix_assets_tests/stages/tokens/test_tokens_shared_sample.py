"""Real configs through manifest.json.

* demo.yaml through the real definitions (sources, dedup, audit, masks, split, tokens, manifest);
* the real-text mix (the in-repo fixture; shared-sample.yaml on the shared data) from raw/<source>, with stand-ins for dedup_keys /
  exclusion_masks / contamination_report that honour their file contracts (exact-text clusters;
  the first doc_id of each normalised-text hash survives) — this keeps the tokens stage's test
  independent of the dedup and audit stages' runtime;
* the demo's planted near-duplicates with an exact-only stand-in: val_disjoint_from_train catches them.
"""

from __future__ import annotations

import hashlib
import json

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from mix_assets.stages.manifest.assets import build_manifest_assets
from mix_assets.stages.sources.assets import build_source_assets
from mix_assets.stages.split.assets import build_split_assets
from mix_assets.stages.tokens.assets import build_tokens_assets
from mix_assets.config import REPO_ROOT, load_spec
from mix_assets.core import layout
from mix_assets.format.checker import check_manifest
from mix_assets.core.storage import Storage
from mix_assets.resources import MixResource
from mix_assets_tests.support.shared_data import real_mix_config
from mix_assets_tests.support.tokens_fixtures import stamp
from mix_assets_tests.oracles.tokens_reference import as_built, reference_shards


def _stand_in_dedup_and_masks(st: Storage, sources: list[str]) -> None:
    keys, masks, first = [], [], {}
    rows = []
    for s in sources:
        t = pq.read_table(st.local_path(layout.RAW_DOCS.format(source=s)), columns=["doc_id", "text"])
        rows += [(s, d, text) for d, text in zip(t.column(0).to_pylist(), t.column(1).to_pylist())]
    for s, d, text in rows:
        k = hashlib.sha256(" ".join(text.lower().split()).encode()).hexdigest()
        c = first.setdefault(k, d)
        keys.append(dict(doc_id=d, source=s, exact_key=k, cluster_id=c, cluster_size=1, keep=c == d,
                         reason=None if c == d else "exact_dup"))
        if c != d:
            masks.append(dict(doc_id=d, source=s, reasons=["exact_dup"], kept_doc_id=c))
    raws = [f"raw/{s}" for s in sources]
    keys.sort(key=lambda r: r["doc_id"])  # dedup_keys' contract: sorted by doc_id (the reduce steps stream it)
    with st.writing(layout.DEDUP_KEYS) as tmp:
        pq.write_table(pa.Table.from_pylist(keys), tmp)
    stamp(st, "dedup_keys", [layout.DEDUP_KEYS], raws)
    schema = pa.schema([("doc_id", pa.string()), ("source", pa.string()), ("reasons", pa.list_(pa.string())),
                        ("kept_doc_id", pa.string())])
    st.write_text(layout.CONTAMINATION_REPORT, json.dumps({"stand_in": True}))
    stamp(st, "contamination_report", [layout.CONTAMINATION_REPORT], raws)
    with st.writing(layout.EXCLUSION_MASKS) as tmp:
        pq.write_table(pa.Table.from_pylist(masks, schema=schema), tmp)
    stamp(st, "exclusion_masks", [layout.EXCLUSION_MASKS], ["dedup_keys", "contamination_report", *raws])


@pytest.mark.slow
def test_real_mix_through_manifest(tmp_path, real_data):
    cfg = real_mix_config(tmp_path, real_data)
    d = yaml.safe_load(cfg.read_text())
    d.pop("line_dedup", None)  # the per-document oracle (reference_shards) encodes raw text
    d.pop("quality", None)  # no classifier: the manifest would list its model (tests: stages/quality)
    for src in d["sources"]:
        (src.get("filters") or {}).pop("quality", None)
    cfg.write_text(yaml.safe_dump(d, sort_keys=False))
    spec = load_spec(cfg)
    res = {"mix": MixResource(config_path=str(cfg), storage_root=str(tmp_path / "storage"))}
    inst = dg.DagsterInstance.ephemeral()
    raw = dg.materialize(build_source_assets(spec), resources=res, instance=inst)
    assert raw.success
    st = Storage(str(tmp_path / "storage"))
    _stand_in_dedup_and_masks(st, [s.name for s in spec.sources])

    assets = [*build_split_assets(spec), *build_tokens_assets(spec), *build_manifest_assets(spec)]
    result = dg.materialize(assets, resources=res, instance=inst, raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    evals = result.get_asset_check_evaluations()
    assert len(evals) == 8 and all(e.passed for e in evals)
    # the fast backend built the shards (the tokenizer is a trained byte-level BPE) and the sample matched HF
    exact = next(e for e in evals if e.check_name == "token_ids_match_reference")
    assert exact.metadata["encoder_backend"].value == "tiktoken" and exact.metadata["sampled_documents"].value > 0

    manifest = json.loads((tmp_path / "storage" / layout.MANIFEST).read_text())
    assert check_manifest(manifest, tmp_path / "storage" / "mix") == []
    for s in spec.sources:  # every source filled exactly to N x share x epochs
        assert manifest["sources"][s.name]["train_tokens"] == spec.stream_budget(s.name)
        assert manifest["sources"][s.name]["val_tokens"] > 0
    assert manifest["packing"]["separator"] == spec.packing.separator and manifest["dtype"] == "uint16"
    assert manifest["tokenizer"]["vocab_size"] == spec.tokenizer.vocab_size
    assert as_built(manifest) == reference_shards(st, spec)  # byte for byte the per-document implementation


@pytest.mark.slow
def test_demo_planted_near_dups_are_caught_when_dedup_only_matches_exact_text(tmp_path):
    """The demo corpus plants near-duplicates; with an exact-only stand-in for dedup_keys some land on
    both sides of the split, and val_disjoint_from_train (which re-measures Jaccard from the text)
    stops the run before any shard is written."""
    cfg = REPO_ROOT / "configs" / "demo.yaml"
    spec = load_spec(cfg)
    res = {"mix": MixResource(config_path=str(cfg), storage_root=str(tmp_path / "storage"))}
    inst = dg.DagsterInstance.ephemeral()
    assert dg.materialize(build_source_assets(spec), resources=res, instance=inst).success
    _stand_in_dedup_and_masks(Storage(str(tmp_path / "storage")), [s.name for s in spec.sources])
    assets = [*build_split_assets(spec), *build_tokens_assets(spec), *build_manifest_assets(spec)]
    result = dg.materialize(assets, resources=res, instance=inst, raise_on_error=False)
    assert not result.success
    ev = next(e for e in result.get_asset_check_evaluations() if e.check_name == "val_disjoint_from_train")
    assert not ev.passed
    assert ev.metadata["shared_clusters"].value == 0  # the clusters alone look clean ...
    assert ev.metadata["val_docs_with_train_near_dup"].value > 0  # ... the text does not
    assert ev.metadata["max_cross_split_jaccard"].value >= spec.dedup.threshold
    assert result.asset_materializations_for_node("token_shards") == []


@pytest.mark.slow
def test_demo_end_to_end_through_manifest_with_every_gate_green(tmp_path):
    """configs/demo.yaml through the real definitions: sources, dedup, audit, masks, split, tokens, manifest."""
    from mix_assets.definitions import build_definitions

    spec = load_spec(REPO_ROOT / "configs" / "demo.yaml")
    defs = build_definitions(spec, storage_root=str(tmp_path / "storage"))
    sel = dg.AssetSelection.all() - dg.AssetSelection.assets("published_revision")
    result = dg.materialize(list(defs.assets), resources=defs.resources, instance=dg.DagsterInstance.ephemeral(),
                            selection=sel, raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    evals = result.get_asset_check_evaluations()
    names = {e.check_name for e in evals}
    assert {"val_disjoint_from_train", "val_share_in_tolerance", "no_empty_shard",
            "dropped_tail_and_seam_recorded", "manifest_self_consistent", "token_ids_match_reference"} <= names
    assert all(e.passed for e in evals)
    shards = result.asset_materializations_for_node("token_shards")[0].metadata
    assert shards["encoder_backend"].value == "tiktoken", shards["encoder_fallback_reason"].value
    manifest = json.loads((tmp_path / "storage" / layout.MANIFEST).read_text())
    assert check_manifest(manifest, tmp_path / "storage" / "mix") == []
    for s in spec.sources:
        assert manifest["sources"][s.name]["train_tokens"] == spec.stream_budget(s.name)
    # the demo's shards are byte for byte what the per-document implementation wrote
    assert as_built(manifest) == reference_shards(Storage(str(tmp_path / "storage")), spec)
