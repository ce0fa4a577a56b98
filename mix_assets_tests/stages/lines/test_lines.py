"""line_dedup on tiny generated data: a planted boilerplate line removed from every document and counted, a line
under min_docs kept, a document dropped when too little remains (and excluded with its reason), the same bytes
for 1 and 2 workers and any chunking, and a second run reusing the keyed artifact."""

from __future__ import annotations

import json
import random

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.config import load_spec
from mix_assets.core import engine, layout, tables
from mix_assets.core.storage import Storage
from mix_assets.resources import MixResource
from mix_assets.stages.dedup import dedup as dedup_lib
from mix_assets.stages.lines import assets as line_assets
from mix_assets.stages.lines import lines as lib
from mix_assets.stages.sources.assets import build_source_assets
from mix_assets_tests.conftest import minimal_config, source, write_config

BOILER = "Subscribe to our newsletter for weekly updates and offers."
RARE = "This rare sentence is shared by only three documents."
WORDS = ("river stone market lantern harvest copper meadow orchard bridge signal quiet amber winter garden "
         "ladder thunder pocket velvet canyon mirror").split()


def _line(r: random.Random, k: int) -> str:
    return " ".join(r.choice(WORDS) for _ in range(k)).capitalize() + f" {r.randrange(10**9)}."


def corpus(n: int = 40, seed: int = 5) -> dict[str, list[str]]:
    """Two sources: every document has unique lines; BOILER in 12 + 12 of them, RARE in 3, and one document
    ("web" #0) that is BOILER and a few words only (dropped when min_kept_share is 0.5)."""
    r = random.Random(seed)
    out = {}
    for s in ("web", "forum"):
        docs = []
        for i in range(n):
            lines = [_line(r, 12) for _ in range(4)]
            if i < 12:
                lines.insert(r.randrange(len(lines) + 1), BOILER)
            if s == "web" and i in (20, 21, 22):
                lines.append(RARE)
            docs.append("\n".join(lines))
        out[s] = docs
    out["web"][0] = BOILER + "\nShort tail."
    return out


def _docs_file(path, texts: list[str], source: str) -> None:
    from mix_assets.stages.sources.sources import DOC_SCHEMA
    nb = [len(t.encode()) for t in texts]
    pq.write_table(pa.table({"doc_id": [f"{source}-{i}" for i in range(len(texts))], "source": [source] * len(texts),
                             "text": texts, "row_index": list(range(len(texts))), "origin": [f"f:{i}" for i in range(len(texts))],
                             "n_bytes": nb, "n_chars": [len(t) for t in texts], "est_tokens": [max(1, b // 4) for b in nb]},
                            schema=DOC_SCHEMA), path)


def _run_lib(tmp_path, eng: engine.Engine, params=lib.LineParams(min_docs=5, min_kept_share=0.5), skip=()):
    tmp_path.mkdir(parents=True, exist_ok=True)
    storage = Storage(root=str(tmp_path / "storage"))
    files = {}
    for s, texts in corpus().items():
        p = tmp_path / f"{s}.parquet"
        _docs_file(p, texts, s)
        files[s] = engine.FileAt(str(p))
    res = lib.dedup_lines(storage, files, {s: "v1" for s in files}, params, list(skip), eng, samples=5)
    return storage, res


def _docs(storage, s: str) -> pa.Table:
    return pq.read_table(storage.source(layout.LINE_DOCS.format(source=s)))


def test_a_planted_boilerplate_line_is_removed_from_every_document_and_counted(tmp_path):
    storage, res = _run_lib(tmp_path, engine.Engine(num_cpus=1, chunk_rows=16))
    for s in ("web", "forum"):
        t = _docs(storage, s)
        texts = t.column("text").to_pylist()
        assert not any(BOILER in x for x in texts)
        assert sum(t.column("removed_lines").to_pylist()) == 12
        row = next(r for r in res.sources if r["source"] == s)
        assert row["removed_lines"] == 12 and row["modified_docs"] == 12
        # documents that held no frequent line are byte for byte raw's
        raw = corpus()[s]
        assert [x for x, n in zip(texts, t.column("removed_lines").to_pylist()) if n == 0] == \
               [x for x in raw if BOILER not in x]
        assert t.column("n_bytes").to_pylist() == [len(x.encode()) for x in texts]
    assert res.top[0]["line"] == BOILER and res.top[0]["docs"] == 24
    report = json.loads(storage.read_text(layout.LINE_REPORT))
    assert report["frequent"] == 1 and {r["source"] for r in report["sources"]} == {"web", "forum"}


def test_a_line_in_fewer_than_min_docs_documents_stays(tmp_path):
    storage, _ = _run_lib(tmp_path, engine.Engine(num_cpus=1))
    assert sum(RARE in x for x in _docs(storage, "web").column("text").to_pylist()) == 3
    # with min_docs 3 it goes
    storage, _ = _run_lib(tmp_path / "b", engine.Engine(num_cpus=1), lib.LineParams(min_docs=3, min_kept_share=0.5))
    assert not any(RARE in x for x in _docs(storage, "web").column("text").to_pylist())


def test_a_document_left_with_too_little_is_dropped_and_excluded_with_its_reason(tmp_path):
    storage, res = _run_lib(tmp_path, engine.Engine(num_cpus=1))
    t = _docs(storage, "web")
    assert t.column("dropped").to_pylist() == [True] + [False] * (t.num_rows - 1)
    assert t.column("text")[0].as_py() == "Short tail."
    assert next(r for r in res.sources if r["source"] == "web")["dropped_docs"] == 1

    class Spec:  # what lines.dropped reads of a mix spec
        line_dedup = type("LD", (), {"skip": []})()
        sources = [type("S", (), {"name": n})() for n in ("web", "forum")]

    ids, reasons = lib.with_dropped(None, storage, Spec())
    assert ids.to_pylist() == ["web-0"] and reasons.to_pylist() == [lib.DROP_REASON]
    # a document the filters rejected keeps their reason, once
    both = lib.with_dropped((pa.array(["web-0", "forum-3"]), pa.array(["c4:curly_bracket", "c4:curly_bracket"])),
                            storage, Spec())
    assert both[0].to_pylist() == ["web-0", "forum-3"]
    rej = dedup_lib.Rejections.of(*lib.with_dropped(None, storage, Spec()))
    assert rej.reasons == [lib.DROP_REASON]


def test_the_same_bytes_for_one_and_two_workers_and_any_chunking(tmp_path):
    a, ra = _run_lib(tmp_path / "a", engine.Engine(num_cpus=1, chunk_rows=1000))
    b, rb = _run_lib(tmp_path / "b", engine.Engine(num_cpus=2, chunk_rows=3))
    for key in [layout.LINE_FREQUENT, layout.LINE_REPORT, *(layout.LINE_DOCS.format(source=s) for s in ("web", "forum"))]:
        assert a.sha256(key) == b.sha256(key), key
    assert ra == rb


def test_chunks_follow_row_groups_and_give_the_bytes_of_the_fixed_cut(tmp_path, monkeypatch):
    """lines.group_ranges: whole row groups together while they fit in chunk_rows, a larger group cut; the files
    are the bytes engine.row_ranges' fixed cut (the cut before it) gives, on raw files of several row groups."""
    path = tmp_path / "g.parquet"
    t = pq.read_table(_write_one(tmp_path / "one.parquet"))
    with pq.ParquetWriter(path, t.schema) as w:
        for a, b in [(0, 3), (3, 5), (5, 17), (17, 40)]:
            w.write_table(t.slice(a, b - a))
    cuts = [(r.start, r.stop) for r in lib.group_ranges(engine.FileAt(str(path)), 8)]
    assert cuts == [(0, 5), (5, 13), (13, 17), (17, 25), (25, 33), (33, 40)]
    assert [(r.start, r.stop) for r in lib.group_ranges(engine.FileAt(str(path)), 100)] == [(0, 40)]

    def run(root, ranges):
        monkeypatch.setattr(lib, "group_ranges", ranges)
        storage = Storage(root=str(root))
        lib.dedup_lines(storage, {"web": engine.FileAt(str(path))}, {"web": "v1"},
                        lib.LineParams(min_docs=5, min_kept_share=0.5), [], engine.Engine(num_cpus=1, chunk_rows=8))
        return storage

    new = run(tmp_path / "new", lib.group_ranges)
    old = run(tmp_path / "old", lambda f, n: engine.row_ranges(f, n))
    for key in [layout.LINE_FREQUENT, layout.LINE_REPORT, layout.LINE_DOCS.format(source="web")]:
        assert new.sha256(key) == old.sha256(key), key


def test_the_documents_file_is_lz4_with_the_content_of_the_project_writer(tmp_path, monkeypatch):
    """lines.DOCS_WRITER_OPTIONS (LZ4, cheaper to write and read than zstd): the same table as the project's
    writer (tables.WRITER_OPTIONS, the options before) gives, row groups included; the other files keep theirs."""
    lz4, _ = _run_lib(tmp_path / "lz4", engine.Engine(num_cpus=1, chunk_rows=8))
    monkeypatch.setattr(lib, "DOCS_WRITER_OPTIONS", dict(tables.WRITER_OPTIONS))
    zstd, _ = _run_lib(tmp_path / "zstd", engine.Engine(num_cpus=1, chunk_rows=8))
    for s in ("web", "forum"):
        key = layout.LINE_DOCS.format(source=s)
        a, b = pq.ParquetFile(lz4.source(key)), pq.ParquetFile(zstd.source(key))
        assert a.metadata.row_group(0).column(2).compression.startswith("LZ4")
        assert b.metadata.row_group(0).column(2).compression == "ZSTD"
        assert a.read().equals(b.read()) and a.schema_arrow.equals(b.schema_arrow, check_metadata=True)
        assert a.metadata.num_row_groups == b.metadata.num_row_groups
    assert lz4.sha256(layout.LINE_FREQUENT) == zstd.sha256(layout.LINE_FREQUENT)


@pytest.mark.parametrize("rows,cuts", [(3000, [1, 700, 1024, 1100, 2047, 2049, 4500]), (1024, [5, 6, 2000, 3333]),
                                       (5000, [])])
def test_aligned_groups_write_the_bytes_of_groups_joined_into_one_chunk(rows, cuts):
    """lines.aligned_groups keeps the removal's chunks as they are (no copy of the group) where they start on
    a multiple of the writer's batch, which gives the bytes of the group joined into one chunk (the old
    regroup's); parts cut anywhere else, written as they come, give other bytes (why the boundaries are joined)."""
    import io

    r = random.Random(4)
    texts = ["\n".join(_line(r, r.randint(3, 30)) for _ in range(r.randint(5, 20))) for _ in range(4200)]  # pages (1 MB) fill
    t = pa.table({"doc_id": [str(i) for i in range(len(texts))], "text": texts, "n": list(range(len(texts)))})
    pts = [0, *cuts, t.num_rows]
    parts = [t.slice(a, b - a).combine_chunks() for a, b in zip(pts, pts[1:]) if b > a]

    def written(groups) -> bytes:
        out = io.BytesIO()
        with pq.ParquetWriter(out, t.schema, **lib.DOCS_WRITER_OPTIONS) as w:
            for g in groups:
                w.write_table(g, row_group_size=rows)
        return out.getvalue()

    joined = [t.slice(a, rows).combine_chunks() for a in range(0, t.num_rows, rows)]
    got = list(lib.aligned_groups(iter(parts), rows, t.schema))
    assert [g.num_rows for g in got] == [g.num_rows for g in joined]
    assert written(got) == written(joined)
    if any(c % lib.WRITE_BATCH_ROWS for c in cuts):
        as_they_come = [pa.concat_tables(parts).slice(a, rows) for a in range(0, t.num_rows, rows)]
        assert written(as_they_come) != written(joined)
    assert list(lib.aligned_groups(iter([]), rows, t.schema))[0].num_rows == 0


def _write_one(path):
    _docs_file(path, corpus()["web"], "web")
    return path


def test_reduce_counts_is_independent_of_order_and_cut():
    r = np.random.default_rng(0)
    parts = [(np.unique(r.integers(0, 50, 20).astype(np.uint64)), None) for _ in range(6)]
    parts = [(h, r.integers(1, 4, len(h)).astype(np.int64)) for h, _ in parts]
    h1, d1 = lib.reduce_counts(parts)
    h2, d2 = lib.reduce_counts(parts[::-1])
    assert (h1 == h2).all() and (d1 == d2).all() and (np.diff(h1.astype(np.float64)) > 0).all()
    whole = {}
    for h, d in parts:
        for x, y in zip(h.tolist(), d.tolist()):
            whole[x] = whole.get(x, 0) + y
    assert dict(zip(h1.tolist(), d1.tolist())) == whole


def test_a_line_counts_once_per_document():
    h, d = lib.count_lines(pa.array([f"{BOILER}\n{BOILER}\n  {BOILER}  ", "other"]), 1)
    assert sorted(d.tolist()) == [1, 1]


def test_a_skipped_source_is_counted_but_not_rewritten(tmp_path):
    storage, res = _run_lib(tmp_path, engine.Engine(num_cpus=1), skip=["forum"])
    assert not storage.exists(layout.LINE_DOCS.format(source="forum"))
    assert next(r for r in res.sources if r["source"] == "forum")["skipped"]
    assert res.top[0]["docs"] == 24  # forum's 12 still count


def test_null_text_names_file_row_and_field(tmp_path):
    p = tmp_path / "x.parquet"
    pq.write_table(pa.table({"doc_id": ["a", "b"], "text": pa.array(["x", None], pa.large_string())}), p)
    with pytest.raises(lib.LineInputError, match=r"x.parquet: row 1: field 'text' is null"):
        lib.count_chunk(lib.CountChunk("s", engine.RowRange(str(p), 0, 2), 1))


# -- in the graph -------------------------------------------------------------------------------------------
def generated_config(tmp_path, **line_dedup) -> str:
    """A generated two-source mix with `line_dedup:` on (the generated test config of issue 30)."""
    data_dir = tmp_path / "data"
    data_dir.mkdir(exist_ok=True)
    srcs = []
    for s, texts in corpus().items():
        (data_dir / f"{s}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        srcs.append(source(s, {"kind": "jsonl", "paths": [str(data_dir / f"{s}.jsonl")]}, share=0.5))
    cfg = minimal_config(sources=srcs, target_tokens=5000, headroom=1.1,
                         line_dedup={"min_docs": 5, "min_kept_share": 0.5, **line_dedup},
                         audit={"mask_contaminated": False, "tasks": []})
    cfg["storage"] = {"root": str(tmp_path / "storage"), "cache_dir": str(tmp_path / "cache")}
    return str(write_config(tmp_path, cfg))


def _materialize(spec, instance):
    from mix_assets.stages.dedup.assets import build_dedup_assets
    assets = [*build_source_assets(spec), *line_assets.build_line_assets(spec), *build_dedup_assets(spec)]
    return dg.materialize(assets, resources={"mix": MixResource(config_path=spec.config_path)}, instance=instance,
                          raise_on_error=False)


def test_in_the_graph_the_dropped_document_is_masked_and_a_second_run_reuses(tmp_path):
    spec = load_spec(generated_config(tmp_path, max_lost_share=0.03))
    inst = dg.DagsterInstance.ephemeral()
    res = _materialize(spec, inst)
    assert res.success, [e.message for e in res.all_events if e.is_failure]
    mat = {m.asset_key.to_user_string(): m for m in res.get_asset_materialization_events()}
    md = mat["line_dedup"].materialization.metadata
    storage = Storage(root=str(tmp_path / "storage"))
    for s in ("web", "forum"):  # raw/<source> is a sample: count the planted line there
        raw = pq.read_table(storage.source(layout.RAW_DOCS.format(source=s))).column("text").to_pylist()
        assert md[f"removed_lines/{s}"].value == sum(BOILER in t for t in raw) > 0
        assert not any(BOILER in t for t in _docs(storage, s).column("text").to_pylist())
        short = sum(t.startswith(BOILER + "\nShort tail") for t in raw)
        assert md[f"dropped_docs/{s}"].value == short
    assert md["dropped_docs/web"].value == 1
    checks = {c.check_name: c for c in res.get_asset_check_evaluations()}
    assert not checks[line_assets.LINES_LOST_WITHIN_SHARE].passed  # each source lost > 3 % of its bytes: WARN
    masks = pq.read_table(storage.source(layout.EXCLUSION_MASKS)).to_pylist()
    assert any(lib.DROP_REASON in json.dumps(m) and "web-" in json.dumps(m) for m in masks)
    again = _materialize(spec, inst)
    assert again.success
    md2 = {m.asset_key.to_user_string(): m for m in again.get_asset_materialization_events()}["line_dedup"]
    assert "reused" in md2.materialization.metadata


def test_without_a_line_dedup_section_there_is_no_asset_and_the_config_dump_is_unchanged(tmp_path):
    spec = load_spec(generated_config(tmp_path))
    off = spec.model_copy(update={"line_dedup": None})
    assert line_assets.build_line_assets(off) == [] and lib.modified_sources(off) == []
    assert '"line_dedup":' not in off.canonical_json() and '"line_dedup":' in spec.canonical_json()


def test_a_run_killed_in_the_removal_map_resumes_without_counting_or_rewriting_a_finished_source(tmp_path, monkeypatch):
    """Killed in forum's removal (web's documents file written): the rerun takes every count from its part,
    keeps web's file (same inputs, its metadata says so), redoes forum's removal from raw (the removal map
    stores no part) and writes the bytes of an uninterrupted run; nothing is left under parts/."""
    clean, _ = _run_lib(tmp_path / "clean", engine.Engine(num_cpus=1, chunk_rows=8))
    real_apply, real_count = lib.apply_chunk, lib.count_chunk
    calls = {"apply": [], "count": 0}

    def dying(chunk, *a):
        if chunk.source == "forum" and chunk.rows.start >= 16:
            raise KeyboardInterrupt("killed")
        return real_apply(chunk, *a)

    monkeypatch.setattr(lib, "apply_chunk", dying)
    with pytest.raises(KeyboardInterrupt):
        _run_lib(tmp_path / "run", engine.Engine(num_cpus=1, chunk_rows=8))
    storage = Storage(root=str(tmp_path / "run" / "storage"))
    assert storage.exists(layout.LINE_DOCS.format(source="web"))
    assert not storage.exists(layout.LINE_DOCS.format(source="forum"))
    assert storage.list("parts/lines")  # the count map's parts
    written = storage.local_path(layout.LINE_DOCS.format(source="web"))
    mtime = __import__("os").stat(written).st_mtime_ns

    def counting(chunk):
        calls["count"] += 1
        return real_count(chunk)

    def applying(chunk, *a):
        calls["apply"].append(chunk.source)
        return real_apply(chunk, *a)

    monkeypatch.setattr(lib, "apply_chunk", applying)
    monkeypatch.setattr(lib, "count_chunk", counting)
    again, res = _run_lib(tmp_path / "run", engine.Engine(num_cpus=1, chunk_rows=8))
    assert calls["count"] == 0  # every count chunk came from its part
    assert set(calls["apply"]) == {"forum"}  # web's file kept, forum's removal redone
    assert __import__("os").stat(written).st_mtime_ns == mtime
    for key in [layout.LINE_FREQUENT, layout.LINE_REPORT, *(layout.LINE_DOCS.format(source=s) for s in ("web", "forum"))]:
        assert again.sha256(key) == clean.sha256(key), key
    assert not again.list("parts/lines")  # the parts go once what they fed is written
    assert not lib.HELD.items


def test_a_documents_file_of_other_inputs_is_rewritten(tmp_path):
    """A documents file left by a run with other parameters (or without raw versions to key it) is not
    taken for this run's."""
    _run_lib(tmp_path, engine.Engine(num_cpus=1, chunk_rows=8), lib.LineParams(min_docs=50))
    other, _ = _run_lib(tmp_path, engine.Engine(num_cpus=1, chunk_rows=8))
    clean, _ = _run_lib(tmp_path / "clean", engine.Engine(num_cpus=1, chunk_rows=8))
    for s in ("web", "forum"):
        assert other.sha256(layout.LINE_DOCS.format(source=s)) == clean.sha256(layout.LINE_DOCS.format(source=s))
    storage = Storage(root=str(tmp_path / "storage"))
    meta = lib.describe({"web": "v1", "forum": "v1"}, lib.LineParams(min_docs=5, min_kept_share=0.5), [])
    key = layout.LINE_DOCS.format(source="web")
    assert lib.done(storage, key, meta) is not None
    assert lib.done(storage, key, {**meta, "raw": {"web": None, "forum": "v1"}}) is None


def _messy_corpus(n: int = 600, seed: int = 9) -> list[str]:
    """Lines from a pool (padded with Unicode and ASCII whitespace, some not White_Space: U+001C, U+200B),
    unique lines, blank lines, short lines, a repeat inside a document, trailing newlines, empty documents;
    every 50th document long (up to 200 lines, pool lines repeated inside it: past kernels._LINEAR)."""
    r = random.Random(seed)
    pads = [" ", "\t", "\r", "\u00a0", "\u3000", "\u2003", "\u0085", "\u2028", "\x1c", "\u200b", ""]
    pool = [f"Boilerplate line {i}: é ü 漢字 ok" for i in range(30)] + ["tiny"]
    docs = []
    for d in range(n):
        lines = []
        for _ in range(r.randint(0, 10) if d % 50 else r.randint(60, 200)):
            x = r.random()
            line = (r.choice(pool) if x < 0.45 else "" if x < 0.55 else f"unique {d} {r.randrange(10**9)} línea")
            lines.append(r.choice(pads) * r.randint(0, 2) + line + r.choice(pads) * r.randint(0, 2))
        if lines and r.random() < 0.1:
            lines.append(lines[0])
        docs.append("\n".join(lines) + ("\n" if r.random() < 0.2 else ""))
    return docs


@pytest.mark.parametrize("chunk_rows,held", [(7, True), (100, True), (10_000, True), (100, False)])
def test_removals_match_a_plain_python_reference(tmp_path, chunk_rows, held, monkeypatch):
    """held: the removal map takes the count map's read and line keys (lines.HELD, the local engine), else (a
    budget of 0, as on Ray) it reads and keys the chunk again: the same output."""
    from mix_assets_tests.oracles import lines_reference as ref

    docs = _messy_corpus()
    params = lib.LineParams(min_docs=4, min_line_chars=5, min_kept_share=0.5, min_kept_chars=1)
    want_counts = ref.counts(docs, params.min_line_chars)
    frequent = {k for k, n in want_counts.items() if n >= params.min_docs}
    want = ref.remove(docs, frequent, params.min_line_chars, params.min_kept_share, params.min_kept_chars)
    assert sum(w[1] for w in want) > 100 and any(w[2] for w in want)  # the corpus exercises removal and drops
    h, d = lib.reduce_counts(lib.count_lines(pa.array(docs[i:i + chunk_rows]), params.min_line_chars)
                             for i in range(0, len(docs), chunk_rows))
    assert dict(zip(h.tolist(), d.tolist())) == want_counts
    storage = Storage(root=str(tmp_path / "storage"))
    _docs_file(tmp_path / "web.parquet", docs, "web")
    monkeypatch.setattr(lib, "HELD", lib.Held(512 << 20 if held else 0))
    hits = []
    pop = lib.HELD.pop
    monkeypatch.setattr(lib.HELD, "pop", lambda key: hits.append(x := pop(key)) or x)
    lib.dedup_lines(storage, {"web": engine.FileAt(str(tmp_path / "web.parquet"))}, {"web": "v1"}, params, [],
                    engine.Engine(num_cpus=1, chunk_rows=chunk_rows))
    assert len(hits) == -(-len(docs) // chunk_rows) and all((h is not None) == held for h in hits)
    assert not lib.HELD.items
    got = _docs(storage, "web")
    assert got.column("text").to_pylist() == [w[0] for w in want]
    assert got.column("removed_lines").to_pylist() == [w[1] for w in want]
    assert got.column("dropped").to_pylist() == [w[2] for w in want]
    assert got.column("n_chars").to_pylist() == [len(w[0]) for w in want]
    assert got.column("n_bytes").to_pylist() == [len(w[0].encode()) for w in want]
    assert sorted(pq.read_table(storage.source(layout.LINE_FREQUENT)).column("hash").to_pylist()) == sorted(frequent)


def test_the_count_reads_whole_words_wherever_the_bytes_start():
    """kernels._line_chars_w reads 8 aligned bytes at a time (kernels.words): the same counts and line keys
    for the same texts at every alignment of their bytes (1-7 bytes off), on lines with multi-byte
    characters and lines shorter and longer than a word."""
    from mix_assets.stages.lines import kernels

    texts = _messy_corpus(200) + ["é" * k + "\n" + "漢字😀x" * k for k in range(20)]
    data = "".join(texts).encode()
    offsets = np.cumsum([0] + [len(t.encode()) for t in texts]).astype(np.int64)
    want = lib.count_lines(pa.array(texts, pa.large_string()), 3, keep=True)
    seen = set()
    for pad in range(8):
        raw = pa.py_buffer(b"#" * pad + data).slice(pad)
        arr = pa.LargeStringArray.from_buffers(len(texts), pa.py_buffer(offsets.tobytes()), raw)
        seen.add(kernels.words(lib._buffers(arr)[2])[1])
        got = lib.count_lines(arr, 3, keep=True)
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), pad
    assert len(seen) == 8  # every alignment was exercised


def test_the_line_key_is_xxh64_of_the_stripped_utf8_bytes():
    import xxhash

    h, d = lib.count_lines(pa.array(["\u3000 Ünïcode line\u00a0\t\r", "Ünïcode line", "\x1cÜnïcode line"]), 1)
    got = dict(zip(h.tolist(), d.tolist()))
    assert got[xxhash.xxh64_intdigest("Ünïcode line".encode())] == 2  # U+3000, U+00A0 stripped, U+001C not
    assert got[xxhash.xxh64_intdigest("\x1cÜnïcode line".encode())] == 1


def test_the_removal_in_place_gives_the_texts_of_a_copy_and_leaves_a_callers_text_alone():
    """remove_lines(in_place=True) (the removal map on the chunk it owns) writes the new texts over the old bytes,
    moving kept lines down by distances under and over kernels._PIECES_FROM (short and long removed lines): the
    same texts and counts as into a new buffer; without in_place the caller's texts are untouched."""
    docs = _messy_corpus() + ["x" * 300 + "\n" + BOILER + "\n" + "y" * 5000, BOILER + "\n" + "z" * 40]
    p = lib.LineParams(min_docs=3, min_line_chars=4, min_kept_share=0.5, min_kept_chars=1)
    arr = pa.array(docs, pa.large_string())
    uniq, n, *keys = lib.count_lines(arr, p.min_line_chars, keep=True)
    wanted = uniq[n >= p.min_docs]
    copy, st = lib.remove_lines(arr, wanted, p, tuple(keys))
    assert arr.to_pylist() == docs and sum(st["removed_lines"]) > 100
    own = pa.array(docs, pa.large_string())
    got, st2 = lib.remove_lines(own, wanted, p, tuple(keys), in_place=True)
    assert got.buffers()[2].address == own.buffers()[2].address  # written over the old bytes
    assert got.to_pylist() == copy.to_pylist()
    assert all(np.array_equal(st[k], st2[k]) for k in st)


def test_reduce_counts_merges_many_parts_with_empty_ones_like_a_sort():
    """kernels.merge_counts (a heap of the parts' heads) against np.unique over all the parts: parts empty,
    one long, hashes 0 and 2**64 - 1, a hash in every part."""
    r = np.random.default_rng(3)
    top = np.uint64(2**64 - 1)
    parts = []
    for i in range(40):
        h = r.integers(0, 2**64 - 1, int(r.integers(0, 400 if i else 20_000)), dtype=np.uint64, endpoint=True)
        h = np.unique(np.concatenate([h % np.uint64(1000 if i % 3 else 2**63), [np.uint64(7)], [0, top][i % 2:][:1]]
                                     ).astype(np.uint64)) if i % 5 else np.zeros(0, np.uint64)
        parts.append((h, r.integers(1, 9, len(h)).astype(np.int64)))
    got_h, got_d = lib.reduce_counts(parts)
    all_h = np.concatenate([h for h, _ in parts])
    want_h, inv = np.unique(all_h, return_inverse=True)
    want_d = np.zeros(len(want_h), np.int64)
    np.add.at(want_d, inv, np.concatenate([d for _, d in parts]))
    assert got_h.dtype == np.uint64 and got_d.dtype == np.int64
    assert np.array_equal(got_h, want_h) and np.array_equal(got_d, want_d)
    assert lib.reduce_counts([])[0].size == 0
    assert lib.reduce_counts([(np.zeros(0, np.uint64), np.zeros(0, np.int64))])[0].size == 0
