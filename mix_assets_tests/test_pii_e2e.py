"""Issue 14 (PII as a modifier) end to end: planted emails, IPs and phones in two generated JSONL sources
run through the real definitions to the published revision with `filters: {pii: {}}`. The raw documents
hold placeholders, the counts per rule are exact, the published revision carries scrub_manifest.json
(listed and fingerprinted, verified by the manifest checks) and its card says so; the eval registry is
the bytes a config without PII gives.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from mix_assets.config import load_spec
from mix_assets.definitions import build_definitions
from mix_assets_tests.support import gen_corpus as gc
from mix_assets.core import layout, pii
from mix_assets.format.checker import check_manifest
from mix_assets.core.storage import Storage
from mix_assets_tests.support.generated_mix import fixture_mix_over
from mix_assets_tests.support.shared_data import FIXTURE

pytestmark = pytest.mark.slow
SOURCES = ("essays", "stories")
PLANT_EVERY = 4
# per planted document: 2 emails, 1 public IPv4, 1 IPv6, 2 phones; and look-alikes that stay
PLANT = ("Write to ann.{i}@example.org or desk{i}@mail.example.net, the host 8.8.{a}.{b} and "
         "2001:4860:4860::{i:x} answer; call (415) 555-{p:04d} or +44 20 7946 {p:04d}. "
         "Not personal: 192.168.{a}.{b}, version v1.2.3.{a}, 12:30:45 and ISBN 978-3-16-148410-0.")
PER_DOC = {"email": 2, "ipv6": 1, "ipv4": 1, "phone": 2}


def pii_mix(tmp: Path, scrub: bool) -> tuple[Path, dict]:
    """The fixture mix's settings over generated prose, every PLANT_EVERY-th document with PII."""
    model = gc.MarkovModel.from_files(sorted((FIXTURE / "sources").glob("*/*.txt")), order=1)
    corpus = gc.generate(model, 400, seed=14, median_words=150)
    clean = pii.scrub(corpus.texts)[1]
    assert sum(clean.column(r).to_numpy().sum() for r in PER_DOC) == 0  # the generator plants none itself
    texts = [t + "\n\n" + PLANT.format(i=i, a=i % 250, b=(7 * i) % 250, p=1000 + i) if i % PLANT_EVERY == 0 else t
             for i, t in enumerate(corpus.texts)]
    paths = gc.write_jsonl_sources(dataclasses.replace(corpus, texts=texts), tmp / "corpus", SOURCES, seed=14)
    out = fixture_mix_over(tmp, paths, name="pii_mix", rationale="Markov prose over the fixture's books, planted PII.",
                           description="Generated prose with planted emails, IP addresses and phones.",
                           read_share=0.9, **({"filters": {"pii": {}}} if scrub else {}))
    return out, {s: [json.loads(line)["text"] for line in open(paths[s])] for s in SOURCES}


def test_planted_pii_is_redacted_counted_and_published_with_a_scrub_manifest(tmp_path):
    cfg, originals = pii_mix(tmp_path / "scrub", scrub=True)
    defs = build_definitions(load_spec(cfg))
    result = dg.materialize(list(defs.assets), resources=defs.resources, instance=dg.DagsterInstance.ephemeral(),
                            raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    st = Storage(str(tmp_path / "scrub" / "storage"))
    want_sources = {}
    for s in SOURCES:
        t = pq.read_table(st.local_path(layout.RAW_DOCS.format(source=s)), columns=["text", "row_index"])
        texts, rows = t.column("text").to_pylist(), t.column("row_index").to_pylist()
        planted = [r for r in rows if "@mail.example.net" in originals[s][r]]
        assert 0 < len(planted) < len(rows)
        assert not any(x in t for t in texts for x in ("@example", "host 8.8.", "2001:4860", "(415)", "+44 20"))
        assert sum("<EMAIL> or <EMAIL>" in t and "<IPV6>" in t and "192.168." in t and "v1.2.3." in t
                   and "978-3-16-148410-0" in t for t in texts) == len(planted)
        want_sources[s] = {"rules": list(PER_DOC), "docs": len(rows), "scrubbed_docs": len(planted),
                           "redactions": {r: n * len(planted) for r, n in PER_DOC.items()}}
    built = json.loads(st.read_text(layout.MIX_SCRUB_MANIFEST))
    assert built["sources"] == want_sources
    assert built["rules_version"] == pii.SCRUB_RULES_VERSION and built["rules_sha256"] == pii.rules_sha256()
    # the published revision carries it: listed, fingerprinted, checked, and named on the card
    rev = next((tmp_path / "scrub" / "published").glob("rev-*"))
    m = json.loads((rev / "manifest.json").read_text())
    assert m["review"]["scrub_manifest"] == "scrub_manifest.json"
    assert "scrub_manifest.json" in [f["path"] for f in m["files"]]
    assert json.loads((rev / "scrub_manifest.json").read_text()) == built
    assert check_manifest(m, rev, strict=False) == []
    assert "scrub_manifest.json" in (rev / "README.md").read_text()
    tampered = {**built, "sources": {**built["sources"], "essays": {**want_sources["essays"], "scrubbed_docs": -1}}}
    (rev / "scrub_manifest.json").write_text(json.dumps(tampered))
    assert any("scrub_manifest.json" in p for p in check_manifest(m, rev, strict=False))
    # eval items never pass through the modifiers: the registry is the one a config without PII builds
    plain, _ = pii_mix(tmp_path / "plain", scrub=False)
    pdefs = build_definitions(load_spec(plain))
    dg.materialize(list(pdefs.assets), resources=pdefs.resources, instance=dg.DagsterInstance.ephemeral(),
                   selection=dg.AssetSelection.assets("eval_registry"))
    ps = Storage(str(tmp_path / "plain" / "storage"))
    keys = [k for k in st.list("audit/eval_registry")]
    assert keys and keys == ps.list("audit/eval_registry")
    assert all(st.sha256(k) == ps.sha256(k) for k in keys)
