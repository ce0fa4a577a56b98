"""stages/manifest/metadata.py as the UI shows it: tokens per source as a table."""

import dagster as dg

from mix_assets.stages.manifest import metadata as md
from mix_assets_tests.support.metadata_views import MAX_UI_COLUMNS, FakeStorage, cells, columns


def test_per_source_is_a_table_not_a_json_blob():
    sources = {s: {"train_tokens": 1_000_000, "val_tokens": 10_000, "budget_tokens": 1_000_000, "epochs": 1.0,
                   "unique_documents": 4_321} for s in ("web", "code")}
    m = {"fingerprint": "f" * 64, "files": [], "sources": sources,
         "totals": {k: 1 for k in ("train_tokens", "val_tokens", "train_samples", "val_samples", "shards",
                                   "dropped_tail_tokens")}}
    got = md.manifest(FakeStorage(), "mix/manifest.json", m)
    assert isinstance(got["per_source"], dg.TableMetadataValue), type(got["per_source"])
    assert cells(got["per_source"], "source") == ["web", "code"]
    assert cells(got["per_source"], "train_tokens") == ["1,000,000", "1,000,000"]
    assert len(columns(got["per_source"])) <= MAX_UI_COLUMNS
    assert "unique_documents" in got["per_source_md"].value and "4,321" in got["per_source_md"].value

