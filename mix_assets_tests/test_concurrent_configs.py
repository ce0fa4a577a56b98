"""Runs of different configs on one storage root (issue 27, Build item 7): both succeed, neither writes the other's.

Config A is the demo; config B the demo with a filter threshold (`gopher_quality.min_doc_words` 50 -> 5) and the
tokenizer's vocabulary (4096 -> 2048) changed, so that every asset from document_filters down differs. Both
publish to one target. Each revision must be the from-scratch build of its own config: the fingerprint of A
(resp. B) built alone on a storage root of its own, and its `review/mix_config.json` that build's bytes.

1. Two `dagster job execute -j rebuild_mix` processes, one per config, started together on one root: the
   first to claim the root works in it, the other in a checkout of its own (core/checkout.py); the run
   lease serialises only publishing and `latest`. Before: one failed at the lease (`in use by run ...`) or
   refused the other's artifacts (the working paths were shared).
2. Sequential interleaving on one root: A's upstream half (through validation_split), then B whole, then
   A's downstream half (tokenizer and below): A's consumers restore A's artifacts by their keys from the
   store (common.checkout_inputs) instead of refusing B's. Before: tokenizer refused validation_split
   ("materialised under another config").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from mix_assets.config import REPO_ROOT
from mix_assets_tests.test_integrity_lineage import failures, materialize

pytestmark = pytest.mark.slow


def _config(base: Path, tmp: Path, name: str, root: Path, published: Path, edit: bool) -> Path:
    d = yaml.safe_load(base.read_text())
    if edit:
        d["filters"]["gopher_quality"] = {**(d["filters"]["gopher_quality"] or {}), "min_doc_words": 5}
        d["tokenizer"]["vocab_size"] = 2048
    d["storage"] = {"root": str(root), "cache_dir": str(tmp / f"cache-{name}")}
    d["publish"] = {"url": str(published)}
    path = tmp / f"{name}-{root.parent.name}.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def _revisions(published: Path) -> dict[str, tuple[str, bytes]]:
    """revision -> (fingerprint, review/mix_config.json bytes) at a publish target."""
    out = {}
    for rev in sorted(published.glob("rev-*")):
        m = json.loads((rev / "manifest.json").read_text())
        out[rev.name] = (m["fingerprint"], (rev / "review" / "mix_config.json").read_bytes())
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory, built_demo):
    """The two configs over one copy of the demo corpus, and each one's from-scratch revision."""
    tmp = tmp_path_factory.mktemp("concurrent_configs")
    # the corpus at built_demo.work/demo_corpus, shared by every config below; A is that config itself (storage
    # and publish are operational: in neither the fingerprint nor mix_config.json), so the session's
    # from-scratch build of it (support/built_demo.py) is A's reference revision
    base = built_demo.restore()
    (ref_a,) = _revisions(built_demo.work / "published").values()
    root = tmp / "refB"
    cfg = _config(base, tmp, "B", root / "storage", root / "published", True)
    r = materialize(cfg, dg.DagsterInstance.ephemeral())
    assert r.success, failures(r)
    (ref_b,) = _revisions(root / "published").values()
    ref = {"A": ref_a, "B": ref_b}
    assert ref["A"][0] != ref["B"][0]  # the two configs build different bytes
    return {"tmp": tmp, "base": base, "ref": ref}


def _execute(cfg: Path, home: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("MIX_STORAGE_ROOT", "MIX_EXECUTOR")}
    home.mkdir(parents=True, exist_ok=True)
    env.update(MIX_CONFIG=str(cfg), DAGSTER_HOME=str(home), MIX_LOCK_WAIT_SECONDS="300")
    dagster = Path(sys.executable).with_name("dagster")
    return subprocess.Popen([str(dagster), "job", "execute", "-m", "mix_assets.definitions", "-a", "defs",
                             "-j", "rebuild_mix"], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_two_runs_of_different_configs_started_together_on_one_root_both_publish_their_own_build(setup):
    tmp, base, ref = setup["tmp"], setup["base"], setup["ref"]
    shared = tmp / "together"
    cfgs = {name: _config(base, tmp, name, shared / "storage", shared / "published", edit)
            for name, edit in (("A", False), ("B", True))}
    procs = {name: _execute(cfg, tmp / f"home-{name}") for name, cfg in cfgs.items()}
    outs = {name: p.communicate(timeout=1200)[0] for name, p in procs.items()}
    for name, p in procs.items():
        assert p.returncode == 0, f"run of config {name} failed:\n{outs[name][-6000:]}"
    revs = _revisions(shared / "published")
    # two revisions, each the from-scratch build of its own config, its published config that build's
    assert sorted(revs.values()) == sorted(ref.values()), {k: v[0][:16] for k, v in revs.items()}
    # one of the runs worked in the root, the other in a checkout of its own; neither left a claim
    assert [p.name for p in (shared / "storage" / "checkouts").iterdir()][0].startswith("cfg-")
    assert list((shared / "storage" / "locks" / "checkouts").rglob("*.json")) == []


def test_a_partial_run_of_a_then_b_whole_then_a_downstream_publishes_a(setup):
    tmp, base, ref = setup["tmp"], setup["base"], setup["ref"]
    shared = tmp / "interleaved"
    a = _config(base, tmp, "A", shared / "storage", shared / "published", False)
    b = _config(base, tmp, "B", shared / "storage", shared / "published", True)
    upstream = dg.AssetSelection.assets("validation_split").upstream()
    instance = dg.DagsterInstance.ephemeral()
    r = materialize(a, instance, selection=upstream)
    assert r.success, failures(r)
    r = materialize(b, instance)
    assert r.success, failures(r)
    assert sorted(_revisions(shared / "published").values()) == [ref["B"]]
    r = materialize(a, instance, selection=dg.AssetSelection.all() - upstream)
    assert r.success, failures(r)  # before: tokenizer refused validation_split, "materialised under another config"
    logs = [e.user_message for e in instance.all_logs(r.run_id)]
    assert any(m.startswith("validation_split: restored the current config's artifact") for m in logs)
    assert sorted(_revisions(shared / "published").values()) == sorted(ref.values())
    assert not (shared / "storage" / "checkouts").exists()  # sequential runs all work in the root
