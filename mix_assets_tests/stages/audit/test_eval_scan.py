"""stages/audit/eval_scan.py: the registry on disk, shared with the published audit, and the scans against it."""

import numpy as np

from mix_assets.stages.audit import eval_scan
from mix_assets.core import layout
from mix_assets.stages.audit.published import denominator_problems, load_reference
from mix_assets.core.storage import Storage
from mix_assets_tests.support.audit_fixtures import make_corpus, make_spec, write_docs, write_eval_task


def test_registry_round_trip_equals_the_published_audits_reference(tmp_path):
    spec = make_spec(tmp_path)
    st = Storage(root=str(tmp_path / "storage"))
    written = eval_scan.write_registry(st, spec)
    assert written.files[0] == layout.EVAL_REGISTRY and all(st.exists(k) for k in written.files)
    reg, meta = eval_scan.load_registry(st)
    ref = load_reference(spec)  # the same hashing pass, without the files
    assert reg.tasks == ref.registry.tasks
    for name, denominators in ref.denominators.items():
        assert {k: meta["tasks"][name][k] for k in denominators} == denominators
        assert np.array_equal(eval_scan.load_npy(st, layout.EVAL_NGRAMS.format(task=name)),
                              next(r for r in eval_scan.task_references(spec) if r.name == name).ngrams.hashes)
    assert np.array_equal(eval_scan.load_npy(st, layout.EVAL_SCRUB_NGRAMS), ref.scrub)
    assert denominator_problems(written.tasks) == []
    assert [r["task"] for r in written.denominator_rows()] == list(ref.denominators)


def test_scan_finds_the_planted_copies_and_counts_every_source(tmp_path):
    spec = make_spec(tmp_path)
    st = Storage(root=str(tmp_path / "storage"))
    corpus = make_corpus()
    for s in spec.sources:
        write_docs(st, s.name, corpus.docs[s.name])
    eval_scan.write_registry(st, spec)
    scan, report = eval_scan.write_contamination_report(st, spec)
    assert scan.tally.overlap_total == report["overlap_total"] > 0
    assert set(scan.tally.docs_scanned) == {s.name for s in spec.sources}
    assert scan.contaminated.num_rows == report["contaminated_docs"]
    assert all(r["registry_ngrams"] > 0 for r in scan.rows())


def test_scrub_set_reads_the_registry_when_current_and_recomputes_otherwise(tmp_path, monkeypatch):
    from mix_assets.core import lineage

    spec = make_spec(tmp_path)
    st = Storage(root=str(tmp_path / "storage"))
    want = eval_scan.scrub_hashes(spec)
    assert np.array_equal(eval_scan.scrub_set(st, spec), want)  # no registry yet: computed
    written = eval_scan.write_registry(st, spec)
    lineage.write_record(st, "eval_registry", written.files, {})
    calls = []
    monkeypatch.setattr(eval_scan, "scrub_hashes", lambda s: calls.append(s) or want)
    assert np.array_equal(eval_scan.scrub_set(st, spec), want) and calls == []  # read back, eval items not re-hashed
    other = spec.model_copy(update={"audit": spec.audit.model_copy(update={"scrub_words": spec.audit.scrub_words + 1})})
    eval_scan.scrub_set(st, other)
    fewer = spec.model_copy(update={"audit": spec.audit.model_copy(update={"tasks": spec.audit.tasks[:-1]})})
    eval_scan.scrub_set(st, fewer)
    assert calls == [other, fewer]  # built for other settings: computed
    st.write_bytes(layout.EVAL_SCRUB_NGRAMS, eval_scan.npy_bytes(want[:-1]))
    eval_scan.scrub_set(st, spec)
    assert calls == [other, fewer, spec]  # the file is not the one its lineage record lists: computed


def test_registry_logs_one_message_with_a_line_per_task(tmp_path):
    evals = write_eval_task(tmp_path / "evals" / "demo_qa")
    tasks = [{"name": name, "dataset": {"kind": "local", "path": str(evals)}, "scored_split": "validation",
              "audit_splits": ["validation"], "fields": ["question", "choices"], "min_rows": 4, "note": "fixture"}
             for name in ("demo_qa", "demo_qa_again")]
    spec = make_spec(tmp_path, tasks=tasks)
    logged = []
    eval_scan.write_registry(Storage(root=str(tmp_path / "storage")), spec, log=logged.append)
    # each Dagster log call is one event-log write
    assert len(logged) == 1
    assert [line.split(":")[0] for line in logged[0].split("\n")] == ["eval task demo_qa", "eval task demo_qa_again"]
