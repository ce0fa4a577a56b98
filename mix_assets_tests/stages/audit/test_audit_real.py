"""The audit on the embedded demo corpus (ground truth from its generator) and on real text (fixture, shared data)."""

import json
import re
import shutil
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
import yaml

from mix_assets.stages.audit import assets as A
from mix_assets.config import REPO_ROOT, load_spec
from mix_assets.definitions import build_assets
from mix_assets.core import layout
from mix_assets.core import textkeys as tk
from mix_assets.resources import MixResource
from mix_assets_tests.support.shared_data import FIXTURE, real_mix_config

from mix_assets_tests.support.audit_fixtures import standin_masks


def _run(spec, storage_root):
    """Materialise the real graph up to exclusion_masks (the stand-in masks until dedup is merged)."""
    res = MixResource(config_path=spec.config_path, storage_root=str(storage_root))
    assets = build_assets(spec)
    if not any(A.EXCLUSION_MASKS_KEY in getattr(a, "keys", ()) for a in assets):
        assets = [*assets, *standin_masks(spec)]
    result = dg.materialize(assets, resources={"mix": res}, instance=dg.DagsterInstance.ephemeral(),
                            raise_on_error=False, selection=dg.AssetSelection.keys(A.EXCLUSION_MASKS_KEY).upstream())
    return result, res.storage


def _checks(result):
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def _docs(storage, source, columns=("doc_id", "origin", "text")):
    return pq.read_table(storage.local_path(layout.RAW_DOCS.format(source=source)), columns=list(columns))


def test_demo_every_planted_eval_copy_found_and_masked(tmp_path):
    spec = load_spec(REPO_ROOT / "configs" / "demo.yaml")
    result, storage = _run(spec, tmp_path / "storage")
    assert result.success
    truth = json.loads((REPO_ROOT / "build" / "demo_corpus" / "ground_truth.json").read_text())
    copies = truth["eval_copies"]
    assert {c["kind"] for c in copies} == {"verbatim", "recased_repunctuated"}
    by_origin = {}
    for s in spec.sources:
        t = _docs(storage, s.name, ("doc_id", "origin"))
        by_origin.update({(s.name, o): d for d, o in zip(t.column("doc_id").to_pylist(), t.column("origin").to_pylist())})
    expected = {by_origin[(c["source"], c["origin"])] for c in copies}
    found = pq.read_table(storage.local_path(layout.CONTAMINATED_DOCS)).to_pylist()
    assert {r["doc_id"] for r in found} == expected
    assert all(r["tasks"] == ["demo_qa"] for r in found)
    masked = set(pq.read_table(storage.local_path(layout.EXCLUSION_MASKS)).column("doc_id").to_pylist())
    assert expected <= masked
    ev = _checks(result)
    assert ev[A.DENOMINATORS_NONEMPTY].passed and ev[A.AUDIT_ARTIFACT_SCRUBBED].passed
    assert ev[A.ZERO_EVAL_OVERLAP].passed
    assert ev[A.ZERO_EVAL_OVERLAP].metadata["kept_overlap_ngrams"].value == 0
    report = json.loads(storage.read_text(layout.CONTAMINATION_REPORT))
    assert report["contaminated_docs"] == len(copies) and report["overlap_total"] > 0
    assert report["denominators"]["demo_qa"]["rows"] == 60


# Eval items planted into a copy of the Sherlock Holmes text (task, row, how), and the eval rows read,
# for the fixture's one task and the shared data's five (the row counts of its README).
_PLANTS = {
    # rows of 25+ words: a shorter item has no 13-gram to find
    "fixture": [("piqa", 6, "verbatim"), ("piqa", 17, "recased"), ("piqa", 22, "verbatim"), ("piqa", 40, "recased")],
    "shared": [("hellaswag", 17, "verbatim"), ("boolq", 5, "recased"), ("piqa", 40, "verbatim"),
               ("arc_challenge", 3, "recased"), ("commonsenseqa", 9, "verbatim")],
}
_ROWS = {
    "fixture": {"piqa": 60},
    "shared": {"hellaswag": 10042, "arc_challenge": 299, "piqa": 1838, "boolq": 3270, "commonsense_qa": 1221},
}


def _plant_text(data, task, row, how):
    r = json.loads((data / "evals" / task / "validation.jsonl").read_text().splitlines()[row])
    text = {
        "hellaswag": lambda: f"{r['ctx']} {r['endings'][r['label']]}",
        "boolq": lambda: r["passage"],
        "piqa": lambda: f"{r['goal']} {r['sol1']}",
        "arc_challenge": lambda: f"{r['question']['stem']} {r['question']['choices'][0]['text']}",
        "commonsenseqa": lambda: f"{r['question']['stem']} {r['question']['choices'][1]['text']}",
    }[task]()
    if how == "recased":
        text = re.sub(r"[,.;:]", " ;", text).upper()
    return text


@pytest.mark.slow
def test_real_data_audit_counts_and_planted_items(tmp_path, real_data):
    which = "fixture" if real_data == FIXTURE else "shared"
    cfg = yaml.safe_load(real_mix_config(tmp_path, real_data).read_text())
    # A copy of one source with eval items pasted in as their own paragraphs.
    src = real_data / "sources" / "sherlock_holmes" / "sherlock.txt"
    paras = src.read_text(encoding="utf-8-sig").split("\n\n")
    plants = [_plant_text(real_data, *p) for p in _PLANTS[which]]
    for k, text in enumerate(plants):
        paras.insert(200 + 150 * k, text)
    (tmp_path / "novels").mkdir()
    (tmp_path / "novels" / "sherlock.txt").write_text("\n\n".join(paras), encoding="utf-8")
    novels = next(s for s in cfg["sources"] if s["name"] == "classic_novels")
    # every novel in one folder: origins (and so doc ids and the budget sampling) are relative to it, not
    # to tmp_path, so which plants survive the sampling is the same on every run
    for p in novels["loader"]["paths"]:
        if p != str(src):
            shutil.copy(p, tmp_path / "novels" / Path(p).name)
    novels["loader"]["paths"] = [str(tmp_path / "novels" / Path(p).name) for p in novels["loader"]["paths"]]
    (tmp_path / "mix.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    spec = load_spec(tmp_path / "mix.yaml")

    result, storage = _run(spec, tmp_path / "storage")
    assert result.success
    report = json.loads(storage.read_text(layout.CONTAMINATION_REPORT))
    den = report["denominators"]
    # Denominators equal the rows in the files; every task yields n-grams.
    assert {t: d["rows"] for t, d in den.items()} == _ROWS[which]
    assert all(d["ngrams"] > d["rows"] for d in den.values())
    if "hellaswag" in den:
        assert den["hellaswag"]["items"] == 4 * 10042  # ctx + each of the 4 endings

    # Expected: the docs of the copied source that contain a planted item (normalised containment).
    novels = _docs(storage, "classic_novels", ("doc_id", "text"))
    norm_docs = tk.normalise(novels.column("text")).to_pylist()
    norm_plants = tk.normalise(plants).to_pylist()
    # The source is sampled to its budget, so a plant may be sampled out: expect those that are in.
    expected = {d for d, t in zip(novels.column("doc_id").to_pylist(), norm_docs) if any(p in t for p in norm_plants)}
    kept = [task for (task, _, _), p in zip(_PLANTS[which], norm_plants) if any(p in t for t in norm_docs)]
    assert len(expected) == len(kept) >= 3
    found = pq.read_table(storage.local_path(layout.CONTAMINATED_DOCS)).to_pylist()
    assert {r["doc_id"] for r in found} == expected  # exactly those, and nothing in the real sources
    task_name = {"commonsenseqa": "commonsense_qa"}
    assert {t for r in found for t in r["tasks"]} == {task_name.get(t, t) for t in kept}
    for s in spec.sources:
        assert report["sources"][s.name]["docs_scanned"] == _docs(storage, s.name, ("doc_id",)).num_rows
    ev = _checks(result)
    assert ev[A.ZERO_EVAL_OVERLAP].passed and ev[A.AUDIT_ARTIFACT_SCRUBBED].passed
    masked = set(pq.read_table(storage.local_path(layout.EXCLUSION_MASKS)).column("doc_id").to_pylist())
    assert expected <= masked
    shutil.rmtree(tmp_path / "novels")


def test_demo_masking_off_fails_gate_and_skips_downstream(tmp_path):
    cfg = yaml.safe_load((REPO_ROOT / "configs" / "demo.yaml").read_text())
    here = REPO_ROOT / "configs"
    for s in cfg["sources"]:
        s["loader"]["paths"] = [str((here / p).resolve()) for p in s["loader"]["paths"]]
    cfg["demo_corpus"]["path"] = str((here / cfg["demo_corpus"]["path"]).resolve())
    for t in cfg["audit"]["tasks"]:
        t["dataset"]["path"] = str((here / t["dataset"]["path"]).resolve())
    cfg["audit"]["mask_contaminated"] = False
    (tmp_path / "mix.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    spec = load_spec(tmp_path / "mix.yaml")

    @dg.asset(deps=[A.EXCLUSION_MASKS_KEY])
    def after_masks_probe():
        """Stands for every asset downstream of the masks (validation_split, ...)."""

    res = MixResource(config_path=spec.config_path, storage_root=str(tmp_path / "storage"))
    assets = build_assets(spec)
    if not any(A.EXCLUSION_MASKS_KEY in getattr(a, "keys", ()) for a in assets):
        assets = [*assets, *standin_masks(spec)]
    result = dg.materialize(
        [*assets, after_masks_probe], resources={"mix": res}, instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
        selection=dg.AssetSelection.keys(A.EXCLUSION_MASKS_KEY).upstream() | dg.AssetSelection.keys("after_masks_probe"),
    )
    assert not result.success
    gate = _checks(result)[A.ZERO_EVAL_OVERLAP]
    assert not gate.passed and gate.metadata["kept_overlap_ngrams"].value > 0
    done = {e.asset_key for e in result.get_asset_materialization_events()}
    assert A.EXCLUSION_MASKS_KEY in done and dg.AssetKey("after_masks_probe") not in done
    assert result.is_node_untouched("after_masks_probe")
