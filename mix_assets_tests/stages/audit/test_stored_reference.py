"""shards_audit_clean's eval reference read from eval_registry's files (published.stored_reference) instead of
parsing and hashing every eval item again: the same registry, denominators and scrub set as
`load_reference`, and None (the audit rebuilds it) as soon as an eval file, a registry file or the audit
setting is not the one the stored registry was built from."""

from __future__ import annotations

import json

import dagster as dg
import numpy as np
import pytest
import yaml

from mix_assets.config import load_spec
from mix_assets.core import layout
from mix_assets.resources import storage_for
from mix_assets.stages.audit import contamination as ct
from mix_assets.stages.audit import published
from mix_assets_tests.test_integrity_lineage import failures, materialize, private_demo

REGISTRY_ARRAYS = ("keys", "member", "short_first", "short_len", "short_whole", "short_member")


def _same(a: published.EvalReference, b: published.EvalReference) -> None:
    assert a.registry.tasks == b.registry.tasks
    for f in REGISTRY_ARRAYS:
        assert np.array_equal(getattr(a.registry, f), getattr(b.registry, f)), f
    assert a.registry.n == b.registry.n and a.registry.short_min == b.registry.short_min
    assert list(a.denominators) == list(b.denominators) and a.denominators == b.denominators
    assert np.array_equal(a.scrub, b.scrub)


def test_in_order_gives_what_build_gives_in_that_order():
    rng = np.random.default_rng(0)
    pool = rng.integers(1, 1 << 62, 40, dtype=np.uint64)
    per = {}
    for i, name in enumerate(("zeta", "alpha", "mid")):  # overlapping hashes and short items across tasks
        short = np.stack([pool[i:i + 4], np.arange(8, 12, dtype=np.uint64), pool[20 + i:24 + i]], axis=1)
        per[name] = ct.TaskNgrams(hashes=np.sort(pool[i * 5:i * 5 + 15]), short=short, items=0, ngrams=0,
                                  short_items=0, short_items_unmatched=0, empty_items=0)
    built = ct.Registry.build(dict(sorted(per.items())))  # alpha, mid, zeta: eval_registry.json's order
    want = ct.Registry.build(per)
    got = built.in_order(list(per))
    assert got.tasks == ["zeta", "alpha", "mid"]
    for f in REGISTRY_ARRAYS:
        assert np.array_equal(getattr(got, f), getattr(want, f)), f
    assert built.in_order(built.tasks) is built
    with pytest.raises(ValueError):
        built.in_order(["zeta", "alpha"])


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A private demo with a second eval task whose name sorts first (the registry file lists tasks sorted,
    the config does not), its eval_registry materialised alone."""
    tmp = tmp_path_factory.mktemp("stored_reference")
    cfg = private_demo(tmp)
    d = yaml.safe_load(cfg.read_text())
    extra = dict(d["audit"]["tasks"][0], name="alpha_questions", fields=["question"])
    d["audit"]["tasks"].append(extra)
    cfg.write_text(yaml.safe_dump(d, sort_keys=False))
    r = materialize(cfg, dg.DagsterInstance.ephemeral(), selection=["eval_registry"])
    assert r.success, failures(r)
    spec = load_spec(cfg)
    assert [t.name for t in spec.audit.tasks] == ["demo_qa", "alpha_questions"]
    return tmp, cfg, spec, storage_for(spec)


def test_the_stored_reference_is_load_reference(demo):
    _, _, spec, st = demo
    got = published.stored_reference(st, spec)
    assert got is not None
    _same(got, published.load_reference(spec))
    assert got.registry.tasks == ["demo_qa", "alpha_questions"]


def test_a_changed_eval_file_is_not_read_from_the_store(demo):
    tmp, _, spec, st = demo
    path = tmp / "demo_corpus" / "evals" / "demo_qa" / "validation.jsonl"
    before = path.read_text()
    row = json.loads(before.splitlines()[0])
    row["question"] = "an entirely new question about the stored registry and the files it was built from"
    try:
        path.write_text(before + json.dumps(row) + "\n")
        assert published.stored_reference(st, spec) is None
        assert published.load_reference(spec).denominators["demo_qa"]["rows"] == (
            json.loads(st.read_text(layout.EVAL_REGISTRY))["tasks"]["demo_qa"]["rows"] + 1)
    finally:
        path.write_text(before)
    assert published.stored_reference(st, spec) is not None


def test_a_tampered_registry_file_is_not_read(demo):
    _, _, spec, st = demo
    key = layout.EVAL_NGRAMS.format(task="alpha_questions")
    p = st.local_path(key)
    before = open(p, "rb").read()
    a = np.load(p)
    try:
        np.save(p, a[1:])  # one n-gram dropped: the audit would miss its windows
        assert published.stored_reference(st, spec) is None
    finally:
        open(p, "wb").write(before)
    assert published.stored_reference(st, spec) is not None


def test_another_audit_setting_is_not_read_from_the_store(demo):
    _, cfg, _, st = demo
    d = yaml.safe_load(cfg.read_text())
    for field, value in (("ngram", 12), ("scrub_words", 7)):
        e = json.loads(json.dumps(d))
        e["audit"][field] = value
        other = cfg.parent / f"other_{field}.yaml"
        other.write_text(yaml.safe_dump(e, sort_keys=False))
        assert published.stored_reference(st, load_spec(other)) is None, field
    e = json.loads(json.dumps(d))
    e["audit"]["tasks"][1]["fields"] = ["choices"]
    other = cfg.parent / "other_fields.yaml"
    other.write_text(yaml.safe_dump(e, sort_keys=False))
    assert published.stored_reference(st, load_spec(other)) is None


def test_a_missing_or_unreadable_registry_file_is_not_read(demo):
    _, _, spec, st = demo
    p = st.local_path(layout.EVAL_SHORT_ITEMS.format(task="demo_qa"))
    before = open(p, "rb").read()
    try:
        open(p, "wb").write(b"not an npy file")
        assert published.stored_reference(st, spec) is None
        st.delete(layout.EVAL_SHORT_ITEMS.format(task="demo_qa"))
        assert published.stored_reference(st, spec) is None
    finally:
        open(p, "wb").write(before)
    assert published.stored_reference(st, spec) is not None
