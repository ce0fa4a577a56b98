"""The Definitions object: every asset, check, job, schedule and resource of the mix.

The graph is built from the mix spec named by MIX_CONFIG (default configs/demo.yaml), so a changed
list of sources needs a code-location reload (the UI's "Reload" button).
"""

from __future__ import annotations

from typing import Optional

import dagster as dg

from mix_assets.assets.publish import build_publish_assets
from mix_assets.assets.sources import build_source_assets
from mix_assets.config import MixSpec, load_spec
from mix_assets.resources import MixResource


def build_assets(spec: MixSpec) -> list:
    """Assets and checks of every stage, in graph order."""
    return [*build_source_assets(spec), *build_publish_assets(spec)]


def build_definitions(spec: Optional[MixSpec] = None, storage_root: Optional[str] = None) -> dg.Definitions:
    spec = spec or load_spec()
    assets = build_assets(spec)
    rebuild_mix = dg.define_asset_job(
        "rebuild_mix", selection=dg.AssetSelection.all(), description="Rebuild the whole mix, gates included."
    )
    return dg.Definitions(
        assets=assets,
        jobs=[rebuild_mix],
        resources={"mix": MixResource(config_path=spec.config_path, storage_root=storage_root)},
    )


defs = build_definitions()
