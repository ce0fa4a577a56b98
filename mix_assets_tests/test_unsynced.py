"""Issue 27 item 3: after a config edit, the assets Dagster marks stale ("Unsynced" in the UI) are exactly the
ones the edit affects: the assets reading the edited field and everything downstream of them; none for an
edit that changes nothing.

Dagster 1.13 marks an asset stale for a new code_version of its own or a new data version of a parent, not for
a parent's new code_version (dagster/_core/definitions/data_version.py, CachingStaleStatusResolver), so each
asset's code_version is chained with its parents' (stages/common.chain_code_versions). Each case below:
(1) the assets whose code_version the edit changes are exactly the expected set, and (2) a real instance
holding a full build of the demo, asked through Dagster's own stale status resolver with the edited
definitions, marks exactly that set STALE and every other asset FRESH.

The readers are written by hand, from what each asset reads (test_config_edits' last test traces them); the
expected set is their downstream closure in the graph.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from mix_assets.config import load_spec
from mix_assets.definitions import build_definitions
from mix_assets_tests.test_config_edits import _edit_filter_threshold, _edit_source_path, _language_off, _set, _set_top

pytestmark = pytest.mark.slow

RAWS = {"raw/encyclopedia", "raw/math", "raw/python_reference", "raw/stories"}


def _min_rows(d: dict, case: Path) -> None:
    d["audit"]["tasks"][0]["min_rows"] = d["audit"]["tasks"][0].get("min_rows", 1) + 1


def _rationale(d: dict, case: Path) -> None:
    d["sources"][0]["rationale"] += " (reworded)"


def _rewritten(d: dict, case: Path) -> None:
    """No change: the same config written again, a default spelled out and an operational field's value
    (how many threads, how many partitions dedup_keys' reduce runs in) changed, which no artifact's bytes
    depend on."""
    d["dedup"]["threads"] = (d["dedup"].get("threads") or 1) + 1
    d["dedup"]["partitions"] = 8
    d["tokenizer"]["vocab_size"] = load_spec(case / "demo.yaml").tokenizer.vocab_size


# (id, edit, the assets reading the edited field: the edit marks them and everything downstream of them)
EDITS = [
    ("filter_threshold", _edit_filter_threshold, {"document_filters"}),
    ("dedup_threshold", _set("dedup", "threshold", 0.5), {"dedup_keys"}),
    ("vocab_size", _set("tokenizer", "vocab_size", 2048), {"tokenizer"}),
    ("source_path", _edit_source_path, {"raw/stories"}),
    ("mask_contaminated", _set("audit", "mask_contaminated", False), {"exclusion_masks"}),
    ("language_filter", _language_off, {"document_filters"}),
    ("seed", _set_top("seed", 1235), RAWS | {"validation_split", "tokenizer", "token_shards", "manifest"}),
    # a source's raw budget holds its validation share (MixSpec.raw_budget): every raw/<source> reads it
    ("val_fraction", _set("split", "val_fraction", 0.05), RAWS | {"exclusion_masks", "validation_split"}),
    ("min_rows", _min_rows, {"eval_registry"}),
    # a source's rationale is its description in the UI and a line of the published config, no other byte
    ("rationale", _rationale, {"manifest"}),
    ("no_op", _rewritten, set()),
]


def downstream_closure(graph, names: set[str]) -> set[str]:
    """`names` and every asset downstream of one of them in `graph`."""
    out, todo = set(names), [dg.AssetKey.from_user_string(n) for n in names]
    while todo:
        for child in graph.get(todo.pop()).child_keys:
            if child.to_user_string() not in out:
                out.add(child.to_user_string())
                todo.append(child)
    return out


def code_versions(cfg: Path) -> dict[str, str]:
    graph = build_definitions(load_spec(cfg)).resolve_asset_graph()
    return {k.to_user_string(): graph.get(k).code_version for k in graph.materializable_asset_keys}


def edit_config(cfg: Path, edit) -> Path:
    """A copy of `cfg` beside it (same storage and publish paths) with `edit` applied."""
    d = yaml.safe_load(cfg.read_text())
    edit(d, cfg.parent)
    out = cfg.with_name(cfg.stem + "_edited.yaml")
    out.write_text(yaml.safe_dump(d, sort_keys=False))
    return out


def stale_assets(instance: dg.DagsterInstance, cfg: Path) -> set[str]:
    """The assets Dagster's stale status resolver (the one the UI's GraphQL asks) marks STALE in `instance`
    under the definitions built from `cfg`."""
    from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
    from dagster._time import get_current_datetime

    graph = build_definitions(load_spec(cfg)).resolve_asset_graph()
    view = AssetGraphView(temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
                          instance=instance, asset_graph=graph)
    resolver = CachingStaleStatusResolver(instance=instance, asset_graph=graph, loading_context=view)
    status = {k.to_user_string(): resolver.get_status(k) for k in graph.materializable_asset_keys}
    assert StaleStatus.MISSING not in status.values(), status
    return {k for k, s in status.items() if s == StaleStatus.STALE}


@pytest.fixture(scope="module")
def built(built_demo) -> tuple[Path, dg.DagsterInstance]:
    """The demo (private corpus copy) built once into an instance on disk: the session's build
    (support/built_demo.py), restored with the instance that ran it."""
    cfg = built_demo.restore()
    with dg.DagsterInstance.local_temp(str(built_demo.home)) as instance:
        yield cfg, instance


def test_nothing_is_unsynced_right_after_a_build(built):
    cfg, instance = built
    assert stale_assets(instance, cfg) == set()


@pytest.mark.parametrize("name,edit,readers", EDITS, ids=[e[0] for e in EDITS])
def test_a_config_edit_marks_exactly_the_assets_it_affects(built, name, edit, readers):
    cfg, instance = built
    edited = edit_config(cfg, edit)
    graph = build_definitions(load_spec(cfg)).resolve_asset_graph()
    expected = downstream_closure(graph, readers)
    before, after = code_versions(cfg), code_versions(edited)
    assert before.keys() == after.keys()
    assert {a for a in before if before[a] != after[a]} == expected
    assert stale_assets(instance, edited) == expected
