"""lib/audit.py: the registry on disk, shared with the published audit, and the scans against it."""

import numpy as np

from mix_assets.lib import audit, layout
from mix_assets.lib.published_audit import denominator_problems, load_reference
from mix_assets.lib.storage import Storage
from mix_assets_tests.support.audit_fixtures import make_corpus, make_spec, write_docs


def test_registry_round_trip_equals_the_published_audits_reference(tmp_path):
    spec = make_spec(tmp_path)
    st = Storage(root=str(tmp_path / "storage"))
    written = audit.write_registry(st, spec)
    assert written.files[0] == layout.EVAL_REGISTRY and all(st.exists(k) for k in written.files)
    reg, meta = audit.load_registry(st)
    ref = load_reference(spec)  # the same hashing pass, without the files
    assert reg.tasks == ref.registry.tasks
    for name, denominators in ref.denominators.items():
        assert {k: meta["tasks"][name][k] for k in denominators} == denominators
        assert np.array_equal(audit.load_npy(st, layout.EVAL_NGRAMS.format(task=name)),
                              next(r for r in audit.task_references(spec) if r.name == name).ngrams.hashes)
    assert np.array_equal(audit.load_npy(st, layout.EVAL_SCRUB_NGRAMS), ref.scrub)
    assert denominator_problems(written.tasks) == []
    assert [r["task"] for r in written.denominator_rows()] == list(ref.denominators)


def test_scan_finds_the_planted_copies_and_counts_every_source(tmp_path):
    spec = make_spec(tmp_path)
    st = Storage(root=str(tmp_path / "storage"))
    corpus = make_corpus()
    for s in spec.sources:
        write_docs(st, s.name, corpus.docs[s.name])
    audit.write_registry(st, spec)
    scan, report = audit.write_contamination_report(st, spec)
    assert scan.tally.overlap_total == report["overlap_total"] > 0
    assert set(scan.tally.docs_scanned) == {s.name for s in spec.sources}
    assert scan.contaminated.num_rows == report["contaminated_docs"]
    assert all(r["registry_ngrams"] > 0 for r in scan.rows())
