"""validation_split through Dagster: its gates hold back tokenisation (upstream stand-ins from tokens_fixtures)."""

from __future__ import annotations

import re

import dagster as dg

from mix_assets.stages.split.assets import VAL_DISJOINT_FROM_TRAIN, VAL_SHARE_IN_TOLERANCE
from mix_assets.core import layout
from mix_assets_tests.support.tokens_stage import checks, run, setup


def test_split_is_cluster_disjoint_and_within_the_share(tmp_path):
    spec, assets, res = setup(tmp_path)
    result = run(assets, res, selection=dg.AssetSelection.assets("validation_split"))
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert checks(result) == {VAL_DISJOINT_FROM_TRAIN: True, VAL_SHARE_IN_TOLERANCE: True}
    meta = result.asset_materializations_for_node("validation_split")[0].metadata
    assert meta["dagster/row_count"].value == meta["docs"].value > meta["val_docs"].value > 0


def test_val_share_gate_stops_the_shards(tmp_path):
    spec, assets, res = setup(tmp_path, split={"val_fraction": 0.3, "tolerance": 0.001})
    result = run(assets, res)
    assert not result.success
    assert checks(result)[VAL_SHARE_IN_TOLERANCE] is False
    ev = next(e for e in result.get_asset_check_evaluations() if e.check_name == VAL_SHARE_IN_TOLERANCE)
    # percentages and counts, not `val share 0.2980 outside 0.3`
    assert re.fullmatch(r"val share \d+\.\d\d% outside 30\.00% ± 0% \([\d,]+ of [\d,]+ documents\)\. .*",
                        ev.description), ev.description
    assert result.asset_materializations_for_node("token_shards") == []
    assert not (tmp_path / "storage" / layout.MANIFEST).exists()
