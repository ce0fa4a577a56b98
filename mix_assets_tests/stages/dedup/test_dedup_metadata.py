"""stages/dedup/metadata.py as the UI shows it: exclusion_masks' composition keeps what its gates read, dup
samples shown literally."""

from types import SimpleNamespace

from mix_assets.stages.dedup import metadata as md
from mix_assets_tests.support.metadata_views import MAX_UI_COLUMNS, MARKDOWN, cells, columns, full_columns


def test_exclusion_masks_composition_keeps_what_its_gates_read(tmp_path):
    import pyarrow.parquet as pq

    from mix_assets.stages.dedup.dedup import EXCLUSION_SCHEMA

    pq.write_table(EXCLUSION_SCHEMA.empty_table(), tmp_path / "masks.parquet")
    storage = SimpleNamespace(uri=lambda k: f"/store/{k}", source=lambda k: str(tmp_path / "masks.parquet"))
    comp = [{"source": s, "docs_before": 20_000, "docs_after": 18_000, "bytes_before": 9_000_000,
             "bytes_after": 8_000_000, "tokens_before": 2_500_000, "tokens_after": 2_000_000, "share_before": 0.5,
             "share_after": 0.48, "lost_token_share": 0.2} for s in ("web", "code")]
    m = SimpleNamespace(documents=40_000, excluded_docs=4_000, per_reason={"exact_dup": 3_000, "near_dup": 1_000},
                        mask_contaminated=True, composition=comp, samples=[], contaminated_ids=[], contaminated_docs=0)
    got = md.exclusion_masks(storage, "masks", m)
    cols = columns(got["composition"])
    assert len(cols) <= MAX_UI_COLUMNS and cols[0] == "source", cols
    assert {"tokens_after", "lost_token_share"} <= set(cols)  # source_budgets_met, source_loss_within_limit
    assert cells(got["composition"], "tokens_after") == ["2,000,000", "2,000,000"]
    assert cells(got["composition"], "lost_token_share") == ["20.0%", "20.0%"]
    assert full_columns(got["composition_md"]) == md.COMPOSITION_COLUMNS


def test_dup_samples_on_exclusion_masks_render_literally(tmp_path):
    import pyarrow.parquet as pq

    from mix_assets.stages.dedup.dedup import EXCLUSION_SCHEMA

    pq.write_table(EXCLUSION_SCHEMA.empty_table(), tmp_path / "masks.parquet")
    storage = SimpleNamespace(uri=lambda k: f"/store/{k}", source=lambda k: str(tmp_path / "masks.parquet"))
    dup = SimpleNamespace(reason="near_dup", excluded="a__b__", kept="c", jaccard=0.91,
                          excluded_text="object.__add__(self, other)", kept_text="def __init__(self):")
    comp = [{c: 1 for c in md.COMPOSITION_COLUMNS} | {"source": "web"}]
    m = SimpleNamespace(documents=2, excluded_docs=1, per_reason={"exact_dup": 0, "near_dup": 1},
                        mask_contaminated=True, composition=comp, samples=[dup], contaminated_ids=["x__y__"],
                        contaminated_docs=1)
    html = MARKDOWN.render(md.exclusion_masks(storage, "masks", m)["rejects"].value)
    assert "<code>object.__add__(self, other)</code>" in html and "<code>def __init__(self):</code>" in html
    assert "<strong>" not in html.replace("<strong>near_dup</strong>", "").replace(
        "<strong>exact_dup</strong>", "").replace("<strong>contaminated</strong>", "")

