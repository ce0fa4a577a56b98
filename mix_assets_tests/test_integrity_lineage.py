"""Issue 11 §1: no sequence of materialisations publishes bytes that did not pass the audit.

The attack: build the demo mix, edit one source line in place so that a document now holds an eval
item, refresh that source, then materialise only `validation_split` and everything downstream (a
selection the UI allows). Before content-hash lineage the revision was published with every gate
green. Now `validation_split` refuses inputs computed from the old source bytes and names what to
re-materialise. (The decoded-shards audit that holds publish back whatever ran before it is tested
in test_audit_published_demo.py, with the masks off.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml

from mix_assets.stages.manifest.assets import SHARDS_AUDIT_CLEAN
from mix_assets.config import REPO_ROOT, load_spec
from mix_assets.definitions import build_definitions
from mix_assets.stages.sources import demo_corpus

pytestmark = pytest.mark.slow


def private_demo(tmp: Path, **audit) -> Path:
    """configs/demo.yaml over a private copy of the demo corpus (so a test may edit its sources)."""
    d = yaml.safe_load((REPO_ROOT / "configs" / "demo.yaml").read_text())
    shared = (REPO_ROOT / "configs" / d["demo_corpus"]["path"]).resolve()
    demo_corpus.ensure(str(shared), d["demo_corpus"]["seed"], d["demo_corpus"]["docs_per_source"])
    corpus = tmp / "demo_corpus"
    shutil.copytree(shared, corpus)
    d.pop("demo_corpus")
    for s in d["sources"]:
        s["loader"]["paths"] = [str(corpus / Path(p).relative_to("../build/demo_corpus")) for p in s["loader"]["paths"]]
    for t in d["audit"]["tasks"]:
        t["dataset"]["path"] = str(corpus / "evals" / "demo_qa")
    d["audit"].update(audit)
    d["storage"] = {"root": str(tmp / "storage"), "cache_dir": str(tmp / "cache")}
    d["publish"] = {"url": str(tmp / "published")}
    (tmp / "demo.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    return tmp / "demo.yaml"


def materialize(cfg: Path, instance: dg.DagsterInstance, selection=None) -> dg.ExecuteInJobResult:
    defs = build_definitions(load_spec(cfg))
    return dg.materialize(list(defs.assets), resources=defs.resources, instance=instance, selection=selection,
                          raise_on_error=False)


def failures(result) -> str:
    """Every step failure's message, with the errors it was caused by."""
    out = []
    for e in result.all_events:
        err = e.event_specific_data.error if e.is_step_failure and e.event_specific_data else None
        while err is not None:
            out.append(err.message)
            err = err.cause
    return "\n".join(out)


def plant_eval_item(corpus: Path) -> None:
    """Append one validation item's question to the first stories document, in place."""
    item = json.loads((corpus / "evals" / "demo_qa" / "validation.jsonl").read_text().splitlines()[3])
    path = corpus / "sources" / "stories.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[0])
    row["text"] += "\n\n" + item["question"]
    lines[0] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")


def published(tmp: Path) -> list[str]:
    return sorted(p.name for p in (tmp / "published").glob("rev-*"))


# Each test starts from the demo built whole (private_demo, then every asset materialised): the session fixture
# `built_demo` (support/built_demo.py) builds it once and restores it at the same paths, as each test's own first
# build left it; the runs below use an instance of their own, as they did after that build.
def test_edited_source_then_partial_selection_is_refused(built_demo):
    cfg = built_demo.restore()
    tmp_path = cfg.parent
    instance = dg.DagsterInstance.ephemeral()
    before = published(tmp_path)
    assert len(before) == 1

    plant_eval_item(tmp_path / "demo_corpus")
    refresh = materialize(cfg, instance, dg.AssetSelection.assets(dg.AssetKey(["raw", "stories"])))
    assert refresh.success, failures(refresh)

    partial = materialize(cfg, instance, dg.AssetSelection.assets("validation_split").downstream())
    assert not partial.success
    msg = failures(partial)
    assert "validation_split refuses inputs" in msg and "raw/stories" in msg
    # what to redo, upstream first, before validation_split itself
    redo = msg.split("Re-materialise, in this order: ")[1].split(" (then validation_split)")[0].split(", ")
    # (the demo runs the filter cascade: document_filters reads raw/stories and feeds dedup_keys)
    assert sorted(redo[:3]) == ["contamination_report", "dedup_keys", "document_filters"]
    assert redo.index("document_filters") < redo.index("dedup_keys") and redo[3:] == ["exclusion_masks"]
    assert published(tmp_path) == before
    assert not partial.get_asset_materialization_events()

    # Doing what the message says (the whole chain from the sources) masks the planted item and publishes.
    full = materialize(cfg, instance, dg.AssetSelection.all() - dg.AssetSelection.key_prefixes("raw"))
    assert full.success, failures(full)
    report = next(m.materialization.metadata for m in full.get_asset_materialization_events()
                  if m.asset_key == dg.AssetKey("contamination_report"))
    assert report["contaminated_docs/stories"].value >= 1
    audit = {e.check_name: e for e in full.get_asset_check_evaluations()}[SHARDS_AUDIT_CLEAN]
    assert audit.passed and audit.metadata["overlap_ngrams"].value == 0


def edited(cfg: Path, name: str, section: str, **fields) -> Path:
    """A copy of `cfg` (same storage root and publish url) with `fields` of `section` changed."""
    d = yaml.safe_load(cfg.read_text())
    d[section].update(fields)
    out = cfg.with_name(name)
    out.write_text(yaml.safe_dump(d, sort_keys=False))
    return out


def latest(tmp: Path) -> str:
    return (tmp / "published" / "latest").read_text()


def test_config_edited_then_partial_selection_is_refused(built_demo):
    """Issue 27 item 1: tokenizer.vocab_size 4096 -> 2048, then `manifest` (or `token_shards*`) alone: the
    revision would hold the 4,096-entry tokenizer under a config saying 2048. Every record now carries the
    code_version (code + the config sections read) its asset was computed under, and consumers refuse
    records of another one."""
    cfg = built_demo.restore()
    tmp_path = cfg.parent
    instance = dg.DagsterInstance.ephemeral()
    before, pointed = published(tmp_path), latest(tmp_path)

    smaller = edited(cfg, "vocab.yaml", "tokenizer", vocab_size=2048)
    for selection in (dg.AssetSelection.assets("manifest"), dg.AssetSelection.assets("token_shards").downstream()):
        run = materialize(smaller, instance, selection)
        assert not run.success
        msg = failures(run)
        assert "tokenizer was materialised under another config or code" in msg, msg
        assert "Re-materialise, in this order:" in msg and "tokenizer" in msg.split("Re-materialise, in this order:")[1]
        assert not run.get_asset_materialization_events()
        assert published(tmp_path) == before and latest(tmp_path) == pointed


def test_another_runs_token_shards_between_token_shards_and_manifest_publishes_a_own_shards(built_demo):
    """The interleaving of two runs on one storage root: A (the demo) built token_shards, then B (the same
    config with another packing.shard_tokens) re-materialised token_shards there; A's manifest would publish
    B's packing under A's mix_config.json, with the manifest checker and the audit green. Before issue 27
    item 7 it was refused; now A's manifest restores A's token_shards from the keyed store by the key A's
    config gives it (common.checkout_inputs) and publishes A's own build again."""
    a = built_demo.restore()
    tmp_path = a.parent
    instance = dg.DagsterInstance.ephemeral()
    before, pointed = published(tmp_path), latest(tmp_path)
    fingerprint = json.loads((tmp_path / "storage" / "mix" / "manifest.json").read_text())["fingerprint"]

    b = edited(a, "b.yaml", "packing", shard_tokens=32768)
    run_b = materialize(b, instance, dg.AssetSelection.assets("token_shards"))
    assert run_b.success, failures(run_b)  # B's inputs were computed under B's config too: it may build

    run_a = materialize(a, instance, dg.AssetSelection.assets("manifest").downstream())
    assert run_a.success, failures(run_a)
    logs = [e.user_message for e in instance.all_logs(run_a.run_id)]
    assert any(m.startswith("token_shards: restored the current config's artifact") for m in logs), logs
    assert json.loads((tmp_path / "storage" / "mix" / "manifest.json").read_text())["fingerprint"] == fingerprint
    assert published(tmp_path) == before and latest(tmp_path) == pointed  # A's revision, as A built it
