"""raw/<source>: drop reasons reach the asset's stats file and metadata."""

from __future__ import annotations

import json

import dagster as dg
import pyarrow.parquet as pq

from mix_assets.stages.sources.assets import build_source_assets
from mix_assets.config import load_spec
from mix_assets.core import layout
from mix_assets.resources import MixResource

from mix_assets_tests.conftest import minimal_config, source, write_config


def test_binary_documents_are_counted_in_stats_and_metadata(tmp_path):
    d = tmp_path / "texts"
    d.mkdir()
    (d / "prose.txt").write_text("A paragraph of prose.\n\nAnother paragraph of prose.\n")
    (d / "zeros.txt").write_bytes(b"\x00" * 512)
    cfg = write_config(tmp_path, minimal_config(sources=[source("t", {"kind": "text", "paths": ["texts"]})]))
    spec = load_spec(cfg)
    # (raise_on_error off: two short paragraphs do not meet the budget check)
    res = dg.materialize(build_source_assets(spec), instance=dg.DagsterInstance.ephemeral(), raise_on_error=False,
                         resources={"mix": MixResource(config_path=str(cfg), storage_root=str(tmp_path / "st"))})
    meta = res.get_asset_materialization_events()[0].materialization.metadata
    assert meta["dropped_docs/sanity:binary"].value == 1 and meta["dropped_docs/sanity:control_chars"].value == 0
    assert meta["docs"].value == 2 and meta["drop_notes"].value == ["zeros.txt#0: sanity:binary: 512 NUL characters"]
    stats = json.loads((tmp_path / "st" / layout.RAW_STATS.format(source="t")).read_text())
    assert stats["dropped"]["sanity:binary"] == 1 and stats["drop_notes"] == meta["drop_notes"].value


PLANTED = [  # (text, redactions per rule): emails, public IPs and phones among look-alikes that stay
    ("Write to ann@example.org or bob.smith@mail.example.co.uk about the report.", {"email": 2}),
    ("The server at 8.8.8.8 answered, the one at 192.168.1.1 did not.", {"ipv4": 1}),
    ("Call (415) 555-2671 or +44 20 7946 0958, not the ISBN 978-3-16-148410-0.", {"phone": 2}),
    ("Route via 2001:4860:4860::8888 at 10:30:00 on 2024-01-02.", {"ipv6": 1}),
    ("Plain prose with a price of 12.50 and nothing personal in it at all.", {}),
]


def test_pii_is_redacted_in_raw_documents_and_counted_per_rule(tmp_path):
    rows = [{"text": t} for t, _ in PLANTED] * 3
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plain = minimal_config(sources=[source("p", {"kind": "jsonl", "paths": ["p.jsonl"]})])
    scrubbed = {**plain, "filters": {"pii": {}}}
    got = {}
    for name, cfg in (("plain", plain), ("scrubbed", scrubbed)):
        spec = load_spec(write_config(tmp_path, cfg, f"{name}.yaml"))
        assets = build_source_assets(spec)
        res = dg.materialize(assets, instance=dg.DagsterInstance.ephemeral(), raise_on_error=False, resources={
            "mix": MixResource(config_path=str(tmp_path / f"{name}.yaml"), storage_root=str(tmp_path / name))})
        meta = res.get_asset_materialization_events()[0].materialization.metadata
        docs = pq.read_table(tmp_path / name / layout.RAW_DOCS.format(source="p"))
        stats = json.loads((tmp_path / name / layout.RAW_STATS.format(source="p")).read_text())
        got[name] = (meta, docs, stats, assets[0].code_versions_by_key[dg.AssetKey(["raw", "p"])])
    meta, docs, stats, version = got["scrubbed"]
    texts = docs.column("text").to_pylist()
    assert docs.num_rows == 15 and not any(s in t for t in texts for s in ("@example", "8.8.8.8", "555-2671", "4860"))
    assert "<EMAIL> or <EMAIL>" in texts[0] and "192.168.1.1" in texts[1] and "978-3-16-148410-0" in texts[2]
    want = {r: 3 * sum(c.get(r, 0) for _, c in PLANTED) for r in ("email", "ipv6", "ipv4", "phone")}
    assert stats["modifiers"]["pii"]["redactions"] == want
    assert stats["modifiers"]["pii"]["docs"] == 15 and stats["modifiers"]["pii"]["scrubbed_docs"] == 12
    assert {r: meta[f"pii_redactions/{r}"].value for r in want} == want and meta["pii_scrubbed_docs"].value == 12
    assert docs.column("n_chars").to_pylist() == [len(t) for t in texts]  # sizes are the written text's
    assert stats["bytes"] == sum(len(t.encode()) for t in texts)
    p_meta, p_docs, p_stats, p_version = got["plain"]
    assert "modifiers" not in p_stats and "pii_scrubbed_docs" not in p_meta and p_version != version
    assert p_docs.column("text").to_pylist()[:5] == [t for t, _ in PLANTED]


def test_raw_code_version_follows_the_modifiers_not_the_document_filters(tmp_path):
    # raw/<source>'s bytes depend on its modifiers (PII, C4 in mode modify), not on the thresholds that
    # document_filters judges them by: only the former may mark raw/<source> stale
    (tmp_path / "p.jsonl").write_text(json.dumps({"text": "some text"}) + "\n")

    def version(override: dict | None, mix_filters: dict | None = None) -> str:
        src = source("p", {"kind": "jsonl", "paths": ["p.jsonl"]})
        cfg = minimal_config(sources=[{**src, "filters": override} if override is not None else src])
        if mix_filters is not None:
            cfg["filters"] = mix_filters
        spec = load_spec(write_config(tmp_path, cfg, "v.yaml"))
        return build_source_assets(spec)[0].code_versions_by_key[dg.AssetKey(["raw", "p"])]

    mix = {"gopher_quality": {}, "c4": {"mode": "modify"}, "pii": {}}
    base = version({"gopher_quality": {"min_doc_words": 50}}, mix)
    assert version({"gopher_quality": {"min_doc_words": 80}}, mix) == base
    assert version({"gopher_quality": {"min_doc_words": 50}, "fineweb": {}, "expect": {"c4": {"max_kill_rate": 0.9}},
                    "guard": {"brevity_warn": 1.0}}, mix) == base
    assert version({"gopher_quality": {"min_doc_words": 50}, "pii": {"rules": ["email"]}}, mix) != base
    assert version({"gopher_quality": {"min_doc_words": 50}, "c4": {"min_num_sentences": 3}}, mix) != base
    # C4 deciding only (mode filter) writes the text unchanged: its thresholds are document_filters' alone
    decide = {**mix, "c4": {"mode": "filter"}}
    assert version({"c4": {"min_num_sentences": 3}}, decide) == version({"c4": {"min_num_sentences": 4}}, decide)
    # without modifiers an override that only judges documents leaves raw as a source without filters
    assert version({"gopher_quality": {"min_doc_words": 80}}) == version({"fineweb": {}}) == version(None)
