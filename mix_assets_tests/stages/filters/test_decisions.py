"""stages/filters/decisions.py: decisions per document, the same bytes on every engine and chunking, reuse per
source, and the gates' findings (summarise)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.stages.filters import decisions as lib
from mix_assets.core import engine as eng
from mix_assets.stages.filters import cascade, registry
from mix_assets.stages.filters import metadata as filters_md
from mix_assets.stages.filters.rules.sanity import SanityFilter
from mix_assets_tests.support import gen_corpus as gc
from mix_assets.stages.dedup import lsh
from mix_assets.core.storage import Storage
from mix_assets_tests.support.multilingual import SAMPLES
from mix_assets_tests.support import killed
from mix_assets_tests.support.shared_data import FIXTURE

PARAMS = lib.FilterParams(cascade.FilterConfig(sanity=SanityFilter(enabled=False)), ("en",), 0.65, 2000, True)


@lru_cache(maxsize=None)
def _texts() -> list[str]:
    model = gc.MarkovModel.from_files(sorted((FIXTURE / "sources").glob("*/*.txt")), order=1)
    good = gc.generate(model, 300, seed=5).texts
    planted = ["Too short to keep.", SAMPLES["fr"][2] + " " + SAMPLES["fr"][2], "\n".join(["same line again"] * 40)]
    return [t for pair in zip(good, planted * 100) for t in pair][:400]


def write_source(folder, name: str, texts: list[str], row_group_size: int = 70) -> str:
    path = str(folder / f"{name}.parquet")
    pq.write_table(pa.table({"doc_id": [f"{name}-{i:05d}" for i in range(len(texts))], "text": texts,
                             "n_chars": [len(t) for t in texts], "n_bytes": [len(t.encode()) for t in texts]}),
                   path, row_group_size=row_group_size)
    return path


def test_every_document_gets_its_first_failing_rule_and_a_language(tmp_path):
    path = write_source(tmp_path, "web", _texts()[:6])
    t = lib.decide_chunk(lib.FilterChunk("web", eng.row_ranges(path, 100)[0], PARAMS))
    assert t.schema == lib.DECISIONS_SCHEMA and t.num_rows == 6
    rows = t.to_pylist()
    # the reason is the first failing rule in cascade order; every failing filter's first rule is kept
    assert rows[1]["rules"][:2] == ["gopher_repetition:top_2_gram", "gopher_quality:min_doc_words"]
    assert rows[3]["rules"][-1] == "language:fr" and rows[3]["reason"] == rows[3]["rules"][0]
    assert rows[3]["language"] == "fr" and rows[3]["language_score"] > 0.65  # recorded on rejected documents too
    assert rows[5]["reason"] == "gopher_repetition:dup_line_frac" and rows[5]["rules"][-1] == "language_score"
    assert [r["keep"] for r in rows] == [True, False] * 3
    assert all(r["keep"] == (r["reason"] is None) == (r["rules"] == []) for r in rows)
    # language recorded but not a reason when only identification runs
    off = lib.FilterParams(PARAMS.config, None, 0.65, 2000, False)
    t2 = lib.decide_chunk(lib.FilterChunk("web", eng.row_ranges(path, 100)[0], off))
    assert t2.column("language").to_pylist() == t.column("language").to_pylist()
    assert not any(r.startswith("language") for rs in t2.column("rules").to_pylist() for r in rs)


def test_null_text_names_file_row_and_field(tmp_path):
    path = str(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"doc_id": ["a", "b"], "text": ["fine text", None], "n_chars": [9, 0], "n_bytes": [9, 0]}),
                   path)
    with pytest.raises(lib.FilterInputError, match=r"bad.parquet: row 1: field 'text' is null \(source web\)"):
        lib.decide_chunk(lib.FilterChunk("web", eng.row_ranges(path, 10)[0], PARAMS))


def _decide(tmp_path, sources, engine, params=None, versions=None, out="s") -> tuple[dict, list]:
    storage = Storage(root=str(tmp_path / out))
    params = params or {n: PARAMS for n in sources}
    reused = lib.decide_sources(storage, sources, versions or {n: "v1" for n in sources}, params, engine)
    return {n: storage.read_bytes(lib.decisions_key(n)) for n in sources}, reused


def test_decisions_bytes_do_not_depend_on_workers_or_chunk_rows(tmp_path):
    texts = _texts()
    sources = {"a": write_source(tmp_path, "a", texts[:230]), "b": write_source(tmp_path, "b", texts[230:])}
    want, _ = _decide(tmp_path, sources, eng.Engine(num_cpus=1), out="one")
    for k, e in enumerate((eng.Engine(num_cpus=2), eng.Engine(num_cpus=2, chunk_rows=37))):
        assert _decide(tmp_path, sources, e, out=f"e{k}")[0] == want, e


def test_a_changed_override_re_runs_only_its_source(tmp_path):
    texts = _texts()[:60]
    sources = {"a": write_source(tmp_path, "a", texts), "b": write_source(tmp_path, "b", texts)}
    first, reused = _decide(tmp_path, sources, eng.Engine(num_cpus=1))
    assert reused == []
    assert _decide(tmp_path, sources, eng.Engine(num_cpus=1))[1] == ["a", "b"]
    looser = lib.FilterParams(cascade.FilterConfig.only("gopher_repetition"), ("en",), 0.65, 2000, True)
    again, reused = _decide(tmp_path, sources, eng.Engine(num_cpus=1), params={"a": PARAMS, "b": looser})
    assert reused == ["a"] and again["a"] == first["a"] and again["b"] != first["b"]
    # a new raw version of a re-runs a alone
    assert _decide(tmp_path, sources, eng.Engine(num_cpus=1), params={"a": PARAMS, "b": looser},
                   versions={"a": "v2", "b": "v1"})[1] == ["b"]


def _decisions(keep, langs, n_chars, rules=None) -> pa.Table:
    n = len(keep)
    rules = rules or [[] if k else ["gopher_quality:min_doc_words"] for k in keep]
    return pa.table({"doc_id": [f"d{i}" for i in range(n)], "keep": keep,
                     "reason": [rs[0] if rs else None for rs in rules], "rules": rules, "language": langs,
                     "language_score": [0.9] * n, "n_chars": n_chars, "n_bytes": n_chars}, schema=lib.DECISIONS_SCHEMA)


def test_no_domain_vanished_finds_a_deleted_length_bucket_and_ignores_small_domains():
    # 40 short documents (all rejected) in a pool of 200: 20 % of the documents, none kept
    keep = [False] * 40 + [True] * 160
    t = _decisions(keep, ["en"] * 200, [120] * 40 + [3000] * 160)
    guard = lib.Guard(min_share=0.05, min_kept=0.2, active={"web": ["gopher_quality"]})
    s = lib.summarise({"web": t}, guard)
    assert [(d["kind"], d["domain"]) for d in s.vanished] == [("length_bucket", "< 200 chars")]
    # the same deletion in a bucket holding under min_share of the documents is not a vanished domain
    s = lib.summarise({"web": t}, lib.Guard(min_share=0.25, min_kept=0.2, active={"web": ["gopher_quality"]}))
    assert s.vanished == []
    kills = {k["filter"]: k for k in s.kills}
    assert kills["gopher_quality"]["failed_docs"] == 40 and kills["gopher_quality"]["kill_share"] == 0.2


def test_kill_rate_expectation_and_brevity_findings():
    keep = [False] * 30 + [True] * 70
    rules = [["gopher_quality:min_doc_words", "language:fr"]] * 30 + [[]] * 70
    t = _decisions(keep, ["en"] * 100, [100] * 40 + [2000] * 60, rules)
    guard = lib.Guard(active={"web": ["gopher_quality", "language"]}, brevity_chars={"web": 200},
                      brevity_warn={"web": 0.5}, max_kill_rate={("web", "gopher_quality"): 0.25})
    s = lib.summarise({"web": t}, guard)
    assert [(k["filter"], k["first_failure_docs"]) for k in s.over_expected] == [("gopher_quality", 30)]
    lang = next(k for k in s.kills if k["filter"] == "language")
    assert lang["failed_docs"] == 30 and lang["first_failure_docs"] == 0  # on its own vs first failure
    assert [(b["rule"], b["short_docs"], b["removed_docs"]) for b in s.brevity_killed] == [
        ("gopher_quality:min_doc_words", 40, 30)]
    assert lib.summarise({"web": t}, lib.Guard(active=guard.active, brevity_warn={"web": 0.8})).brevity_killed == []


def test_below_keep_share_compares_kept_bytes_with_the_share_the_raw_sample_assumed():
    # web: the first 30 of 100 documents rejected (100 bytes each) -> kept 8,200 of 11,200 bytes
    t = _decisions([False] * 30 + [True] * 70, ["en"] * 100, [100] * 40 + [120] * 60)
    other = _decisions([True] * 10, ["en"] * 10, [50] * 10)
    s = lib.summarise({"web": t, "books": other}, lib.Guard(active={"web": ["gopher_quality"], "books": []}))
    rows, below = lib.below_keep_share(s, {"web": 0.8, "books": 0.9})
    assert [(r["source"], r["bytes_before"], r["bytes_after"]) for r in rows] == [("books", 500, 500), ("web", 11200, 8200)]
    assert [r["source"] for r in below] == ["web"]  # 73.2 % < 80 %
    assert lib.below_keep_share(s, {"web": 0.7})[1] == []
    assert lib.below_keep_share(s, {})[1] == []  # the default 1.0 assumes nothing: headroom covers small drops


def test_samples_skip_contaminated_documents_and_scrub_eval_text():
    t = _decisions([False, False, True, True], ["en"] * 4, [10, 10, 10, 10])
    picked = lib.pick_samples({"web": t}, 5, never={"d0"})
    assert [p[1] for p in picked] == ["gopher_quality", "kept", "kept"]
    assert [p[2] for p in picked][0] == "d1" and sorted(p[2] for p in picked) == ["d1", "d2", "d3"]
    from mix_assets.stages.audit import contamination as ct
    item = "the quick brown fox jumps over the lazy dog near the old mill today"
    scrub = ct.scrub_ngrams([item], 8)
    rows, withheld = filters_md.sample_rows([("web", "kept", "d2", "")], {"d2": f"Intro words. {item}. Outro."}, scrub, 8)
    assert "quick brown fox jumps over the lazy dog" not in rows[0]["text"] and withheld == 0


def test_a_rejected_document_never_survives_a_cluster_with_a_kept_one():
    # two near-identical texts; the rejected one is longer, so without demotion it would be kept
    rng = np.random.default_rng(0)
    words = [f"w{int(x)}" for x in rng.integers(0, 5000, 200)]
    a, b = " ".join(words), " ".join(words + ["extra", "words"])
    from mix_assets.stages.dedup import minhash as mh
    signed = mh.sign_texts(pa.array([a, b]), 128, 5, mh.DEFAULT_SEED)
    args = (["good", "bad"], signed.exact_keys, signed.signatures, signed.n_shingles, np.array([len(a), len(b)]),
            np.zeros(2, np.int64), 16, 8, 0.8)
    assert lsh.dedup(*args).keep.tolist() == [False, True]
    res = lsh.dedup(*args, demoted=np.array([False, True]))
    assert res.keep.tolist() == [True, False] and res.kept_index.tolist() == [0, 0]
    # a cluster of rejected documents only still keeps one (clusters stay consistent)
    assert lsh.dedup(*args, demoted=np.array([True, True])).keep.tolist() == [False, True]


def _generated_decisions(tmp_path) -> tuple[Storage, dict]:
    """Real decisions of two generated sources (../mix_assets_tests/support/gen_corpus.py prose, planted short, French and repetitive
    documents), stored as decide_sources writes them: {source: its table}."""
    model = gc.MarkovModel.from_files(sorted((FIXTURE / "sources").glob("*/*.txt")), order=2)
    texts = gc.generate(model, 900, seed=11).texts
    planted = ["Too short.", SAMPLES["fr"][2], "\n".join(["same line again"] * 30), SAMPLES["de"][1], "{ }\n" * 12]
    mixed = [t for i, t in enumerate(texts) for t in ([t, planted[i % 5]] if i % 3 == 0 else [t])]
    sources = {"a": write_source(tmp_path, "a", mixed[:700]), "b": write_source(tmp_path, "b", mixed[700:])}
    storage = Storage(root=str(tmp_path / "gen"))
    lib.decide_sources(storage, sources, {n: "v1" for n in sources}, {n: PARAMS for n in sources}, eng.Engine(num_cpus=2))
    return storage, lib.read_decisions(storage, sources)


GUARD = lib.Guard(min_share=0.05, min_kept=0.9, length_buckets=[300, 1500, 4000], brevity_chars={"a": 400, "b": 150},
                  brevity_warn={"a": 0.1}, max_kill_rate={("a", "gopher_repetition"): 0.01},
                  active={"a": [*registry.names()[1:], "language"], "b": ["gopher_quality", "c4", "language"]})


def test_summary_and_samples_match_the_per_document_reference_a_row_group_at_a_time(tmp_path):
    from mix_assets_tests.oracles import decisions_reference as ref

    storage, dec = _generated_decisions(tmp_path)
    assert all(t.num_rows > 100 for t in dec.values()) and sum(not k for t in dec.values()
                                                                 for k in t.column("keep").to_pylist()) > 100
    # the same decisions in row groups of 37 rows: the aggregates and the top-k merge across groups
    small = Storage(root=str(tmp_path / "small"))
    for n, t in dec.items():
        (tmp_path / "small" / "filters" / "decisions").mkdir(parents=True, exist_ok=True)
        pq.write_table(t, str(tmp_path / "small" / lib.decisions_key(n)), row_group_size=37)
    want = ref.summarise(dec, GUARD)
    assert want.vanished and want.over_expected and want.brevity_killed  # every finding has rows to compare
    for st in (storage, small):
        got = lib.summarise_stored(st, list(dec), GUARD)
        assert lib.report_json(got) == lib.report_json(want)
        assert got == want  # findings too (vanished, over_expected, brevity_killed, documents, kept)
    assert lib.summarise(dec, GUARD) == want
    never = set(dec["a"].column("doc_id").to_pylist()[::4])
    for k in (1, 3, 7):
        want_picks = ref.pick_samples(dec, k, never)
        assert {p[1] for p in want_picks} >= {"kept", "gopher_quality", "gopher_repetition", "c4"}
        assert lib.pick_stored(small, list(dec), k, never) == want_picks
        assert lib.pick_stored(storage, list(dec), k, never) == lib.pick_samples(dec, k, never) == want_picks


class _Lines:
    def __init__(self):
        self.lines: list[str] = []

    def info(self, msg: str) -> None:
        self.lines.append(msg)


def test_reused_decisions_log_what_was_reused_not_a_progress_line_of_zeros(tmp_path):
    texts = _texts()[:60]
    sources = {"a": write_source(tmp_path, "a", texts), "b": write_source(tmp_path, "b", texts[:25])}
    storage = Storage(root=str(tmp_path / "s"))
    versions, params = {n: "v1" for n in sources}, {n: PARAMS for n in sources}
    first = _Lines()
    lib.decide_sources(storage, sources, versions, params, eng.Engine(num_cpus=1), log=first)
    assert first.lines[-1].startswith("document_filters: 85/85 docs")  # computed: the progress line
    again = _Lines()
    assert lib.decide_sources(storage, sources, versions, params, eng.Engine(num_cpus=1), log=again) == ["a", "b"]
    assert again.lines == ["document_filters: reused the stored decisions of a (60 docs), b (25 docs): 85 docs not "
                           "recomputed (raw data, filter parameters and code unchanged)"], again.lines
    # one source changed: the reused one is named, the progress line counts only the recomputed one
    part = _Lines()
    lib.decide_sources(storage, sources, {"a": "v2", "b": "v1"}, params, eng.Engine(num_cpus=1), log=part)
    assert part.lines[0].startswith("document_filters: reused the stored decisions of b (25 docs): 25 docs"), part.lines
    assert part.lines[-1].startswith("document_filters: 60/60 docs"), part.lines


def test_a_killed_run_resumes_at_the_first_missing_chunk_and_writes_the_same_bytes(tmp_path, monkeypatch):
    """SIGKILL decide_sources after 13 of 18 chunks (a's 10, then 3 of b's): the rerun reuses a's file, loads
    b's parts and decides only b's missing chunks; both files equal an uninterrupted run's, no part is left."""
    texts = _texts()
    sources = {"a": write_source(tmp_path, "a", texts[:200]), "b": write_source(tmp_path, "b", texts[200:360])}
    versions = {n: "v1" for n in sources}
    want, _ = _decide(tmp_path, sources, eng.Engine(num_cpus=1, chunk_rows=20), out="whole")
    root, marks = tmp_path / "killed", tmp_path / "marks"
    killed.run_killed(f"""
from mix_assets.stages.filters import decisions as lib
from mix_assets.core import engine
from mix_assets.core.storage import Storage
from mix_assets_tests.stages.filters.test_decisions import PARAMS
slowed(lib, "decide_chunk", {str(marks)!r})
lib.decide_sources(Storage(root={str(root)!r}), {sources!r}, {versions!r}, {{n: PARAMS for n in {sources!r}}},
                   engine.Engine(num_cpus=1, chunk_rows=20))
""", marks, after=13)
    storage = Storage(root=str(root))
    parts = len(storage.list("parts/filters"))
    assert 2 <= parts < 8, f"{parts} chunk parts after 3 of b's chunks were decided"  # 3+: a late kill
    counter, log = killed.Counter(lib.decide_chunk), killed.Lines()
    monkeypatch.setattr(lib, "decide_chunk", counter)
    assert lib.decide_sources(storage, sources, versions, {n: PARAMS for n in sources},
                              eng.Engine(num_cpus=1, chunk_rows=20), log=log) == ["a"]
    assert counter.calls == 8 - parts  # only b's missing chunks
    assert f"document_filters: resumed b at chunk {parts + 1} of 8 ({parts} chunks from a killed run)" in log.lines
    assert {n: storage.read_bytes(lib.decisions_key(n)) for n in sources} == want
    assert storage.list("parts/filters") == []
