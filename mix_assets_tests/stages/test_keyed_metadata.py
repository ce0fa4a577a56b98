"""What a keyed record keeps of a materialisation (stages/common._dump_dagster / _load_dagster): the metadata
and check results, through dagster's serdes, as they were; a value that does not serialise is stored as Dagster's
normalisation shows it (a value normalisation lets through that serdes refuses is left out and named)."""

from __future__ import annotations

import dagster as dg
from dagster._core.definitions.metadata import normalize_metadata

from mix_assets.stages.common import _dump_dagster, _load_dagster


def test_metadata_and_check_results_round_trip():
    meta = {
        "docs": 3, "share": 0.25, "name": "web", "flag": True,
        "md": dg.MetadataValue.md("| a |\n|---|\n| 1 |"), "json": dg.MetadataValue.json({"x": [1, 2]}),
        "path": dg.MetadataValue.path("/tmp/x"), "url": dg.MetadataValue.url("https://example.org"),
        "table": dg.MetadataValue.table([dg.TableRecord({"a": 1})], dg.TableSchema([dg.TableColumn("a", "int")])),
        "null": dg.MetadataValue.null(), "asset": dg.MetadataValue.asset(dg.AssetKey(["raw", "web"])),
    }
    checks = [
        dg.AssetCheckResult(check_name="budget_met", passed=False, severity=dg.AssetCheckSeverity.WARN,
                            metadata={"est": 10, "note": dg.MetadataValue.text("short")}, description="10 < 12"),
        dg.AssetCheckResult(check_name="has_documents", passed=True, asset_key=dg.AssetKey(["raw", "web"])),
    ]
    got_meta, got_checks = _load_dagster(_dump_dagster(meta, checks))
    assert got_meta == dict(normalize_metadata(meta))  # as Dagster normalises it
    assert [(c.check_name, c.passed, c.severity, c.description, c.asset_key) for c in got_checks] == [
        ("budget_met", False, dg.AssetCheckSeverity.WARN, "10 < 12", None),
        ("has_documents", True, dg.AssetCheckSeverity.ERROR, None, dg.AssetKey(["raw", "web"]))]
    assert dict(got_checks[0].metadata) == dict(normalize_metadata({"est": 10, "note": dg.MetadataValue.text("short")}))


def test_a_value_that_does_not_serialise_is_kept_as_dagster_shows_it():
    class Opaque:
        pass

    got_meta, _ = _load_dagster(_dump_dagster({"ok": 1, "odd": Opaque()}, []))
    assert got_meta["ok"] == dg.MetadataValue.int(1)
    assert got_meta["odd"] == dg.MetadataValue.text("[Opaque] (unserializable)")  # dagster's normalisation
