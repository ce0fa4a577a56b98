"""The published audit on the embedded demo, built by the real definitions.

* masks on (the default): the published revision audits to zero overlap with non-zero denominators,
  although the raw corpus holds planted eval copies (the in-graph report counted them);
* masks off (`audit.mask_contaminated: false`): the zero_eval_overlap gate would stop the run, so it
  is left out of the selection; the decoded-shards gate on manifest (`shards_audit_clean`) then fails
  and nothing is published, and the mix directory the graph wrote is audited by the CLI: the planted
  copies are in its bytes and it exits non-zero.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from mix_assets.stages.audit.assets import EXCLUSION_MASKS_KEY, ZERO_EVAL_OVERLAP
from mix_assets.stages.manifest.assets import SHARDS_AUDIT_CLEAN
from mix_assets.config import REPO_ROOT, load_spec
from mix_assets.definitions import build_definitions
from mix_assets.core import layout

pytestmark = pytest.mark.slow


def demo_config(tmp: Path, **audit) -> Path:
    """configs/demo.yaml with its paths made absolute and storage/publish under `tmp`."""
    d = yaml.safe_load((REPO_ROOT / "configs" / "demo.yaml").read_text())
    ab = lambda p: str((REPO_ROOT / "configs" / p).resolve())  # noqa: E731
    d["demo_corpus"]["path"] = ab(d["demo_corpus"]["path"])
    for s in d["sources"]:
        s["loader"]["paths"] = [ab(p) for p in s["loader"]["paths"]]
    for t in d["audit"]["tasks"]:
        t["dataset"]["path"] = ab(t["dataset"]["path"])
    d["audit"].update(audit)
    d["storage"] = {"root": str(tmp / "storage"), "cache_dir": str(tmp / "cache")}
    d["publish"] = {"url": str(tmp / "published")}
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "demo.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    return tmp / "demo.yaml"


def _materialize(cfg: Path, selection=None):
    spec = load_spec(cfg)
    defs = build_definitions(spec)
    return dg.materialize(list(defs.assets), resources=defs.resources, instance=dg.DagsterInstance.ephemeral(),
                          selection=selection, raise_on_error=False)


def _cli(location: Path, cfg: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mix_assets.audit_published", str(location), "--config", str(cfg),
                           "--cache-dir", str(out.parent / "readcache"), "--json", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


def test_published_demo_revision_audits_to_zero_with_denominators(tmp_path, built_demo):
    # the demo (over a private copy of its corpus) built whole by the real definitions: the session's build
    # (support/built_demo.py), with the on-disk instance its run recorded its materialisations in
    cfg = built_demo.restore()
    with dg.DagsterInstance.local_temp(str(built_demo.home)) as instance:
        ev = instance.get_latest_materialization_event(dg.AssetKey("contamination_report"))
        runs = instance.get_runs()
    assert len(runs) == 1 and runs[0].is_success and ev.run_id == runs[0].run_id  # that one run built it all
    report = ev.asset_materialization.metadata
    raw_overlap = report["overlap_ngrams"].value
    assert raw_overlap > 0  # the demo's raw corpus holds eval copies: a zero below is not vacuous
    pointer = json.loads((cfg.parent / "published" / "latest").read_text())
    rev = cfg.parent / "published" / pointer["revision"]
    out = _cli(rev, cfg, tmp_path / "audit.json")
    assert out.returncode == 0, out.stdout + out.stderr
    rep = json.loads((tmp_path / "audit.json").read_text())
    assert rep["overlap_total"] == 0 and rep["passed"] and rep["fingerprint"] == pointer["fingerprint"]
    d = rep["denominators"]["demo_qa"]
    assert d["rows"] >= d["min_rows"] > 0 and d["items"] > 0 and d["ngrams"] > 0
    for s in ("train", "val"):
        assert rep["splits"][s]["samples_scanned"] > 0 and rep["splits"][s]["words_scanned"] > 0


def test_demo_without_masks_the_published_bytes_show_the_overlap(tmp_path):
    cfg = demo_config(tmp_path, mask_contaminated=False)
    gate = dg.AssetCheckKey(EXCLUSION_MASKS_KEY, ZERO_EVAL_OVERLAP)
    result = _materialize(cfg, dg.AssetSelection.all() - dg.AssetSelection.checks(gate))
    assert ZERO_EVAL_OVERLAP not in {e.check_name for e in result.get_asset_check_evaluations()}
    # the decoded-shards audit on manifest catches what the skipped gate would have, and holds publish back
    audit = {e.check_name: e for e in result.get_asset_check_evaluations()}[SHARDS_AUDIT_CLEAN]
    assert not result.success and not audit.passed and audit.metadata["overlap_ngrams"].value > 0
    assert not (tmp_path / "published").exists()
    # a later run of published_revision alone (the UI allows it) does not skip the audit's verdict
    alone = _materialize(cfg, dg.AssetSelection.assets("published_revision"))
    err = alone.get_step_failure_events()[0].event_specific_data.error.to_string()
    assert not alone.success and f"no passing {SHARDS_AUDIT_CLEAN}" in err
    assert not (tmp_path / "published").exists()
    mix_dir = tmp_path / "storage" / layout.MIX_DIR
    out = _cli(mix_dir, cfg, tmp_path / "audit.json")
    assert out.returncode == 1, out.stdout + out.stderr
    rep = json.loads((tmp_path / "audit.json").read_text())
    assert rep["overlap_total"] > 0 and rep["samples_with_overlap"] > 0
    truth = json.loads((REPO_ROOT / "build" / "demo_corpus" / "ground_truth.json").read_text())
    assert truth["eval_copies"]  # what was planted; no item text is compared or printed here
    assert "FAIL" in out.stdout
