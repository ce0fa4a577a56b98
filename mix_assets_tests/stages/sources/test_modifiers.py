"""stages/sources/modifiers.py: PII then C4 line modification over a batch, counted; C4 modify re-applied downstream."""

from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
import pytest

from mix_assets.config import load_spec
from mix_assets.stages.filters import cascade
from mix_assets.stages.filters.rules.c4 import C4Filter
from mix_assets.core import layout, pii
from mix_assets.stages.sources.modifiers import ModifierCounts, Modifiers, modify
from mix_assets.stages.sources.sources import read_raw_source
from mix_assets.core.storage import Storage

from mix_assets_tests.conftest import minimal_config, source, write_config

FINE = [f"This is sentence number {i} of the page, and it reads well enough." for i in range(6)]


def _c4(texts, c4=C4Filter()):
    return cascade.apply_filters(texts, cascade.FilterConfig.only("c4").replace(c4=c4))


def test_pii_then_c4_rewrites_only_documents_c4_keeps_and_counts_exactly():
    kept = "\n".join(["Mail jane.doe@example.com or 8.8.8.8 today.", "Home", *FINE])
    dropped = "Call (415) 555-2671 now.\nMenu"  # C4 drops it (too few sentences): only PII touches it
    plain = "\n".join(FINE)
    out, counts = modify(pa.array([kept, dropped, plain]), Modifiers(pii.RULES, C4Filter()))
    assert out.to_pylist() == ["\n".join(["Mail <EMAIL> or <IPV4> today.", *FINE]),
                               "Call <PHONE> now.\nMenu", plain]
    assert counts["pii"].to_pydict() == {"email": [1, 0, 0], "ipv6": [0, 0, 0], "ipv4": [1, 0, 0], "phone": [0, 1, 0]}
    assert counts["c4_changed"].tolist() == [True, False, False]
    assert counts["c4_removed_chars"].tolist() == [5, 0, 0]  # "Home" and its newline
    total = ModifierCounts(Modifiers(pii.RULES, C4Filter()))
    total.add(3, counts)
    total.add(3, counts)
    st = total.stats()
    assert st["pii"]["docs"] == 6 and st["pii"]["scrubbed_docs"] == 4
    assert st["pii"]["redactions"] == {"email": 2, "ipv6": 0, "ipv4": 2, "phone": 2}
    assert st["pii"]["rules_version"] == pii.SCRUB_RULES_VERSION
    assert {k: st["c4"][k] for k in ("docs", "modified_docs", "removed_chars")} == \
        {"docs": 6, "modified_docs": 2, "removed_chars": 10}


def test_modifiers_follow_the_config_and_its_per_source_overrides(tmp_path):
    a, b, c = (source(n, {"kind": "jsonl", "paths": ["x.jsonl"]}, share=s) for n, s in (("a", 0.5), ("b", 0.25), ("c", 0.25)))
    b["filters"] = {"pii": {"rules": ["email"]}, "c4": {"mode": "filter"}}
    c["filters"] = {"pii": {"enabled": False}, "c4": {"enabled": False}}
    spec = load_spec(write_config(tmp_path, minimal_config(sources=[a, b, c], filters={"pii": {}, "c4": {}})))
    ma, mb = Modifiers.for_source(spec, "a"), Modifiers.for_source(spec, "b")
    assert [r.name for r in ma.pii_rules] == ["email", "ipv6", "ipv4", "phone"] and ma.c4 == C4Filter()
    assert [r.name for r in mb.pii_rules] == ["email"] and mb.c4 is None  # "filter" mode changes no text
    assert Modifiers.for_source(spec, "c") is None
    none = load_spec(write_config(tmp_path, minimal_config(sources=[source("a", {"kind": "jsonl", "paths": ["x"]})])))
    assert Modifiers.for_source(none, "a") is None
    assert ma.identity() != Modifiers(ma.pii_rules, dataclasses.replace(ma.c4, min_words_per_line=4)).identity()


@pytest.mark.shared_data
@pytest.mark.parametrize("c4", [C4Filter()])
def test_c4_modify_is_idempotent_on_web_like_documents(c4):
    """The document filter stage re-evaluates C4 on the text raw wrote: same text, same decision."""
    from bench.filters import build_corpus

    docs, _ = build_corpus(quick=True, web_share=0.5, seed=0)
    first = _c4(docs, c4)
    again = _c4(first.texts, c4)
    assert 0 < first.keep.sum() < len(docs)
    assert first.keep.tolist() == again.keep.tolist()
    assert first.texts.to_pylist() == again.texts.to_pylist()


def test_c4_modify_is_not_idempotent_where_citation_removal_shortens_a_line():
    """The known exceptions (datatrove's order of rules): words are counted before citations are
    removed and the cleaned line is not stripped again, so a second pass can see fewer words or
    lose a trailing space."""
    doc = "\n".join(["See [1] here.", *FINE[:4]])  # 3 words, then 2 once "[1]" is gone
    first = _c4([doc])
    again = _c4(first.texts)
    assert first.keep.tolist() == [True] and again.reason == ["c4:too_few_sentences"]
    no_punct = C4Filter(filter_no_terminal_punct=False)  # FineWeb's setting
    doc = "\n".join(["A line with a citation. [2]", *FINE])
    first = _c4([doc], no_punct)
    assert first.texts.to_pylist()[0].startswith("A line with a citation. \n")
    assert _c4(first.texts, no_punct).texts.to_pylist()[0].startswith("A line with a citation.\n")


def test_a_filters_section_without_modifiers_writes_the_same_raw_bytes(tmp_path):
    """Only PII and C4 in mode "modify" change text: document filters, C4 "filter" and a switched-off
    PII leave raw/<source> byte for byte as a config without `filters:` writes it."""
    rows = [{"text": "\n".join(FINE) + f"\nMail a{i}@example.org today."} for i in range(50)]
    (tmp_path / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    src = source("a", {"kind": "jsonl", "paths": ["x.jsonl"]})
    digests = {}
    for name, filt in (("plain", None), ("off", {"pii": {"enabled": False}, "c4": {"mode": "filter"},
                                                 "gopher_quality": {}, "fineweb": {}}), ("pii", {"pii": {}})):
        cfg = minimal_config(sources=[src], **({"filters": filt} if filt else {}))
        spec = load_spec(write_config(tmp_path, cfg, f"{name}.yaml"))
        st = Storage(root=str(tmp_path / name))
        read_raw_source(st, spec, "a")
        digests[name] = (st.sha256(layout.RAW_DOCS.format(source="a")),
                         st.read_text(layout.RAW_STATS.format(source="a")))
    assert digests["off"] == digests["plain"] and digests["pii"][0] != digests["plain"][0]


def test_scrub_manifest_comes_from_raw_stats_and_refuses_stats_of_other_rules(tmp_path):
    from mix_assets.stages.sources.modifiers import build_scrub_manifest

    rows = [{"text": f"Mail a{i}@example.org or call (415) 555-{1000 + i:04d}."} for i in range(20)]
    (tmp_path / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    srcs = [source("a", {"kind": "jsonl", "paths": ["x.jsonl"]}, share=0.5),
            source("b", {"kind": "jsonl", "paths": ["x.jsonl"]}, share=0.5, filters={"pii": {"enabled": False}})]
    spec = load_spec(write_config(tmp_path, minimal_config(sources=srcs, filters={"pii": {}, "c4": {}})))
    st = Storage(root=str(tmp_path / "st"))
    for s in ("a", "b"):
        read_raw_source(st, spec, s)
    sm = build_scrub_manifest(st, spec)
    assert sm["sources"] == {"a": {"rules": ["email", "ipv6", "ipv4", "phone"], "docs": 20, "scrubbed_docs": 20,
                                   "redactions": {"email": 20, "ipv6": 0, "ipv4": 0, "phone": 20}}}
    assert set(sm["c4_modified_lines"]) == {"a", "b"} and sm["rules_sha256"] == pii.rules_sha256()
    other = load_spec(write_config(tmp_path, minimal_config(sources=srcs, filters={"pii": {"rules": ["email"]},
                                                                                   "c4": {}}), "other.yaml"))
    with pytest.raises(ValueError, match="raw/a was written with the modifiers .*re-materialise raw/a"):
        build_scrub_manifest(st, other)
    assert build_scrub_manifest(st, load_spec(write_config(tmp_path, minimal_config(sources=srcs), "none.yaml"))) is None
