"""stages/audit/eval_scan.py: the registry on disk, shared with the published audit, and the scans against it."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

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


# -- reuse per source and resume per chunk (core/chunks.py) ------------------------------------------------
def _raw_with_chars(storage, source: str, docs: list[tuple[str, str]]) -> None:
    """Raw documents with n_chars, so contamination_report's pass signs them for dedup_keys too."""
    t = pa.table({"doc_id": [d for d, _ in docs], "text": [t for _, t in docs], "n_chars": [len(t) for _, t in docs]})
    with storage.writing(layout.RAW_DOCS.format(source=source)) as tmp:
        pq.write_table(t, tmp, row_group_size=64)


def _scan_storage(tmp_path, name: str, books_edit: bool = False) -> Storage:
    spec = make_spec(tmp_path)
    st = Storage(root=str(tmp_path / name))
    corpus = make_corpus(n_web=300, n_books=500, near_copy=True)
    for s in spec.sources:
        docs = corpus.docs[s.name]
        if books_edit and s.name == "books":
            docs = [*docs[:-1], (docs[-1][0], docs[-1][1] + " and one more sentence")]
        _raw_with_chars(st, s.name, docs)
    eval_scan.write_registry(st, spec)
    return st


SCAN_OUTPUTS = (layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS, layout.FUZZY_REPORT, layout.FUZZY_DOCS,
                layout.DEDUP_SIGNATURES.format(source="web"), layout.DEDUP_SIGNATURES.format(source="books"))


def _outputs(st: Storage) -> dict:
    return {k: st.read_bytes(k) for k in SCAN_OUTPUTS}


def test_a_killed_scan_resumes_at_the_first_missing_chunk_and_writes_the_same_bytes(tmp_path, monkeypatch):
    """SIGKILL contamination_report's pass after 9 of 16 chunks (web's 6, then 3 of books'): the rerun reuses
    web's hits, loads books' parts (hits, fuzzy matches, signatures) and scans only books' missing chunks; the
    report, the contaminated and fuzzy-matched ids and dedup_keys' signature files equal an uninterrupted run's."""
    from mix_assets.core import engine
    from mix_assets_tests.support import killed

    spec, versions = make_spec(tmp_path), {"web": "w1", "books": "b1"}
    whole = _scan_storage(tmp_path, "whole")
    eval_scan.write_contamination_report(whole, spec, engine.Engine(num_cpus=1, chunk_rows=50), raw_versions=versions)
    assert json.loads(whole.read_text(layout.FUZZY_REPORT))["docs_matched"] > 0  # the parts carry fuzzy matches
    st, marks = _scan_storage(tmp_path, "killed"), tmp_path / "marks"
    killed.run_killed(f"""
from mix_assets.config import load_spec
from mix_assets.stages.audit import eval_scan
from mix_assets.core import engine
from mix_assets.core.storage import Storage
slowed(eval_scan, "_scan_task", {str(marks)!r})
eval_scan.write_contamination_report(Storage({st.root!r}), load_spec({str(spec.config_path)!r}),
                                     engine.Engine(num_cpus=1, chunk_rows=50), raw_versions={versions!r})
""", marks, after=9)
    parts = len(st.list("parts/contamination"))
    # 3+ after a late kill; a signature part is put before its chunk's hits part
    assert 2 <= parts < 10 and parts <= len(st.list("parts/signatures")) <= parts + 1, st.list("parts")
    counter, log = killed.Counter(eval_scan._scan_task), killed.Lines()
    monkeypatch.setattr(eval_scan, "_scan_task", counter)
    scan, _ = eval_scan.write_contamination_report(st, spec, engine.Engine(num_cpus=1, chunk_rows=50), log=log,
                                                   raw_versions=versions)
    assert counter.calls == 10 - parts  # books' missing chunks only
    assert f"contamination_report: resumed books at chunk {parts + 1} of 10 ({parts} chunks from a killed run)" \
        in log.lines, log.lines
    assert any(x.startswith("contamination_report: reused the stored hits of web (300 docs)") for x in log.lines)
    assert scan.reused_sources == ["web"] and scan.signed_sources == ["books"]
    assert _outputs(st) == _outputs(whole)
    # the per-document reuse file too: the resumed chunks' texts are keyed by the driver, the others' by their tasks
    keys = eval_scan.text_keys_key("books")
    assert st.read_bytes(keys) == whole.read_bytes(keys)
    assert st.list("parts") == []


def test_one_changed_source_rescans_only_itself(tmp_path, monkeypatch):
    """After books' raw data changes (a new version: its last document edited), contamination_report reuses web's
    stored hits and rescans, of books, only the document whose text changed (per document: the others' texts are
    those its last scan holds); its outputs equal a from-scratch scan of the changed data."""
    from mix_assets.core import engine
    from mix_assets_tests.support import killed

    spec, e = make_spec(tmp_path), engine.Engine(num_cpus=1, chunk_rows=50)
    st = _scan_storage(tmp_path, "st")
    eval_scan.write_contamination_report(st, spec, e, raw_versions={"web": "w1", "books": "b1"})
    changed = _scan_storage(tmp_path, "st", books_edit=True)  # same root: books' raw rewritten
    fresh = _scan_storage(tmp_path, "fresh", books_edit=True)
    eval_scan.write_contamination_report(fresh, spec, e, raw_versions={"web": "w1", "books": "b2"})
    counter = killed.Counter(eval_scan._scan_task)
    monkeypatch.setattr(eval_scan, "_scan_task", counter)
    scan, _ = eval_scan.write_contamination_report(changed, spec, e, raw_versions={"web": "w1", "books": "b2"})
    assert counter.calls == 1  # books' edited last document alone, none of web's 6 chunks
    assert scan.reused_sources == ["web"] and scan.signed_sources == ["books"]
    assert _outputs(changed) == _outputs(fresh)
    # another eval registry (any byte of its files) rescans every source
    counter.calls = 0
    changed.write_text(layout.EVAL_REGISTRY, changed.read_text(layout.EVAL_REGISTRY) + "\n")
    assert eval_scan.write_contamination_report(changed, spec, e, raw_versions={"web": "w1", "books": "b2"})[0] \
        .reused_sources == [] and counter.calls == 16


def _refreshed_books(tmp_path):
    """(spec, a root scanned before books was refreshed and then refreshed, a root scanned from scratch after,
    books' documents after): documents dropped from the middle, 41 new ones appended (among them a copy of an
    eval item, so a new hit), as the raw stage's sample makes a refreshed source."""
    from mix_assets.core import engine

    spec, e = make_spec(tmp_path), engine.Engine(num_cpus=1, chunk_rows=50)
    corpus = make_corpus(n_web=300, n_books=500, near_copy=True)
    before = corpus.docs["books"]
    after = [d for i, d in enumerate(before) if i % 37 != 5]  # 14 dropped, scattered (books-0005, a hit, among them)
    after += [(f"books-new-{i}", before[i * 7][1] + f" new words {i} here") for i in range(40)]
    after.append(("books-new-eval", corpus.docs["web"][3][1]))  # web-0003's text: an eval item in it

    def root(name: str, books) -> Storage:
        st = Storage(root=str(tmp_path / name))
        _raw_with_chars(st, "web", corpus.docs["web"])
        _raw_with_chars(st, "books", books)
        eval_scan.write_registry(st, spec)
        return st

    st = root("st", before)
    eval_scan.write_contamination_report(st, spec, e, raw_versions={"web": "w1", "books": "b1"})
    _raw_with_chars(st, "books", after)
    fresh = root("fresh", after)
    eval_scan.write_contamination_report(fresh, spec, e, raw_versions={"web": "w1", "books": "b2"})
    return spec, st, fresh, after


def _same_as_fresh(st: Storage, fresh: Storage) -> None:
    assert _outputs(st) == _outputs(fresh)
    for k in (layout.CONTAMINATION_HITS.format(source="books"), layout.CONTAMINATION_TEXT_KEYS.format(source="books")):
        assert pq.read_table(st.local_path(k)).equals(pq.read_table(fresh.local_path(k))), k
    assert json.loads(st.read_text(layout.CONTAMINATION_REPORT))["contaminated_docs"] > 0
    assert st.list("parts") == []


def test_new_and_dropped_documents_rescan_only_the_new_texts_and_write_a_from_scratch_scans_bytes(tmp_path, monkeypatch):
    """A refreshed source (`_refreshed_books`). The rescan maps only the new rows, the reused rows keep their hits
    (counts, fuzzy matches) and signatures under their current ids, and every output (report, contaminated and
    fuzzy ids, signature files, the hits and text keys of books) equals a from-scratch scan's."""
    from mix_assets.core import engine
    from mix_assets_tests.support import killed

    spec, st, fresh, after = _refreshed_books(tmp_path)
    counter, log = killed.Counter(eval_scan._scan_task), killed.Lines()
    monkeypatch.setattr(eval_scan, "_scan_task", counter)
    scan, _ = eval_scan.write_contamination_report(st, spec, engine.Engine(num_cpus=1, chunk_rows=50), log=log,
                                                   raw_versions={"web": "w1", "books": "b2"})
    assert counter.calls == 1  # the 41 new rows, appended: one range of at most 50
    assert f"books {len(after) - 41:,} of {len(after):,} documents" in " ".join(log.lines), log.lines
    assert scan.reused_sources == ["web"] and scan.signed_sources == ["books"]
    _same_as_fresh(st, fresh)


def test_a_rescanned_tail_is_cut_into_tasks_for_every_worker_with_the_same_bytes(tmp_path, monkeypatch):
    """The new rows of a refreshed source are one run at its tail: rescanned in tasks of at most RESCAN_ROWS rows
    (41 rows at 16: 3 tasks, on 2 threads), not one task of up to chunk_rows; the outputs are a from-scratch
    scan's (made with 1 thread and 50-row chunks)."""
    from mix_assets.core import engine
    from mix_assets_tests.support import killed

    spec, st, fresh, _ = _refreshed_books(tmp_path)
    monkeypatch.setattr(eval_scan, "RESCAN_ROWS", 16, raising=False)
    counter = killed.Counter(eval_scan._scan_task)
    monkeypatch.setattr(eval_scan, "_scan_task", counter)
    scan, _ = eval_scan.write_contamination_report(st, spec, engine.Engine(num_cpus=2, chunk_rows=50),
                                                   raw_versions={"web": "w1", "books": "b2"})
    assert counter.calls == 3
    assert scan.reused_sources == ["web"] and scan.signed_sources == ["books"]
    _same_as_fresh(st, fresh)


def test_the_registry_files_do_not_depend_on_the_thread_count(tmp_path):
    """A task of several item chunks (contamination.item_words: 4096 items a chunk) hashed on 1 and 3 threads."""
    rows = [{"question": f"question {i} about the {i % 97} {'red' if i % 2 else 'blue'} items counted in a "
                         f"long enough sentence for n-grams number {i * 7919 % 10007}",
             "choices": [f"answer {i % 13} of the row", f"another answer {i % 31}"]} for i in range(9000)]
    task = tmp_path / "evals" / "big_qa"
    task.mkdir(parents=True)
    (task / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    files = {}
    for threads in (1, 3):
        tasks = [{"name": "big_qa", "dataset": {"kind": "local", "path": str(task)}, "scored_split": "validation",
                  "audit_splits": ["validation"], "fields": ["question", "choices"], "min_rows": 4, "note": "fixture"}]
        spec = make_spec(tmp_path / f"t{threads}", tasks=tasks, threads=threads)
        st = Storage(root=str(tmp_path / f"t{threads}" / "storage"))
        written = eval_scan.write_registry(st, spec)
        files[threads] = {k: st.sha256(k) for k in written.files}
    assert files[1] == files[3] and len(files[1]) >= 4
