"""Quality tiers (`filters.quality.tiers`, stages/quality/tiers.py, stages/tokens/packing.fill_tiered): tier
assignment (boundaries, top fraction, ties), the budget fill per source x tier (tokens = unique tokens x epochs,
the stream still exactly its budget), config errors, and the demo with tiers: shards, manifest fields, UI
metadata, no validation or excluded document repeated, a rebuild reproduces the fingerprint."""

from __future__ import annotations

import json
from collections import Counter

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from mix_assets.config import MixConfigError, load_spec
from mix_assets.core import layout
from mix_assets.core.storage import Storage
from mix_assets.format.checker import check_manifest
from mix_assets.stages.quality import tiers
from mix_assets.stages.quality.config import QualityKeep, QualityTier
from mix_assets.stages.quality.scores import cutoff
from mix_assets.stages.tokens.packing import ShortfallError, fill_budget, fill_tiered
from mix_assets_tests.stages.quality.test_quality_assets import TRAIN
from mix_assets_tests.test_audit_published_demo import demo_config

TOP3 = [{"name": "top", "top_fraction": 0.3, "epochs": 3}, {"name": "rest"}]


# -- tier assignment -------------------------------------------------------------------------------------------
def test_a_score_on_a_boundary_is_in_the_tier_it_starts_and_the_rest_takes_the_remainder():
    cut = [0.8, 0.5]
    s = np.array([0.95, 0.8, 0.79, 0.5, 0.49, 0.0])
    assert tiers.assign(s, cut).tolist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="must not rise"):
        tiers.assign(s, [0.5, 0.8])


def test_a_top_fraction_tier_is_cut_like_the_keep_rule_and_keeps_every_tie():
    s = np.array([0.9, 0.1, 0.5, 0.7, 0.5, 0.3, 0.5, 0.2])
    t = QualityTier(name="top", top_fraction=0.25)  # ceil(0.25 x 8) = 2nd best: 0.7
    assert tiers.tier_cutoff(s, t) == 0.7 == cutoff(s, QualityKeep(top_fraction=0.25))
    t = QualityTier(name="top", top_fraction=0.3)  # ceil(2.4) = 3rd best: 0.5, tied three times -> 5 documents in
    assert tiers.tier_cutoff(s, t) == 0.5
    assert int((tiers.assign(s, [tiers.tier_cutoff(s, t)]) == 0).sum()) == 5
    keep = QualityKeep(top_fraction=0.8, tiers=[{"name": "a", "top_fraction": 0.25, "epochs": 2},
                                                {"name": "b", "top_fraction": 0.5}, {"name": "rest"}])
    rows = tiers.tier_rows(s, keep.tiers, cutoff(s, keep))  # keep: ceil(6.4) = 7th best, 0.2: 7 kept
    assert [(r["name"], r["cutoff"], r["documents"], r["epochs"]) for r in rows] == [
        ("a", 0.7, 2, 2.0), ("b", 0.5, 3, 1.0), ("rest", 0.2, 2, 1.0)]


def test_tier_config_errors_name_what_is_wrong(tmp_path):
    def keep(**kw):
        return QualityKeep(**{"top_fraction": 0.9, **kw})

    assert "tiers" not in keep().model_dump()  # configs without tiers keep their bytes
    for bad, msg in [
        ([{"name": "top", "top_fraction": 0.2}], "at least 2"),
        ([{"name": "top", "top_fraction": 0.2}, {"name": "rest", "top_fraction": 0.5}], "takes the rest"),
        ([{"name": "a", "top_fraction": 0.2}, {"name": "b", "min_score": 0.5}, {"name": "rest"}], "every tier by"),
        ([{"name": "a", "top_fraction": 0.5}, {"name": "b", "top_fraction": 0.2}, {"name": "rest"}], "must grow"),
        ([{"name": "a", "top_fraction": 0.95}, {"name": "rest"}], "not below the kept top_fraction"),
        ([{"name": "a", "top_fraction": 0.2, "epochs": 5}, {"name": "rest"}], "less than or equal to 4"),
        ([{"name": "a", "top_fraction": 0.2, "epochs": 0.5}, {"name": "rest"}], "greater than or equal to 1"),
        ([{"name": "a", "top_fraction": 0.2}, {"name": "a"}], "unique"),
    ]:
        with pytest.raises(ValueError, match=msg):
            keep(tiers=bad)
    with pytest.raises(ValueError, match="does not exceed the keep threshold"):
        QualityKeep(threshold=0.5, tiers=[{"name": "a", "min_score": 0.4}, {"name": "rest"}])
    # the cap is on what a document gets: source epochs x tier epochs
    cfg = demo_config(tmp_path)
    data = yaml.safe_load(cfg.read_text())
    data["quality"] = {"name": "demo-hq", "train": TRAIN}
    data["filters"]["quality"] = {"top_fraction": 0.9, "tiers": TOP3}
    next(s for s in data["sources"] if s["name"] == "stories")["epochs"] = 2
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(MixConfigError, match=r"sources\[stories\]: tier 'top' repeats a document 2 x 3 = 6 times"):
        load_spec(cfg)


# -- the budget fill per source x tier -------------------------------------------------------------------------
def _docs(n=400, seed=1):
    r = np.random.default_rng(seed)
    return r.integers(1, 200, n), r.integers(0, 3, n)


def test_each_tier_is_its_unique_tokens_times_its_epochs_and_the_stream_is_the_budget():
    lengths, tier = _docs()
    epochs, budget = [3.0, 2.0, 1.0], 20_000
    n_unique, apps, fill = fill_tiered("s", lengths, tier, epochs, budget)
    assert int(apps.take.sum()) == budget == sum(fill.train_tokens)
    assert sum(fill.documents) == n_unique and fill.epochs == epochs
    # the tier of the document that reached the budget takes what the others leave (less than one document's
    # tokens x its epochs short of unique x epochs); every other tier is exactly unique x epochs, whole passes
    last = int(tier[n_unique - 1])
    for t in range(3):
        want = fill.unique_tokens[t] * epochs[t]
        if t == last:
            assert want - lengths[n_unique - 1] * epochs[t] < fill.train_tokens[t] <= want
        else:
            assert fill.train_tokens[t] == want
    # each unique document of an integer-epoch tier appears that many times, each (document, epoch) once
    seen = Counter(apps.index.tolist())
    for i in range(n_unique):
        if int(tier[i]) != last:
            assert seen[i] == epochs[int(tier[i])]
    assert len(set(zip(apps.index.tolist(), apps.epoch.tolist()))) == len(apps)
    assert apps.index.max() < n_unique
    # the unique set is the shortest selection-order prefix whose tokens x epochs reach the budget
    w = np.cumsum(lengths * np.asarray(epochs)[tier])
    assert w[n_unique - 1] >= budget > w[n_unique - 2]


def test_tiers_repeat_the_best_documents_instead_of_reading_more_unique_ones():
    lengths, tier = _docs()
    n1, _, f1 = fill_tiered("s", lengths, tier, [1.0, 1.0, 1.0], 20_000)
    n3, _, f3 = fill_tiered("s", lengths, tier, [3.0, 1.0, 1.0], 20_000)
    assert n3 < n1 and f3.train_tokens[0] / 20_000 > f1.train_tokens[0] / 20_000


def test_with_every_tier_at_one_epoch_the_stream_is_the_untiered_one():
    lengths, tier = _docs()
    lengths[5] = 0  # an empty document is skipped either way
    n_a, a, _ = fill_tiered("s", lengths, tier, [1.0, 1.0, 1.0], 12_345)
    n_b, b = fill_budget("s", lengths, 12_345, 12_345)
    assert n_a == n_b
    key = lambda x: sorted(zip(x.index.tolist(), x.epoch.tolist(), x.take.tolist()))  # noqa: E731
    assert key(a) == key(b)


def test_fractional_tier_epochs_take_a_prefix_of_the_last_pass_and_a_short_source_fails():
    lengths, tier = _docs()
    n, apps, fill = fill_tiered("s", lengths, tier, [1.5, 1.0, 1.0], 15_000)
    assert int(apps.take.sum()) == 15_000
    assert Counter(apps.epoch[apps.index < n].tolist())[1] > 0  # the top tier's second, partial pass
    with pytest.raises(ShortfallError, match="each quality tier repeated its epochs"):
        fill_tiered("s", lengths, tier, [2.0, 1.0, 1.0], int((lengths * np.array([2, 1, 1])[tier]).sum()) + 1)


# -- the demo with tiers ---------------------------------------------------------------------------------------
def _tiered_spec(tmp_path, tiers_cfg=None):
    cfg = demo_config(tmp_path)
    data = yaml.safe_load(cfg.read_text())
    data["quality"] = {"name": "demo-hq", "train": TRAIN, "min_auc": 0.8}
    data["filters"]["quality"] = {"top_fraction": 0.97, "tiers": tiers_cfg or TOP3}
    next(s for s in data["sources"] if s["name"] == "python_reference")["filters"]["quality"] = {"enabled": False}
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_spec(cfg)


def _build(tmp_path):
    from mix_assets.definitions import build_definitions

    spec = _tiered_spec(tmp_path)
    defs = build_definitions(spec)
    sel = dg.AssetSelection.all() - dg.AssetSelection.assets("published_revision")
    res = dg.materialize(list(defs.assets), resources=defs.resources, instance=dg.DagsterInstance.ephemeral(),
                         selection=sel, raise_on_error=False)
    return spec, res


def _files(storage):  # review/mix_config.json holds the run's absolute paths: every other file
    return [f for f in json.loads(storage.read_text(layout.MANIFEST))["files"] if "mix_config" not in f["path"]]


@pytest.mark.slow
def test_the_demo_with_tiers_repeats_its_top_tier_records_it_and_rebuilds_the_same_bytes(tmp_path):
    spec, res = _build(tmp_path / "a")
    assert res.success, [e.message for e in res.all_events if e.is_failure]
    assert [c.check_name for c in res.get_asset_check_evaluations() if not c.passed] == []
    storage = Storage(root=str(tmp_path / "a" / "storage"))
    m = json.loads(storage.read_text(layout.MANIFEST))
    assert check_manifest(m, storage.local_path(layout.MIX_DIR), strict=False) == []
    # the checker proves the tiers: their sums, and each tier's epochs against the published config
    for edit, problem in [(("top", "train_tokens", 1), "the sum of sources.stories.tiers.*.train_tokens"),
                          (("rest", "documents", 1), "the sum of sources.stories.tiers.*.documents"),
                          (("top", "epochs", 1.0), "source epochs x tier epochs = 1.0 x 3.0 = 3.0")]:
        bad = json.loads(json.dumps(m))
        bad["sources"]["stories"]["tiers"][edit[0]][edit[1]] += edit[2]
        assert any(problem in p for p in check_manifest(bad, storage.local_path(layout.MIX_DIR), strict=False)), edit
    bad = json.loads(json.dumps(m))
    del bad["sources"]["stories"]["tiers"]
    assert any("sources.stories.tiers: missing" in p
               for p in check_manifest(bad, storage.local_path(layout.MIX_DIR), strict=False))
    tiered = ["encyclopedia", "math", "stories"]
    assert sorted(s for s, r in m["sources"].items() if "tiers" in r) == tiered
    assert "tiers" not in m["sources"]["python_reference"]

    # every train appearance, mapped to its document's tier by the scores and cutoffs quality_scores wrote
    cuts = json.loads(storage.read_text(layout.QUALITY_CUTOFFS))
    train = pq.read_table(storage.local_path(layout.STREAM_DOCS.format(split="train"))).to_pylist()
    val = pq.read_table(storage.local_path(layout.STREAM_DOCS.format(split="val"))).to_pylist()
    split = {r["doc_id"]: r["split"] for r in pq.read_table(storage.local_path(layout.VALIDATION_SPLIT),
                                                             columns=["doc_id", "split"]).to_pylist()}
    masked = set(pq.read_table(storage.local_path(layout.EXCLUSION_MASKS), columns=["doc_id"]).column(0).to_pylist())
    for s in tiered:
        rec = m["sources"][s]
        scores = {r["doc_id"]: r["score"] for r in
                  pq.read_table(storage.local_path(layout.QUALITY_SCORES.format(source=s))).to_pylist()}
        top_cut = cuts[s]["tiers"][0]["cutoff"]
        apps = [r for r in train if r["source"] == s]
        per_doc = Counter(r["doc_id"] for r in apps)
        tokens = Counter()
        for r in apps:
            tokens["top" if scores[r["doc_id"]] >= top_cut else "rest"] += r["tokens"]
        t = rec["tiers"]
        assert list(t) == ["top", "rest"] and t["top"]["epochs"] == 3.0 and t["rest"]["epochs"] == 1.0
        assert dict(tokens) == {k: t[k]["train_tokens"] for k in t}  # the shards hold what the manifest says
        assert sum(r["train_tokens"] for r in t.values()) == rec["train_tokens"] == rec["budget_tokens"]
        assert sum(r["documents"] for r in t.values()) == rec["unique_documents"] == len(per_doc)
        assert {per_doc[d] for d in per_doc if scores[d] >= top_cut} <= {3}  # top-tier documents thrice ...
        assert {per_doc[d] for d in per_doc if scores[d] < top_cut} == {1}  # ... the rest once
        # tokens per tier = unique tokens x epochs, the tier holding the budget's cut short of it by < 1 document
        for name, r in t.items():
            assert r["train_tokens"] <= r["unique_tokens"] * r["epochs"]
        assert sum(r["unique_tokens"] * r["epochs"] - r["train_tokens"] for r in t.values()) < 3 * max(
            x["tokens"] for x in apps)
        # only kept train documents are repeated: never a validation or an excluded one
        assert {split[d] for d in per_doc} == {"train"} and not set(per_doc) & masked
    assert max(Counter(r["doc_id"] for r in val).values()) == 1
    # in the shard bytes: each appearance of a thrice-seen document holds the same token ids
    from mix_assets.format import shards as shard_format

    stream = np.concatenate([shard_format.rows(storage.read_bytes(f"{layout.MIX_DIR}/{sh['path']}"), m["dtype"],
                                               m["packing"]["sample_len"]).ravel()
                             for sh in m["splits"]["train"]["shards"]])
    by_doc: dict[str, list] = {}
    for r in train:
        by_doc.setdefault(r["doc_id"], []).append(r)
    thrice = [a for a in by_doc.values() if len(a) == 3 and len({r["tokens"] for r in a}) == 1
              and max(r["start"] + r["tokens"] for r in a) <= len(stream)]
    assert len(thrice) > 100
    for apps in thrice:
        ids = [stream[r["start"]: r["start"] + r["tokens"]].tolist() for r in apps]
        assert ids[0] == ids[1] == ids[2] and len(ids[0]) == apps[0]["tokens"]

    # the UI: quality_scores' tier table, token_shards' and manifest's per source x tier
    md = {e.asset_key.to_user_string(): e.materialization.metadata for e in res.get_asset_materialization_events()}
    assert "| stories | top |" in md["quality_scores"]["quality_tiers"].value
    for asset in ("token_shards", "manifest"):
        rows = md[asset]["per_source_tier"].value.records
        assert {(r.data["source"], r.data["tier"]) for r in rows} == {(s, t) for s in tiered for t in ("top", "rest")}

    from mix_assets.format.card import dataset_card

    assert "| stories | top | 3.0 |" in dataset_card(m)  # the published card lists them too

    # a rebuild from scratch: the same files, so the same fingerprint
    _, again = _build(tmp_path / "b")
    assert again.success
    assert _files(Storage(root=str(tmp_path / "b" / "storage"))) == _files(storage)
