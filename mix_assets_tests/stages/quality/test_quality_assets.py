"""The quality stage on the generated demo corpus: a classifier trained in the graph (byte-identical on a
rebuild), its held-out metrics before any drop, rejections `quality:<model>` in the decisions, a mis-set
threshold stopped by `no_domain_vanished`, a brought model refused when its sha256 differs."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml

from mix_assets.config import load_spec
from mix_assets.core import layout
from mix_assets.core.storage import Storage
from mix_assets.resources import MixResource
from mix_assets.stages.lines.assets import build_line_assets
from mix_assets.stages.filters import assets as filter_assets
from mix_assets.stages.filters import decisions
from mix_assets.stages.quality import assets as quality_assets
from mix_assets.stages.quality import classifier
from mix_assets.stages.sources.assets import build_source_assets
from mix_assets_tests.test_audit_published_demo import demo_config

TRAIN = {"positives": ["encyclopedia"], "negatives": ["stories", "math"], "epoch": 5, "dim": 16, "bucket": 20000}


def _spec(tmp_path, quality=None, rule=None, stories_rule=None, line_dedup=None):
    cfg = demo_config(tmp_path)
    data = yaml.safe_load(cfg.read_text())
    if line_dedup is not None:
        data["line_dedup"] = line_dedup
    data["quality"] = quality or {"name": "demo-hq", "train": TRAIN, "min_auc": 0.8}
    data["filters"]["quality"] = rule or {"top_fraction": 0.9}
    py = next(s for s in data["sources"] if s["name"] == "python_reference")
    py["filters"]["quality"] = {"enabled": False}
    if stories_rule:
        next(s for s in data["sources"] if s["name"] == "stories").setdefault("filters", {})["quality"] = stories_rule
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_spec(cfg)


def _run(spec, instance=None):
    assets = [*build_source_assets(spec), *build_line_assets(spec), *quality_assets.build_quality_assets(spec),
              *filter_assets.build_filter_assets(spec)]
    return dg.materialize(assets, resources={"mix": MixResource(config_path=spec.config_path)},
                          instance=instance or dg.DagsterInstance.ephemeral(), raise_on_error=False)


def _checks(res) -> dict:
    return {c.check_name: c for c in res.get_asset_check_evaluations()}


def test_without_quality_there_is_no_quality_asset_and_the_config_bytes_are_unchanged(tmp_path):
    spec = load_spec(demo_config(tmp_path))
    assert quality_assets.build_quality_assets(spec) == [] and quality_assets.quality_deps(spec) == []
    assert '"quality"' not in spec.canonical_json()


def test_classifier_is_trained_checked_and_reproduced_and_its_rejections_are_filter_decisions(tmp_path):
    spec = _spec(tmp_path)
    res = _run(spec)
    assert res.success, [e.message for e in res.all_events if e.is_failure]
    checks = _checks(res)
    assert checks[quality_assets.SEPARATES_HELDOUT].passed
    assert checks[filter_assets.NO_DOMAIN_VANISHED].passed
    md = {m.asset_key.to_user_string(): m.materialization.metadata for m in res.get_asset_materialization_events()}
    metrics = md["quality_classifier"]["heldout_metrics"].value
    assert metrics["roc_auc"] >= 0.8 and metrics["precision"] is not None and metrics["recall"] is not None
    assert "stories" in md["quality_scores"]["score_histogram_per_source"].value
    # rejected beside kept: a quality rejection shows its score beside the source's cutoff
    assert "`quality:demo-hq score 0." in md["document_filters"]["rejects"].value
    storage = Storage(root=str(tmp_path / "storage"))
    model = storage.read_bytes(layout.QUALITY_MODEL)
    dec = decisions.read_decisions(storage, ["stories", "encyclopedia", "python_reference"])
    reasons = {r for t in dec.values() for r in t.column("reason").to_pylist() if r and r.startswith("quality:")}
    assert reasons == {"quality:demo-hq"}
    py = dec["python_reference"].column("reason").to_pylist()
    assert not any(r and r.startswith("quality:") for r in py)  # its override switches the rule off
    import json
    ts = json.loads(storage.read_text(layout.QUALITY_TRAINING_SET))
    assert ts["counts"]["hq_train"] > 0 and ts["counts"]["lq_held_out"] > 0 and ts["hyper_parameters"]["thread"] == 1
    assert set(ts["doc_ids"]["hq_train"]).isdisjoint(ts["doc_ids"]["hq_held_out"])
    # a rebuild from scratch: the same model bytes
    other = tmp_path / "again"
    other.mkdir()
    spec2 = _spec(other)
    assert _run(spec2).success
    assert Storage(root=str(other / "storage")).read_bytes(layout.QUALITY_MODEL) == model


def test_a_mis_set_quality_threshold_that_deletes_a_domain_stops_the_run(tmp_path):
    spec = _spec(tmp_path, stories_rule={"threshold": 0.999999})
    res = _run(spec)
    gate = _checks(res)[filter_assets.NO_DOMAIN_VANISHED]
    assert not res.success and not gate.passed
    assert "source stories" in gate.description


def test_a_classifier_that_does_not_separate_is_stopped_before_any_drop(tmp_path):
    # hq and lq drawn from the same source: nothing to learn, AUC ~0.5 < 0.99
    q = {"name": "coin", "train": {**TRAIN, "positives": ["stories"], "negatives": ["stories"]}, "min_auc": 0.99}
    res = _run(_spec(tmp_path, quality=q))
    assert not res.success and not _checks(res)[quality_assets.SEPARATES_HELDOUT].passed
    mats = {m.asset_key.to_user_string() for m in res.get_asset_materialization_events()}
    assert "document_filters" not in mats


def test_a_brought_model_is_pinned_by_sha256(tmp_path):
    model = tmp_path / "brought.bin"
    spec = _spec(tmp_path)
    assert _run(spec).success
    model.write_bytes(Storage(root=str(tmp_path / "storage")).read_bytes(layout.QUALITY_MODEL))
    bad = _spec(tmp_path, quality={"name": "brought", "file": str(model), "sha256": "0" * 64,
                                   "train": TRAIN, "min_auc": 0.8})
    with pytest.raises(classifier.ModelMismatchError, match="sha256"):
        classifier.brought_model(bad.quality, str(bad.base_dir))
    good = _spec(tmp_path / "good" if (tmp_path / "good").mkdir() is None else None,
                 quality={"name": "brought", "file": str(model), "sha256": classifier.scoring.file_sha256(str(model)),
                          "train": TRAIN, "min_auc": 0.8})
    ok = _run(good)
    assert ok.success
    built = next(m.materialization.metadata for m in ok.get_asset_materialization_events()
                 if m.asset_key.path == ["quality_classifier"])
    assert built["trained_in_graph"].value is False and built["heldout_metrics"].value["roc_auc"] >= 0.8
    res = _run(bad)
    assert not res.success
    errors = [e.event_specific_data.error.to_string() for e in res.get_step_failure_events()]
    assert any("ModelMismatchError" in x and "the config pins" in x for x in errors), errors


def test_roc_auc_counts_ties_as_half():
    import numpy as np

    assert classifier.roc_auc(np.array([0.1, 0.9]), np.array([0, 1])) == 1.0
    assert classifier.roc_auc(np.array([0.5, 0.5]), np.array([0, 1])) == 0.5
    assert classifier.roc_auc(np.array([0.9, 0.1, 0.4]), np.array([0, 1, 1])) == 0.0


@pytest.mark.slow
@pytest.mark.shared_data
def test_shared_sample_classifier_and_url_filter_keep_every_domain(tmp_path):
    """configs/shared-sample.yaml: the classifier trained on the shared prose clears its min_auc, gutenberg's
    lowest 5 % go as `quality:prose-ref`; the URL filter rejects the one blocklisted ebook's documents (their
    URL from the text loader's url_template) as `url:excluded_books`; every gate of these steps green,
    dedup_keys built on the decisions."""
    from mix_assets.stages.dedup.assets import build_dedup_assets
    from mix_assets_tests.support.shared_data import real_mix_config, shared_data_dir

    spec = load_spec(real_mix_config(tmp_path, shared_data_dir()))
    assets = [*build_source_assets(spec), *build_line_assets(spec), *quality_assets.build_quality_assets(spec),
              *filter_assets.build_filter_assets(spec), build_dedup_assets(spec)[0]]
    res = dg.materialize(assets, resources={"mix": MixResource(config_path=spec.config_path)},
                         instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert res.success
    checks = _checks(res)
    assert checks[quality_assets.SEPARATES_HELDOUT].passed and checks[filter_assets.NO_DOMAIN_VANISHED].passed
    assert [name for name, c in checks.items() if not c.passed] == []
    storage = Storage(root=str(tmp_path / "storage"))
    g = decisions.read_decisions(storage, ["gutenberg"])["gutenberg"]
    dropped = sum(r == "quality:prose-ref" for r in g.column("rules").to_pylist() for r in r)
    assert 0 < dropped <= 0.05 * g.num_rows + 1
    # the URL filter: exactly the blocklisted ebook's documents, counted per source and list
    import pyarrow.parquet as pq
    raw = pq.read_table(storage.source(layout.RAW_DOCS.format(source="gutenberg")), columns=["doc_id", "url"])
    angler = {d for d, u in zip(*raw.to_pydict().values()) if u == "https://www.gutenberg.org/ebooks/9198"}
    by_url = {d for d, rs in zip(g.column("doc_id").to_pylist(), g.column("rules").to_pylist())
              if "url:excluded_books" in rs}
    assert angler and by_url == angler and len(angler) < 0.2 * raw.num_rows
    md = {m.asset_key.to_user_string(): m for m in res.get_asset_materialization_events()}["document_filters"]
    md = md.materialization.metadata
    assert md["url_rejected/gutenberg/excluded_books"].value == len(angler)
    assert md["url_rejected/classic_novels/excluded_books"].value == 0
    assert md["url_missing/classic_novels"].value == 0 and md["url_missing/shakespeare"].value == 0
    assert not any(k.startswith("url_") and k.endswith(("/state_union", "/gsm8k_train")) for k in md)
    # its quality tiers (test_tiers.py): the best-scored fifth repeated twice, each tier holding documents
    import json
    tiers = json.loads(storage.read_text(layout.QUALITY_CUTOFFS))["gutenberg"]["tiers"]
    assert [(t["name"], t["epochs"]) for t in tiers] == [("top", 2.0), ("rest", 1.0)]
    assert all(t["documents"] > 0 for t in tiers) and tiers[0]["cutoff"] > tiers[1]["cutoff"]


def _whole_demo(tmp_path):
    from mix_assets.definitions import build_definitions

    spec = _spec(tmp_path, rule={"top_fraction": 0.97})
    defs = build_definitions(spec)
    sel = dg.AssetSelection.all() - dg.AssetSelection.assets("published_revision")
    res = dg.materialize(list(defs.assets), resources=defs.resources, instance=dg.DagsterInstance.ephemeral(),
                         selection=sel, raise_on_error=False)
    return spec, res


@pytest.mark.slow
def test_demo_with_quality_masks_its_rejections_and_a_rebuild_reproduces_model_and_shards(tmp_path):
    import json

    import pyarrow.parquet as pq

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    spec, res = _whole_demo(tmp_path / "a")
    assert res.success and [c.check_name for c in res.get_asset_check_evaluations() if not c.passed] == []
    storage = Storage(root=str(tmp_path / "a" / "storage"))
    rejected = decisions.rejected_ids(storage, [s.name for s in spec.sources])
    by_quality = {d for d, r in rejected.items() if r == "quality:demo-hq"}
    assert by_quality
    masks = {r["doc_id"]: r["reasons"] for r in pq.read_table(storage.source(layout.EXCLUSION_MASKS)).to_pylist()}
    assert all("quality:demo-hq" in masks[d] for d in by_quality)
    _, again = _whole_demo(tmp_path / "b")
    assert again.success
    other = Storage(root=str(tmp_path / "b" / "storage"))
    assert other.read_bytes(layout.QUALITY_MODEL) == storage.read_bytes(layout.QUALITY_MODEL)

    def shards(s):  # review/mix_config.json holds the run's absolute paths: compare every other file
        return [f for f in json.loads(s.read_text(layout.MANIFEST))["files"] if "mix_config" not in f["path"]]

    assert shards(other) == shards(storage)
    # the model and its training set are published with the mix they filtered
    review = json.loads(storage.read_text(layout.MANIFEST))["review"]
    assert review["quality_model"] == "review/quality_model.bin"
    assert storage.read_bytes(layout.MIX_QUALITY_MODEL) == storage.read_bytes(layout.QUALITY_MODEL)
    assert json.loads(storage.read_text(layout.MIX_QUALITY_TRAINING_SET))["model"] == "demo-hq"


def test_config_errors_name_the_field(tmp_path):
    from mix_assets.config import MixConfigError

    cfg = demo_config(tmp_path)
    data = yaml.safe_load(cfg.read_text())
    data["filters"]["quality"] = {"top_fraction": 0.9}
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(MixConfigError, match="no `quality:` section"):
        load_spec(cfg)
    data["quality"] = {"name": "m", "file": "x.bin"}
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(MixConfigError, match="needs `sha256`"):
        load_spec(cfg)
    data["quality"] = {"name": "m", "train": TRAIN}
    data["filters"]["quality"] = {"top_fraction": 0.9, "threshold": 0.5}
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(MixConfigError, match="exactly one of `threshold` or `top_fraction`"):
        load_spec(cfg)


def test_a_top_fraction_is_the_score_of_its_last_kept_document_and_ties_stay():
    import numpy as np

    from mix_assets.stages.quality.config import QualityKeep
    from mix_assets.stages.quality.scores import cutoff

    s = np.array([0.9, 0.1, 0.5, 0.7, 0.5, 0.3])
    assert cutoff(s, QualityKeep(top_fraction=0.5)) == 0.5  # ceil(3) -> 0.9, 0.7, 0.5 ... and the tied 0.5
    assert int((s >= cutoff(s, QualityKeep(top_fraction=0.5))).sum()) == 4
    assert cutoff(s, QualityKeep(top_fraction=0.01)) == 0.9
    assert cutoff(s, QualityKeep(threshold=0.42)) == 0.42


def test_with_line_dedup_the_scores_are_of_the_line_deduped_text(tmp_path):
    """document_filters judges line_dedup's text: the score it compares to the cutoff is of that text, not raw's."""
    import numpy as np
    import pyarrow.parquet as pq

    from mix_assets.stages.quality import scoring

    spec = _spec(tmp_path, line_dedup={"min_docs": 2, "min_line_chars": 10, "min_kept_share": 0.0,
                                       "min_kept_chars": 0, "max_lost_share": 1.0})
    assets = [*build_source_assets(spec), *build_line_assets(spec), *quality_assets.build_quality_assets(spec)]
    res = dg.materialize(assets, resources={"mix": MixResource(config_path=spec.config_path)},
                         instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert res.success, [e.event_specific_data.error.to_string() for e in res.get_step_failure_events()]
    storage = Storage(root=str(tmp_path / "storage"))
    model, sha = storage.local_path(layout.QUALITY_MODEL), storage.sha256(layout.QUALITY_MODEL)
    changed = 0
    for s in ("stories", "encyclopedia"):
        docs = pq.read_table(storage.source(layout.LINE_DOCS.format(source=s)))
        raw = pq.read_table(storage.source(layout.RAW_DOCS.format(source=s)), columns=["doc_id", "text"])
        stored = pq.read_table(storage.source(layout.QUALITY_SCORES.format(source=s)))
        assert stored.column("doc_id").to_pylist() == docs.column("doc_id").to_pylist()
        kept = scoring.score(docs.column("text"), model, sha, spec.quality.label, spec.quality.newline_replacement,
                             spec.quality.train.max_chars)
        before = scoring.score(raw.column("text"), model, sha, spec.quality.label, spec.quality.newline_replacement,
                               spec.quality.train.max_chars)
        assert np.array_equal(stored.column("score").to_numpy(), kept)
        modified = docs.column("removed_lines").to_numpy() > 0
        changed += int((kept[modified] != before[modified]).sum())
    assert changed > 0  # the line-deduped text scores differently from raw's: the test can tell them apart
