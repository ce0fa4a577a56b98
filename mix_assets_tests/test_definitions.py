import os
import shutil
import subprocess
import sys

import dagster as dg
import pyarrow.parquet as pq

from mix_assets.config import REPO_ROOT, load_spec
from mix_assets.definitions import build_definitions
from mix_assets.core import layout
from mix_assets_tests.support.shared_data import real_mix_config


def test_defs_are_loadable():
    from mix_assets.definitions import defs

    dg.Definitions.validate_loadable(defs)


def test_dg_check_defs():
    dg_bin = shutil.which("dg") or os.path.join(os.path.dirname(sys.executable), "dg")
    out = subprocess.run([dg_bin, "check", "defs"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_one_source_node_per_source_with_its_rationale():
    spec = load_spec(REPO_ROOT / "configs" / "demo.yaml")
    defs = build_definitions(spec)
    graph = defs.resolve_asset_graph()
    for src in spec.sources:
        node = graph.get(dg.AssetKey(["raw", src.name]))
        assert node.group_name == "sources"
        assert node.description == src.rationale
        assert node.owners == spec.owners


def test_kinds_name_what_each_asset_stores():
    """Kinds are storage formats and places (json, parquet, numpy, s3, ...), not the language."""
    defs = build_definitions(load_spec(REPO_ROOT / "configs" / "demo.yaml"))
    kinds = {s.key.to_user_string(): s.kinds for a in defs.assets for s in a.specs}
    assert not [k for k, v in kinds.items() if "python" in v], kinds
    assert kinds["eval_registry"] == {"json", "numpy"} and kinds["contamination_report"] == {"json", "parquet"}


def _materialize_sources(config, tmp_path):
    spec = load_spec(config)
    defs = build_definitions(spec, storage_root=str(tmp_path / "storage"))
    selection = dg.AssetSelection.groups("sources")
    res = dg.materialize(
        [a for a in defs.assets if any(k.path[0] == "raw" for k in a.keys)],
        resources=defs.resources,
        instance=dg.DagsterInstance.ephemeral(),
        selection=selection,
    )
    assert res.success
    checks = res.get_asset_check_evaluations()
    assert len(checks) == 2 * len(spec.sources) and all(c.passed for c in checks)
    for src in spec.sources:
        t = pq.read_table(tmp_path / "storage" / layout.RAW_DOCS.format(source=src.name))
        assert t.num_rows > 0 and set(t.column("source").to_pylist()) == {src.name}
        assert len(t.column("doc_id").unique()) == t.num_rows
    return spec, res


def test_materialize_sources_demo(tmp_path):
    _materialize_sources(REPO_ROOT / "configs" / "demo.yaml", tmp_path)


def test_materialize_sources_real_data(tmp_path, real_data):
    spec, res = _materialize_sources(real_mix_config(tmp_path, real_data), tmp_path)
    by_key = {m.asset_key.path[-1]: m.materialization.metadata for m in res.get_asset_materialization_events()}
    # the Latin-1 speeches decode through the configured fallback, and are counted
    assert by_key["state_union"]["fallback_decoded_docs"].value > 0
    assert by_key["gsm8k_train"]["dropped_docs/sampled_out"].value > 0


def test_code_versions_cover_the_config_each_asset_reads(tmp_path):
    """Consumers refuse records of another code_version (core/lineage.py), so a config field that changes an
    asset's bytes must change some code_version on its chain: turning the filter cascade off (document_filters
    leaves the graph) changes dedup_keys' and exclusion_masks' (they read its decisions); the demo corpus's
    generator settings change raw/<source>'s and eval_registry's (they read its files)."""
    import yaml

    base = yaml.safe_load((REPO_ROOT / "configs" / "demo.yaml").read_text())

    def versions(**edit) -> dict[str, str]:
        d = {**base, **edit}
        (tmp_path / "configs").mkdir(exist_ok=True)
        cfg = tmp_path / "configs" / f"c{len(list(tmp_path.glob('configs/*')))}.yaml"
        cfg.write_text(yaml.safe_dump(d, sort_keys=False))
        graph = build_definitions(load_spec(cfg)).resolve_asset_graph()
        return {k.to_user_string(): graph.get(k).code_version for k in graph.get_all_asset_keys()}

    now = versions()
    off = versions(filters=None, sources=[{k: v for k, v in s.items() if k != "filters"} for s in base["sources"]])
    assert "document_filters" in now and "document_filters" not in off
    assert off["dedup_keys"] != now["dedup_keys"] and off["exclusion_masks"] != now["exclusion_masks"]
    other_corpus = versions(demo_corpus={**base["demo_corpus"], "seed": base["demo_corpus"]["seed"] + 1})
    assert all(other_corpus[k] != now[k] for k in now if k.startswith("raw/") or k == "eval_registry")
    # versions chain (stages/common.chain_code_versions): every asset below them moves with them (all of them)
    assert all(other_corpus[k] != now[k] for k in now)


def test_assets_are_built_once_per_config_and_again_for_an_edited_one():
    """build_assets is kept per process for a config's JSON and path (Dagster reconstructs a job several times
    in one run); an edited config (even one field) builds its own, with its own code versions."""
    from mix_assets import definitions

    spec = load_spec(REPO_ROOT / "configs" / "demo.yaml")
    first = definitions.build_assets(spec)
    again = definitions.build_assets(load_spec(REPO_ROOT / "configs" / "demo.yaml"))
    assert [id(a) for a in first] == [id(a) for a in again] and first is not again
    edited = definitions.build_assets(spec.model_copy(update={"seed": spec.seed + 1}))
    assert not {id(a) for a in edited} & {id(a) for a in first}
    assert definitions.code_versions(spec) != definitions.code_versions(spec.model_copy(update={"seed": spec.seed + 1}))
