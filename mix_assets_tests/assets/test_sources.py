"""raw/<source>: drop reasons reach the asset's stats file and metadata."""

from __future__ import annotations

import json

import dagster as dg

from mix_assets.assets.sources import build_source_assets
from mix_assets.config import load_spec
from mix_assets.lib import layout
from mix_assets.resources import MixResource

from ..conftest import minimal_config, source, write_config


def test_binary_documents_are_counted_in_stats_and_metadata(tmp_path):
    d = tmp_path / "texts"
    d.mkdir()
    (d / "prose.txt").write_text("A paragraph of prose.\n\nAnother paragraph of prose.\n")
    (d / "zeros.txt").write_bytes(b"\x00" * 512)
    cfg = write_config(tmp_path, minimal_config(sources=[source("t", {"kind": "text", "paths": ["texts"]})]))
    spec = load_spec(cfg)
    # (raise_on_error off: two short paragraphs do not meet the budget check)
    res = dg.materialize(build_source_assets(spec), instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
                         resources={"mix": MixResource(config_path=str(cfg), storage_root=str(tmp_path / "st"))})
    meta = res.get_asset_materialization_events()[0].materialization.metadata
    assert meta["dropped_docs/binary"].value == 1 and meta["dropped_docs/control_chars"].value == 0
    assert meta["docs"].value == 2 and meta["drop_notes"].value == ["zeros.txt#0: binary: 512 NUL characters"]
    stats = json.loads((tmp_path / "st" / layout.RAW_STATS.format(source="t")).read_text())
    assert stats["dropped"]["binary"] == 1 and stats["drop_notes"] == meta["drop_notes"].value
