"""zero_eval_overlap reads contamination_report's outputs and the masks (no re-scan), exactly as strict
as the re-scan of the kept documents it replaced: same pass/fail, same metadata."""

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.stages.audit import metadata as md
from mix_assets.stages.audit import assets as A
from mix_assets.stages.audit import eval_scan
from mix_assets.core import engine, layout, tables
from mix_assets.stages.audit import contamination as ct
from mix_assets.core.storage import Storage
from mix_assets_tests.support import audit_fixtures as fx
from mix_assets_tests.support.tokens_fixtures import stamp


def _two_task_spec(tmp_path):
    """demo_qa plus a second task holding the first two items: web-0003 and web-0007 hit both."""
    base = fx.make_spec(tmp_path)
    demo = base.audit.tasks[0].model_dump(mode="json")
    second = fx.write_eval_task(tmp_path / "evals" / "second_qa", fx.EVAL_ROWS[:2])
    other = {**demo, "name": "second_qa", "dataset": {"kind": "local", "path": str(second)}, "min_rows": 2}
    return fx.make_spec(tmp_path, tasks=[demo, other])


def _rescan(storage, spec, masked: set) -> eval_scan.Scan:
    """The check as it was: every raw document scanned again, masked doc ids dropped."""
    loc = eval_scan.RegistryLocation.of(storage)
    reg, meta = eval_scan.load_registry(storage)
    tally = ct.Tally(tasks=reg.tasks)
    for s, path in tables.raw_paths(storage, [x.name for x in spec.sources]).items():
        for rng in engine.row_ranges(path, 7):
            got = eval_scan.scan_chunk(rng, loc)
            keep = [i for i, d in enumerate(got.doc_ids) if d not in masked]
            tally.add(s, [got.doc_ids[i] for i in keep], got.counts[keep])
    return eval_scan.Scan(tally, {t: m["ngrams"] for t, m in meta["tasks"].items()}, 0, len(masked))


def _write_masks(storage, ids):
    with storage.writing(layout.EXCLUSION_MASKS) as tmp:
        pq.write_table(pa.table({"doc_id": ids, "source": [d.split("-")[0] for d in ids]}), tmp)


@pytest.mark.parametrize("masked", [
    [],  # nothing masked: every hit is kept
    ["web-0003", "books-0005", "books-0009"],  # web-0007 (two tasks) and web-0011 kept
    ["web-0003", "web-0007", "web-0011", "books-0005", "web-0020"],  # all hits masked, plus a clean doc
])
def test_metadata_equals_the_rescan_of_the_kept_documents(tmp_path, masked):
    spec = _two_task_spec(tmp_path)
    storage = Storage(root=str(tmp_path / "storage"))
    corpus = fx.make_corpus()
    for s in spec.sources:
        fx.write_docs(storage, s.name, corpus.docs[s.name])
    eval_scan.write_registry(storage, spec)
    eval_scan.write_contamination_report(storage, spec)
    hits = pq.read_table(storage.local_path(layout.CONTAMINATED_DOCS)).to_pylist()
    assert any(len(h["tasks"]) == 2 for h in hits)
    assert all(sum(h["task_overlap_ngrams"]) == h["overlap_ngrams"] for h in hits)
    _write_masks(storage, masked)
    got, want = eval_scan.kept_overlap(storage, spec), _rescan(storage, spec, set(masked))
    assert md.zero_eval_overlap(got) == md.zero_eval_overlap(want)
    assert got.overlapping_sources() == want.overlapping_sources()
    assert np.array_equal(got.tally.overlap_ngrams["web"], want.tally.overlap_ngrams["web"])


def test_a_source_the_report_did_not_scan_is_refused(tmp_path):
    spec = fx.make_spec(tmp_path)
    storage = Storage(root=str(tmp_path / "storage"))
    corpus = fx.make_corpus()
    for s in spec.sources:
        fx.write_docs(storage, s.name, corpus.docs[s.name])
    eval_scan.write_registry(storage, spec)
    only_web = spec.model_copy(update={"sources": spec.sources[:1]})
    eval_scan.write_contamination_report(storage, only_web)
    _write_masks(storage, ["web-0003", "web-0007", "web-0011", "books-0005"])
    with pytest.raises(eval_scan.AuditInputError, match=r"contamination_report.json: sources \['books'\]"):
        eval_scan.kept_overlap(storage, spec)


def _masks_missing(spec, left_out: str):
    """exclusion_masks masking every contaminated doc except `left_out`."""

    @dg.asset(key=A.EXCLUSION_MASKS_KEY, deps=[A.CONTAMINATION_REPORT_KEY])
    def exclusion_masks(mix: fx.MixResource):
        storage = mix.storage
        bad = pq.read_table(storage.local_path(layout.CONTAMINATED_DOCS)).column("doc_id").to_pylist()
        _write_masks(storage, [d for d in bad if d != left_out])
        stamp(storage, "exclusion_masks", [layout.EXCLUSION_MASKS], ["contamination_report"])

    return exclusion_masks


def _checks(result):
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_one_unmasked_contaminated_document_fails_the_gate(tmp_path):
    spec = fx.make_spec(tmp_path)
    assets = [*fx.standin_raw(spec, fx.make_corpus()), _masks_missing(spec, "books-0005"),
              *A.build_audit_assets(spec)]
    result = dg.materialize(assets, resources={"mix": fx.Res(spec)}, instance=dg.DagsterInstance.ephemeral(),
                            raise_on_error=False)
    gate = _checks(result)[A.ZERO_EVAL_OVERLAP]
    assert not gate.passed and gate.severity == dg.AssetCheckSeverity.ERROR
    assert gate.metadata["kept_contaminated_docs"].value == 1
    assert gate.metadata["kept_overlap_ngrams/books"].value > 0 and gate.metadata["kept_overlap_ngrams/web"].value == 0
    assert gate.metadata["kept_docs"].value == 100 - 3 and gate.metadata["masked_docs"].value == 3
    assert "books" in gate.description and "web" not in gate.description.split("(")[0]


def test_a_source_edited_after_the_report_is_refused(tmp_path):
    spec = fx.make_spec(tmp_path)
    corpus = fx.make_corpus()
    assets = [*fx.standins(spec, corpus), *A.build_audit_assets(spec)]
    res = fx.Res(spec)
    assert dg.materialize(assets, resources={"mix": res}, instance=dg.DagsterInstance.ephemeral()).success
    # a new contaminated document in books, written (with its lineage record) after the report ran
    docs = list(corpus.docs["books"])
    docs[9] = (docs[9][0], fx.filler(__import__("random").Random(3)) + " " + fx.EVAL_ROWS[0]["question"])
    fx.write_docs(res.storage, "books", docs)
    only_check = dg.AssetSelection.checks(dg.AssetCheckKey(A.EXCLUSION_MASKS_KEY, A.ZERO_EVAL_OVERLAP))
    result = dg.materialize(assets, resources={"mix": res}, instance=dg.DagsterInstance.ephemeral(),
                            selection=only_check, raise_on_error=False)
    assert not result.success
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure and "contamination_report" in str(failure[0].event_specific_data.error.message)
    assert not any(e.passed for e in result.get_asset_check_evaluations())
