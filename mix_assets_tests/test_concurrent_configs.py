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
Both also on an S3 storage root (SeaweedFS on loopback, `support/s3server.py`): the claims, the checkout and
the keyed store are objects there (core/checkout.py, core/objects.py).
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

from mix_assets.config import REPO_ROOT, load_spec
from mix_assets import gc
from mix_assets.core import checkout, objects
from mix_assets.core.storage import Storage
from mix_assets.resources import storage_for
from mix_assets_tests.support.s3server import WRITER
from mix_assets_tests.test_integrity_lineage import failures, materialize

pytestmark = pytest.mark.slow


def _config(base: Path, tmp: Path, name: str, root: "Path | str", published: Path, edit: bool,
            endpoint: str | None = None, label: str | None = None) -> Path:
    d = yaml.safe_load(base.read_text())
    if edit:
        d["filters"]["gopher_quality"] = {**(d["filters"]["gopher_quality"] or {}), "min_doc_words": 5}
        d["tokenizer"]["vocab_size"] = 2048
    label = label or Path(root).parent.name
    d["storage"] = {"root": str(root), "cache_dir": str(tmp / f"cache-{name}-{label}")}
    if endpoint:
        d["storage"]["s3_endpoint_url"] = endpoint
    d["publish"] = {"url": str(published)}
    path = tmp / f"{name}-{label}.yaml"
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


def _storage(cfg: Path) -> Storage:
    return storage_for(load_spec(cfg))


@pytest.fixture
def s3_root(seaweedfs, monkeypatch):
    """A fresh S3 storage root on the SeaweedFS server: (url, endpoint); credentials from the environment, as
    the `dagster job execute` processes get them."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", WRITER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRITER[1])
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    return seaweedfs.url("concurrent"), seaweedfs.endpoint


def test_two_runs_of_different_configs_started_together_on_one_root_both_publish_their_own_build(setup):
    shared = setup["tmp"] / "together"
    _together(setup, shared / "storage", shared / "published", None, "together")


@pytest.mark.s3
def test_two_runs_of_different_configs_started_together_on_one_s3_root_both_publish_their_own_build(setup, s3_root):
    _together(setup, s3_root[0], setup["tmp"] / "together-s3" / "published", s3_root[1], "together-s3")


def _together(setup, root, published: Path, endpoint, label: str) -> None:
    tmp, base, ref = setup["tmp"], setup["base"], setup["ref"]
    cfgs = {name: _config(base, tmp, name, root, published, edit, endpoint, label)
            for name, edit in (("A", False), ("B", True))}
    procs = {name: _execute(cfg, tmp / f"home-{name}") for name, cfg in cfgs.items()}
    outs = {name: p.communicate(timeout=1200)[0] for name, p in procs.items()}
    for name, p in procs.items():
        assert p.returncode == 0, f"run of config {name} failed:\n{outs[name][-6000:]}"
    revs = _revisions(published)
    # two revisions, each the from-scratch build of its own config, its published config that build's
    assert sorted(revs.values()) == sorted(ref.values()), {k: v[0][:16] for k, v in revs.items()}
    # one of the runs worked in the root, the other in a checkout of its own; neither left a claim
    st = _storage(cfgs["A"])
    (name,) = {k.split("/")[1] for k in st.list(checkout.CHECKOUTS)}
    assert name.startswith("cfg-")
    assert [k for k in st.list(checkout.CLAIMS) if k.endswith(".json")] == []
    # gc: the idle checkout goes (no live claim; --keep-days 0), every publication's artifacts stay in the store
    p = gc.plan(st, keep_days=0)
    assert set(p.remove_checkouts) == {f"{checkout.CHECKOUTS}/{name}"}, p.keep_checkouts
    gc.apply(st, p)
    assert not st.list(checkout.CHECKOUTS)
    keyed = {k: json.loads(st.read_text(k)) for k in st.list(objects.KEYED) if k.endswith(".json")}
    needed = gc._published_keys(st, keyed)
    assert {why.removeprefix("published ") for why in needed.values()} == set(revs)  # both revisions' artifacts, named by their records
    for k in needed:
        assert all(objects.blob_problem(st, sha) is None for sha in keyed[k]["outputs"].values()), k


def test_a_partial_run_of_a_then_b_whole_then_a_downstream_publishes_a(setup):
    shared = setup["tmp"] / "interleaved"
    _interleaved(setup, shared / "storage", shared / "published", None, "interleaved")


@pytest.mark.s3
def test_on_an_s3_root_a_partial_run_of_a_then_b_whole_then_a_downstream_publishes_a(setup, s3_root):
    _interleaved(setup, s3_root[0], setup["tmp"] / "interleaved-s3" / "published", s3_root[1], "interleaved-s3")


def _interleaved(setup, root, published: Path, endpoint, label: str) -> None:
    tmp, base, ref = setup["tmp"], setup["base"], setup["ref"]
    a = _config(base, tmp, "A", root, published, False, endpoint, label)
    b = _config(base, tmp, "B", root, published, True, endpoint, label)
    upstream = dg.AssetSelection.assets("validation_split").upstream()
    instance = dg.DagsterInstance.ephemeral()
    r = materialize(a, instance, selection=upstream)
    assert r.success, failures(r)
    r = materialize(b, instance)
    assert r.success, failures(r)
    assert sorted(_revisions(published).values()) == [ref["B"]]
    r = materialize(a, instance, selection=dg.AssetSelection.all() - upstream)
    assert r.success, failures(r)  # before: tokenizer refused validation_split, "materialised under another config"
    logs = [e.user_message for e in instance.all_logs(r.run_id)]
    assert any(m.startswith("validation_split: restored the current config's artifact") for m in logs)
    assert sorted(_revisions(published).values()) == sorted(ref.values())
    assert not _storage(a).list(checkout.CHECKOUTS)  # sequential runs all work in the root
