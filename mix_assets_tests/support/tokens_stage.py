"""validation_split -> tokenizer -> token_shards -> manifest over stand-in upstream files (tokens_fixtures)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml

from mix_assets.stages.manifest.assets import build_manifest_assets
from mix_assets.stages.split.assets import build_split_assets
from mix_assets.stages.tokens.assets import build_tokens_assets
from mix_assets.resources import MixResource
from mix_assets_tests.support.tokens_fixtures import write_upstream
from mix_assets_tests.support.tokens_spec import tiny_spec


def setup(tmp_path: Path, **kw):
    spec = tiny_spec(tmp_path, **kw)
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(spec.model_dump(mode="json")))
    write_upstream(tmp_path / "storage", {s.name: 300 for s in spec.sources}, near_dups=5, masked=3)
    assets = [*build_split_assets(spec), *build_tokens_assets(spec), *build_manifest_assets(spec)]
    res = {"mix": MixResource(config_path=str(cfg), storage_root=str(tmp_path / "storage"))}
    return spec, assets, res


def run(assets, res, selection=None):
    return dg.materialize(assets, resources=res, instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
                          selection=selection)


def checks(result) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
