"""The Definitions object: every asset, check, job, schedule and resource of the mix.

The graph is built from the mix spec named by MIX_CONFIG (default configs/demo.yaml), so a changed
list of sources needs a code-location reload (the UI's "Reload" button).
"""

from __future__ import annotations

from typing import Optional

import dagster as dg

from mix_assets.stages.audit.assets import build_audit_assets
from mix_assets.stages.common import chain_code_versions
from mix_assets.stages.dedup.assets import build_dedup_assets
from mix_assets.stages.filters.assets import build_filter_assets
from mix_assets.stages.lines.assets import build_line_assets
from mix_assets.stages.quality.assets import build_quality_assets
from mix_assets.stages.manifest.assets import build_manifest_assets
from mix_assets.stages.publish.assets import build_publish_assets
from mix_assets.stages.publish.reproducibility import build_reproducibility_checks
from mix_assets.stages.sources.assets import build_source_assets
from mix_assets.stages.split.assets import build_split_assets
from mix_assets.stages.tokens.assets import build_tokens_assets
from mix_assets.config import MixSpec, load_spec
from mix_assets import dagster_sqlite
from mix_assets.core import imports
from mix_assets.jobs import build_jobs, executor_from_env
from mix_assets.resources import MixResource


def build_assets(spec: MixSpec) -> list:
    """Assets and checks of every stage, in graph order, each asset's code_version chained with its parents'
    (stages/common.chain_code_versions: the UI marks every asset an edit affects, not only its readers).

    Built once per process for a config (its JSON and path) and package root (core/imports.ROOT): Dagster reconstructs a run's job several times
    in one process (5 in-process `rebuild_mix` runs of bench/incremental.py, ~0.2 s each), and the code a
    code_version hashes is read once per process anyway (core/imports.py)."""
    key = (spec.model_dump_json(), spec.config_path, str(imports.ROOT))  # the package the versions are read from
    if key not in _ASSETS:
        if len(_ASSETS) >= 8:
            _ASSETS.clear()
        _ASSETS[key] = _build_assets(spec)
    return list(_ASSETS[key])


_ASSETS: dict[tuple, list] = {}


def _build_assets(spec: MixSpec) -> list:
    return chain_code_versions([
        *build_source_assets(spec),
        *build_line_assets(spec),
        *build_quality_assets(spec),
        *build_filter_assets(spec),
        *build_dedup_assets(spec),
        *build_audit_assets(spec),
        *build_split_assets(spec),
        *build_tokens_assets(spec),
        *build_manifest_assets(spec),
        *build_publish_assets(spec, derive=code_versions),
    ])


def code_versions(spec: MixSpec) -> dict[str, str]:
    """{asset: chained code_version} of `spec`'s assets: what published_revision re-derives from the config a
    revision carries (stages/publish/input_keys.config_problems)."""
    return {k.to_user_string(): s.code_version for a in build_assets(spec) for s in getattr(a, "specs", ())
            for k in (s.key,) if s.code_version is not None}


def build_definitions(spec: Optional[MixSpec] = None, storage_root: Optional[str] = None) -> dg.Definitions:
    spec = spec or load_spec()
    # the run's process commits each event to the instance's SQLite without an fsync (mix_assets/dagster_sqlite.py)
    dagster_sqlite.install()
    # jobs.py: rebuild_mix, refresh_<source>, the rebuild schedule, gated automation (see its docstring)
    orch = build_jobs(spec, build_assets(spec))
    keys = {k for a in orch.assets for k in a.keys}
    return dg.Definitions(
        assets=orch.assets,
        asset_checks=build_reproducibility_checks(keys),
        jobs=orch.jobs,
        schedules=orch.schedules,
        sensors=orch.sensors,
        executor=executor_from_env(),
        resources={"mix": MixResource(config_path=spec.config_path, storage_root=storage_root)},
    )


defs = build_definitions()
