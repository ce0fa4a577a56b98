import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.config import load_spec
from mix_assets.stages.sources import sources as lib

from mix_assets_tests.conftest import minimal_config, source, write_config
from mix_assets_tests.support.jsonl_fixtures import messy_jsonl
from mix_assets_tests.support.shared_data import real_mix_config


def _spec(tmp_path, *srcs, **kw):
    return load_spec(write_config(tmp_path, minimal_config(sources=list(srcs), **kw)))


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_loader_reads_rows_with_origins(tmp_path):
    _jsonl(tmp_path / "a.jsonl", [{"text": f"document number {i}"} for i in range(5)])
    spec = _spec(tmp_path, source("a", {"kind": "jsonl", "paths": ["a.jsonl"]}))
    rows = list(lib.iter_rows(spec, spec.sources[0]))
    assert [r.text for r in rows] == [f"document number {i}" for i in range(5)]
    assert [r.origin for r in rows] == [f"a.jsonl:{i}" for i in range(1, 6)]


def test_template_joins_fields(tmp_path):
    _jsonl(tmp_path / "q.jsonl", [{"question": "Two plus two?", "answer": "Four."}])
    spec = _spec(tmp_path, {**source("q", {"kind": "jsonl", "paths": ["q.jsonl"]}), "text_field": None,
                            "template": "Q: {question}\nA: {answer}"})
    assert [r.text for r in lib.iter_rows(spec, spec.sources[0])] == ["Q: Two plus two?\nA: Four."]


def test_malformed_jsonl_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"text": "fine"}\n{"text": "broken\n')
    spec = _spec(tmp_path, source("bad", {"kind": "jsonl", "paths": ["bad.jsonl"]}))
    with pytest.raises(lib.SourceError, match=rf"source bad: {p}:2: malformed JSON"):
        list(lib.iter_rows(spec, spec.sources[0]))


def test_missing_text_field_names_source_and_field(tmp_path):
    p = _jsonl(tmp_path / "m.jsonl", [{"text": "ok"}, {"body": "no text here"}])
    spec = _spec(tmp_path, source("m", {"kind": "jsonl", "paths": ["m.jsonl"]}))
    with pytest.raises(lib.SourceError, match=rf"source m: {p}:2: missing field 'text'"):
        list(lib.iter_rows(spec, spec.sources[0]))


def test_empty_source_is_a_clear_error(tmp_path):
    (tmp_path / "e.jsonl").write_text("\n\n")
    spec = _spec(tmp_path, source("e", {"kind": "jsonl", "paths": ["e.jsonl"]}))
    with pytest.raises(lib.SourceError, match="source e: the source is empty"):
        lib.sample_source(spec, spec.sources[0], 4.0, 100)


def test_missing_files_are_named(tmp_path):
    spec = _spec(tmp_path, source("x", {"kind": "jsonl", "paths": ["nowhere/*.jsonl"]}))
    with pytest.raises(lib.SourceError, match="source x: no file matches 'nowhere/\\*.jsonl'"):
        list(lib.iter_rows(spec, spec.sources[0]))


def test_undecodable_rows_are_counted_not_fatal(tmp_path):
    p = tmp_path / "u.jsonl"
    p.write_bytes(b'{"text": "good one"}\n{"text": "bad \xff\xfe bytes"}\n{"text": "good two"}\n')
    spec = _spec(tmp_path, source("u", {"kind": "jsonl", "paths": ["u.jsonl"]}))
    got = lib.sample_source(spec, spec.sources[0], 4.0, 10_000)
    assert got.dropped["sanity:undecodable"] == 1 and got.undecodable_origins == ["u.jsonl:2"]
    assert got.table.column("text").to_pylist() == ["good one", "good two"]


def test_text_folder_paragraphs_grouping_and_fallback_encoding(tmp_path):
    d = tmp_path / "books"
    d.mkdir()
    (d / "a.txt").write_bytes(b"\xef\xbb\xbfFirst para.\r\nstill first.\r\n\r\nSecond para.\r\n\r\n\r\nThird.\r\n")
    (d / "b.txt").write_bytes("Caf\xe9 au lait.\n\nPlain.\n".encode("latin-1"))
    spec = _spec(tmp_path, source("books", {"kind": "text", "paths": ["books"], "unit": "paragraphs"}))
    got = lib.sample_source(spec, spec.sources[0], 4.0, 10_000)
    assert got.table.column("text").to_pylist() == ["First para.\nstill first.", "Second para.", "Third.", "Plain."]
    assert got.dropped["sanity:undecodable"] == 1 and got.undecodable_origins == ["b.txt#0"]
    spec2 = _spec(tmp_path, source("books", {"kind": "text", "paths": ["books"], "unit": "paragraphs",
                                             "group_chars": 20, "fallback_encoding": "cp1252"}))
    got2 = lib.sample_source(spec2, spec2.sources[0], 4.0, 10_000)
    assert got2.table.column("text").to_pylist() == [
        "First para.\nstill first.", "Second para.\n\nThird.", "Café au lait.\n\nPlain."]
    assert got2.fallback_decoded == ["b.txt#0"]


def test_parquet_loader_through_datasets(tmp_path):
    pq.write_table(pa.table({"text": ["alpha beta", "gamma delta"], "other": [1, 2]}), tmp_path / "p.parquet")
    spec = _spec(tmp_path, source("p", {"kind": "parquet", "paths": ["p.parquet"]}))
    assert [r.text for r in lib.iter_rows(spec, spec.sources[0])] == ["alpha beta", "gamma delta"]


def test_hub_loader_offline_on_a_local_repo(tmp_path, hf_offline):
    # A folder laid out like a hub dataset repo: the same datasets.load_dataset code path, no network.
    repo = tmp_path / "hubrepo" / "data"
    repo.mkdir(parents=True)
    _jsonl(repo / "train-00000.jsonl", [{"content": f"hub row {i}"} for i in range(3)])
    _jsonl(repo / "validation-00000.jsonl", [{"content": "val row"}])
    loader = {"kind": "hub", "repo_id": "./hubrepo", "revision": "v1.0"}
    spec = _spec(tmp_path, {**source("h", loader), "text_field": "content"})
    rows = list(lib.iter_rows(spec, spec.sources[0]))
    assert [r.text for r in rows] == ["hub row 0", "hub row 1", "hub row 2"]
    assert rows[0].origin == "train:0"
    bad = _spec(tmp_path, {**source("h", loader), "text_field": "content", "split": "tset"})
    with pytest.raises(lib.SourceError, match="source h: .*tset"):
        list(lib.iter_rows(bad, bad.sources[0]))


def test_placeholder_hub_revision_is_refused(tmp_path):
    loader = {"kind": "hub", "repo_id": "org/x", "revision": "0" * 40}
    spec = _spec(tmp_path, source("h", loader))
    with pytest.raises(lib.SourceError, match="placeholder revision"):
        list(lib.iter_rows(spec, spec.sources[0]))


def test_too_long_and_empty_rows_are_dropped_and_counted(tmp_path):
    _jsonl(tmp_path / "a.jsonl", [{"text": "  "}, {"text": "x" * 50}, {"text": "fine text"}])
    spec = _spec(tmp_path, source("a", {"kind": "jsonl", "paths": ["a.jsonl"]}, max_doc_chars=20))
    got = lib.sample_source(spec, spec.sources[0], 4.0, 10_000)
    assert got.dropped["sanity:empty"] == 1 and got.dropped["sanity:too_long"] == 1
    assert got.table.column("text").to_pylist() == ["fine text"]


def test_doc_ids_stable_and_sampling_deterministic(tmp_path):
    rows = [{"text": f"row {i} " + "word " * random.Random(i).randint(5, 60)} for i in range(300)]
    _jsonl(tmp_path / "a.jsonl", rows)
    spec = _spec(tmp_path, source("a", {"kind": "jsonl", "paths": ["a.jsonl"]}))
    one = lib.sample_source(spec, spec.sources[0], 4.0, 2000).table
    two = lib.sample_source(spec, spec.sources[0], 4.0, 2000).table
    assert one.equals(two)
    assert 0 < one.num_rows < 300 and sum(one.column("est_tokens").to_pylist()) >= 2000
    assert one.column("doc_id").to_pylist()[0].startswith("a-")
    # another seed samples other rows; ids of the same rows do not change
    other = lib.sample_source(_spec(tmp_path, source("a", {"kind": "jsonl", "paths": ["a.jsonl"]}), seed=4),
                              spec.sources[0], 4.0, 2000).table
    assert set(other.column("origin").to_pylist()) != set(one.column("origin").to_pylist())
    ids = dict(zip(one.column("origin").to_pylist(), one.column("doc_id").to_pylist()))
    ids2 = dict(zip(other.column("origin").to_pylist(), other.column("doc_id").to_pylist()))
    assert all(ids[o] == ids2[o] for o in set(ids) & set(ids2))


def _looped_folder(tmp_path, links: int):
    d = tmp_path / "texts"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("alpha paragraph\n")
    (d / "sub" / "b.txt").write_text("beta paragraph\n")
    for k in range(links):  # self-referencing directory links: following them never ends
        (d / f"loop{k}").symlink_to(d, target_is_directory=True)
    (d / "sub" / "up").symlink_to(d, target_is_directory=True)
    (d / "b_again.txt").symlink_to(d / "sub" / "b.txt")  # the same file under a second name
    return d


@pytest.mark.parametrize("paths", [["texts/**/*.txt"], ["texts"], ["texts/**"]])
@pytest.mark.timeout(30)
def test_text_glob_never_follows_directory_links_and_reads_each_file_once(tmp_path, paths):
    _looped_folder(tmp_path, links=2)
    spec = _spec(tmp_path, source("t", {"kind": "text", "paths": paths, "unit": "paragraphs"}))
    rows = list(lib.iter_rows(spec, spec.sources[0]))
    assert sorted(r.text for r in rows) == ["alpha paragraph", "beta paragraph"]
    assert sorted(r.origin for r in rows) == ["a.txt#0", "sub/b.txt#0"]


def test_lone_surrogate_is_dropped_and_counted_with_file_line_and_field(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text('{"text": "good one"}\n{"text": "bad \\ud800 half"}\n{"text": "good two"}\n')
    spec = _spec(tmp_path, source("s", {"kind": "jsonl", "paths": ["s.jsonl"]}))
    got = lib.sample_source(spec, spec.sources[0], 4.0, 10_000)
    assert got.table.column("text").to_pylist() == ["good one", "good two"]
    assert got.dropped["sanity:undecodable"] == 1 and got.undecodable_origins == ["s.jsonl:2"]
    assert got.drop_notes == ["s.jsonl:2: sanity:undecodable: field 'text' holds a lone surrogate (U+D800), not valid Unicode"]
    # in a template field too, and the row's other fields do not matter
    q = tmp_path / "q.jsonl"
    q.write_text('{"question": "fine?", "answer": "\\udfff", "meta": "\\ud800"}\n{"question": "a", "answer": "b"}\n')
    spec = _spec(tmp_path, {**source("q", {"kind": "jsonl", "paths": ["q.jsonl"]}), "text_field": None,
                            "template": "{question} {answer}"})
    got = lib.sample_source(spec, spec.sources[0], 4.0, 10_000)
    assert got.table.column("text").to_pylist() == ["a b"]
    assert got.drop_notes == ["q.jsonl:1: sanity:undecodable: field 'answer' holds a lone surrogate (U+DFFF), not valid Unicode"]


def test_huge_json_integer_is_a_named_error_only_where_it_is_read(tmp_path):
    big = "9" * 5000
    p = tmp_path / "n.jsonl"
    p.write_text(f'{{"text": "row one", "n": {big}}}\n{{"text": {big}}}\n')
    spec = _spec(tmp_path, source("n", {"kind": "jsonl", "paths": ["n.jsonl"]}))
    rows = lib.iter_rows(spec, spec.sources[0])
    assert next(rows).text == "row one"  # an unread field holding a huge integer does not matter
    with pytest.raises(lib.SourceError, match=rf"source n: {p}:2: field 'text' holds an integer of 5000 digits, "
                                              "expected a string"):
        next(rows)
    # a template renders the integer's digits as written in the file (never converted)
    spec = _spec(tmp_path, {**source("n", {"kind": "jsonl", "paths": ["n.jsonl"]}), "text_field": None,
                            "template": "{text} has {n}"})
    assert next(lib.iter_rows(spec, spec.sources[0])).text == f"row one has {big}"


def test_deeply_nested_json_is_malformed_not_a_recursion_error(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"text": "x", "deep": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    spec = _spec(tmp_path, source("d", {"kind": "jsonl", "paths": ["d.jsonl"]}))
    with pytest.raises(lib.SourceError, match=rf"source d: {p}:1: malformed JSON \(nested too deeply\)"):
        list(lib.iter_rows(spec, spec.sources[0]))


def test_binary_and_control_character_documents_are_dropped_under_their_own_reasons(tmp_path):
    d = tmp_path / "mixed"
    d.mkdir()
    (d / "good.txt").write_text("Plain prose with a tab\there and a page break\f in it.\n")
    (d / "nul.dat").write_bytes(b"\x00" * 4096)
    (d / "noise.dat").write_bytes(bytes(range(1, 256)) * 16)  # binary, no NUL: only the fallback decodes it
    spec = _spec(tmp_path, source("m", {"kind": "text", "paths": ["mixed"], "unit": "file",
                                        "fallback_encoding": "latin-1"}))
    got = lib.sample_source(spec, spec.sources[0], 4.0, 10_000)
    assert got.table.column("origin").to_pylist() == ["good.txt#0"]
    assert got.dropped["sanity:binary"] == 1 and got.dropped["sanity:control_chars"] == 1
    assert got.drop_notes == [
        "noise.dat#0: sanity:control_chars: 976 of 4080 characters are control or replacement characters",
        "nul.dat#0: sanity:binary: 4096 NUL characters",
    ]
    # a JSON string may spell a NUL too; U+FFFD replacements count like control characters
    _jsonl(tmp_path / "j.jsonl", [{"text": "a\u0000b and more words"}, {"text": "\ufffd" * 10 + " mostly lost"},
                                  {"text": "one lost character \ufffd in a sentence"}])
    spec = _spec(tmp_path, source("j", {"kind": "jsonl", "paths": ["j.jsonl"]}))
    got = lib.sample_source(spec, spec.sources[0], 4.0, 10_000)
    assert got.dropped["sanity:binary"] == 1 and got.dropped["sanity:control_chars"] == 1 and got.table.num_rows == 1


def test_real_sources_have_no_binary_or_control_drops(tmp_path, real_data):
    spec = load_spec(real_mix_config(tmp_path, real_data))
    for src in spec.sources:
        got = lib.sample_source(spec, src, 4.0, 10**9)
        assert got.rows_read > 0 and got.dropped["sanity:binary"] == 0 and got.dropped["sanity:control_chars"] == 0, src.name


def test_template_field_missing_from_the_first_row_fails_before_the_rest_is_read(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"question": "q only"}\n' + "not json at all\n" * 1000)
    spec = _spec(tmp_path, {**source("t", {"kind": "jsonl", "paths": ["t.jsonl"]}), "text_field": None,
                            "template": "{question} {answer}"})
    with pytest.raises(lib.SourceError, match=rf"source t: {p}:1: missing field 'answer'"):
        lib.sample_source(spec, spec.sources[0], 4.0, 10_000)


def test_text_a_fallback_codec_decodes_to_lone_surrogates_is_undecodable(tmp_path):
    d = tmp_path / "t"
    d.mkdir()
    (d / "a.txt").write_bytes(b"fine words\n\ncaf\\ud800 \xff\n")
    spec = _spec(tmp_path, source("t", {"kind": "text", "paths": ["t"], "fallback_encoding": "raw_unicode_escape"}))
    got = lib.sample_source(spec, spec.sources[0], 4.0, 10_000)
    assert got.table.column("text").to_pylist() == ["fine words"]
    assert got.undecodable_origins == ["a.txt#1"]
    assert got.drop_notes == ["a.txt#1: sanity:undecodable: holds a lone surrogate (U+D800), not valid Unicode"]


def _in_memory_sample(spec, src, bpt, budget):
    """The selection as it was before raw/<source> streamed: every candidate held as a row, sorted by
    (sample key, text), the prefix filling the budget kept, in source order (the reference)."""
    cand, seen = [], 0
    for row in lib.iter_rows(spec, src):
        if row.text is None:
            continue
        text = row.text.strip()
        nb = len(text.encode("utf-8"))
        if len(text) < src.min_doc_chars or lib.not_text(text) or len(text) > src.max_doc_chars:
            continue
        est = max(1, int(round(nb / bpt)))
        did = lib.doc_id(src.name, row.id_key)
        cand.append((lib._sample_key(spec.seed, did), lib.Row(row.row_index, row.origin, text, did), nb, est))
        seen += est
        if seen >= lib.SCAN_FACTOR * budget:
            break
    cand.sort(key=lambda c: (c[0], c[1].text))
    kept, total = [], 0
    for c in cand:
        if total >= budget:
            break
        kept.append(c)
        total += c[3]
    kept.sort(key=lambda c: c[1].row_index)
    return pa.Table.from_pydict({
        "doc_id": [c[1].id_key for c in kept], "source": [src.name] * len(kept),
        "text": [c[1].text for c in kept],
        "row_index": [c[1].row_index for c in kept], "origin": [c[1].origin for c in kept],
        "n_bytes": [c[2] for c in kept], "n_chars": [len(c[1].text) for c in kept],
        "est_tokens": [c[3] for c in kept]}, schema=lib.DOC_SCHEMA)


@pytest.mark.parametrize("target", [3000, 600])  # reads the whole source / stops at SCAN_FACTOR x budget
def test_streamed_raw_source_equals_the_in_memory_selection(tmp_path, monkeypatch, target):
    from mix_assets.core import layout
    from mix_assets.core.storage import Storage

    rnd = random.Random(5)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    rows = [{"text": " ".join(rnd.choices(words, k=rnd.randint(3, 60)))} for _ in range(900)]
    for i in range(0, 900, 97):  # rows the filters drop, spread through the source
        rows[i] = {"text": ["", "x\x00y", "   "][i % 3]}
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = _spec(tmp_path, source("a", {"kind": "jsonl", "paths": ["a.jsonl"]}), target_tokens=target)
    src, budget = spec.sources[0], spec.raw_budget("a")
    bpt = lib.bytes_per_token(spec, [])[0]
    want = _in_memory_sample(spec, src, bpt, budget)
    assert 0 < want.num_rows < 900
    got = lib.sample_source(spec, src, bpt, budget)
    assert got.table.equals(want) and got.docs == want.num_rows

    storage = Storage(root=str(tmp_path / "storage"))
    key = layout.RAW_DOCS.format(source="a")
    raw = lib.read_raw_source(storage, spec, "a")  # default row groups: one, the bytes of one write_table
    direct = tmp_path / "direct.parquet"
    pq.write_table(want, direct, compression="zstd", use_dictionary=True, write_statistics=True)
    assert open(storage.source(key), "rb").read() == direct.read_bytes()
    assert (raw.docs, raw.est_tokens, raw.text_bytes) == (
        want.num_rows, sum(want.column("est_tokens").to_pylist()), sum(want.column("n_bytes").to_pylist()))
    assert raw.sample.n_chars.tolist() == want.column("n_chars").to_pylist()

    monkeypatch.setattr(lib, "ROW_GROUP_ROWS", 7)  # many row groups, some cut by text bytes
    monkeypatch.setattr(lib, "ROW_GROUP_BYTES", 1200)
    raw = lib.read_raw_source(storage, spec, "a")
    f = pq.ParquetFile(storage.source(key))
    sizes = [f.metadata.row_group(i).num_rows for i in range(f.num_row_groups)]
    assert f.num_row_groups > 2 and max(sizes) == 7 and min(sizes[:-1]) < 7
    assert f.read().equals(want) and raw.sample.n_chars.tolist() == want.column("n_chars").to_pylist()
    assert raw.stats() == lib.RawSource("a", got, bpt, raw.token_estimate, budget, raw.minimum_tokens).stats()


# -- JSONL in chunks: pyarrow's reader where it agrees with json.loads, the exact reading elsewhere --

_SPACES = "".join(c for c in map(chr, range(0x3001)) if c.isspace())
_TRICKY_TEXTS = [
    "plain words here", "", "   ", f"{_SPACES}both ends{_SPACES}", "\x1c\x1dseparators\x1e\x1f", "\x85next line\xa0",
    "\u3000ideographic\u2029", "café naïve 東京 😀 emoji", "tab\there\fand a form feed", "a\x00b with a NUL",
    "\ufffd" * 12 + " mostly lost", "C1 \x80\x9f and DEL \x7f", "quote \" backslash \\ slash / escapes \b\n\r",
    "brackets [[[{{{ in text }}}]]]", "x" * 700, "\u2028line\u2029separators",
]


def _tricky_rows():
    rows = [{"text": t} for t in _TRICKY_TEXTS]
    rows += [{"id": i, "meta": {"tags": ["a", "b"], "score": 0.5, "none": None}, "text": t}
             for i, t in enumerate(_TRICKY_TEXTS)]
    return rows


def _chunk_of(path):
    return lib.JsonlChunk(str(path), path.name, 0, path.stat().st_size, 1)


def _same_scan(a, b):
    assert a.lines.tolist() == b.lines.tolist() and a.codes.tolist() == b.codes.tolist()
    assert a.nb.tolist() == b.nb.tolist() and a.est.tolist() == b.est.tolist() and a.notes == b.notes
    texts = a.texts.to_pylist() if hasattr(a.texts, "to_pylist") else a.texts
    assert [t for t, c in zip(texts, a.codes) if c == 0] == [t for t in b.texts if t is not None]
    assert a.error is None and b.error is None


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_arrow_scan_agrees_with_the_exact_reading(tmp_path, ensure_ascii):
    p = tmp_path / "t.jsonl"
    body = "".join(json.dumps(r, ensure_ascii=ensure_ascii) + "\n" for r in _tricky_rows())
    p.write_bytes(("\n  \r\n" + body.replace("\n", "\r\n", 3) + "\t\n").encode() + b'{"text": "NaN elsewhere", "n": NaN}')
    spec = _spec(tmp_path, source("t", {"kind": "jsonl", "paths": ["t.jsonl"]}, min_doc_chars=3, max_doc_chars=600))
    src, data = spec.sources[0], p.read_bytes()
    fast = lib._scan_arrow(src, _chunk_of(p), data, 3.7)
    assert fast is not None  # the plain chunk took the fast path
    _same_scan(fast, lib._scan_python(src, _chunk_of(p), data, 3.7))
    assert set(fast.codes.tolist()) == set(range(len(lib._REASONS))) - {lib._CODE[lib.UNDECODABLE]}


@pytest.mark.parametrize("line", [
    b'{"text": "a", "text": "b"}',  # duplicate key: json.loads keeps the last
    b'{"te\\u0078t": "a", "text": "b"}',  # the same, spelt with an escape
    b'{"text": "lone \\ud800 surrogate"}', b'{"text": "ok", "other": "\\udc00"}',
    b'null', b'[1]', b'"text"', b'{"text": "a"} {"text": "b"}', b'{"text": "a"} null {"text": "b"}',
    b'\xef\xbb\xbf{"text": "after a BOM"}', b'{"text": "bad \xff byte"}', b'{"text": "ok", "other": "\xed\xa0\x80"}',
    b'{"text": null}', b'{"body": "no text"}', b'{"text": 12}', b'{"text": ["a"]}', b'{"text": "a", "n": 1e999}',
    b'{"text": "x", "deep": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # pyarrow's parser would overflow the stack
    b'{"text": "x", "deep": ' + b'{"a": ' * 65 + b"1" + b"}" * 65 + b"}",
    b'{"text": "raw\tcontrol"}', b'\x0c{"text": "form feed before"}', b'{"text": "a",}',
])
def test_arrow_scan_leaves_doubtful_chunks_to_the_exact_reading(tmp_path, line):
    p = tmp_path / "d.jsonl"
    p.write_bytes(b'{"text": "a fine row first"}\n' + line + b"\n")
    spec = _spec(tmp_path, source("d", {"kind": "jsonl", "paths": ["d.jsonl"]}))
    assert lib._scan_arrow(spec.sources[0], _chunk_of(p), p.read_bytes(), 4.0) is None


def test_brackets_in_strings_do_not_count_as_nesting(tmp_path):
    p = _jsonl(tmp_path / "b.jsonl", [{"text": "[" * 500 + "{" * 500, "meta": [[["x"]]]}])
    spec = _spec(tmp_path, source("b", {"kind": "jsonl", "paths": ["b.jsonl"]}))
    assert lib._scan_arrow(spec.sources[0], _chunk_of(p), p.read_bytes(), 4.0) is not None


@pytest.mark.parametrize("chunk_bytes", [300, 1 << 20])
def test_chunked_reading_writes_the_same_bytes_on_any_engine_and_chunking(tmp_path, monkeypatch, chunk_bytes):
    from mix_assets.core.engine import Engine
    from mix_assets.core.storage import Storage

    messy_jsonl(tmp_path / "m.jsonl")
    spec = _spec(tmp_path, source("m", {"kind": "jsonl", "paths": ["m.jsonl"]}), target_tokens=1000)

    def read(tag, eng=None):
        st = Storage(root=str(tmp_path / tag))
        raw = lib.read_raw_source(st, spec, "m", eng=eng)
        files = [Path(st.local_path(k)).read_bytes() for k in ("raw/m/documents.parquet", "raw/m/stats.json")]
        return (*files, raw.sample.n_chars.tolist())

    monkeypatch.setattr(lib, "JSONL_CHUNK_BYTES", 1 << 20)
    with monkeypatch.context() as m:  # the reference: every row through json.loads, one chunk
        m.setattr(lib, "_scan_arrow", lambda *a: None)
        want = read("exact")
    stats = json.loads(want[1])
    assert stats["drop_notes"] and stats["dropped"]["sanity:undecodable"] and not stats["exhausted"]
    monkeypatch.setattr(lib, "JSONL_CHUNK_BYTES", chunk_bytes)
    fast, scan_arrow = [], lib._scan_arrow
    monkeypatch.setattr(lib, "_scan_arrow", lambda *a: fast.append(scan_arrow(*a) is not None) or scan_arrow(*a))
    assert read("one") == want
    assert (any(fast), all(fast)) == ((True, False) if chunk_bytes < 1000 else (False, False))  # both readings
    assert read("two", Engine(num_cpus=2)) == want
    assert read("four", Engine(num_cpus=4)) == want


def test_an_error_past_where_reading_stops_is_never_reached(tmp_path, monkeypatch):
    p = tmp_path / "s.jsonl"
    p.write_text("".join(json.dumps({"text": f"document number {i} " * 20}) + "\n" for i in range(300)) + "{broken\n")
    spec = _spec(tmp_path, source("s", {"kind": "jsonl", "paths": ["s.jsonl"]}))
    for chunk_bytes in (500, 1 << 20):
        monkeypatch.setattr(lib, "JSONL_CHUNK_BYTES", chunk_bytes)
        got = lib.sample_source(spec, spec.sources[0], 4.0, 1000)  # reading stops at 4 x 1000 tokens
        assert not got.exhausted and got.rows_read < 300
        with pytest.raises(lib.SourceError, match=rf"source s: {p}:301: malformed JSON"):
            lib.sample_source(spec, spec.sources[0], 4.0, 10**6)


def test_pyarrow_trims_exactly_what_str_strip_strips():
    import sys

    import numpy as np
    import pyarrow.compute as pc

    cps = [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c < 0xE000]
    trimmed = pc.utf8_trim_whitespace(pa.array([chr(c) for c in cps]))
    gone = np.asarray(pc.utf8_length(trimmed)) == 0
    assert "".join(chr(c) for c, g in zip(cps, gone) if g) == "".join(chr(c) for c in cps if chr(c).isspace())
    assert lib._whitespace()[1]  # the per-process check agrees


def test_arrow_scan_agrees_with_the_exact_reading_on_random_text(tmp_path):
    pool = (list("abc xyz.,;'\"\\/{}[]") * 20 + list(_SPACES) + [chr(c) for c in range(0x20)]
            + ["\x7f", "\x85", "\x9f", "\ufffd", "é", "東", "😀", "\u2028", "\ufeff", "\u200b", "\u180e"])
    rng = random.Random(11)
    rows = [{"text": "".join(rng.choice(pool) for _ in range(rng.randint(0, 40))), "k": rng.random()}
            for _ in range(400)]
    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(r, ensure_ascii=rng.random() < 0.5) + "\n" for r in rows), "utf-8")
    spec = _spec(tmp_path, source("r", {"kind": "jsonl", "paths": ["r.jsonl"]}, min_doc_chars=2,
                                  max_doc_chars=30))
    src, data = spec.sources[0], p.read_bytes()
    fast = lib._scan_arrow(src, _chunk_of(p), data, 2.5)
    assert fast is not None
    _same_scan(fast, lib._scan_python(src, _chunk_of(p), data, 2.5))
    assert {lib._REASONS[c] for c in fast.codes} == set(lib._REASONS) - {lib.UNDECODABLE}


@pytest.mark.parametrize("chunk_bytes", [1, 7, 16, 1000])
def test_jsonl_chunks_are_whole_lines_covering_the_file(tmp_path, chunk_bytes):
    p = tmp_path / "c.jsonl"
    p.write_bytes(b'{"text": "a"}\n\n{"text": "a much longer line than the chunk"}\r\n  \n{"text": "no newline"}')
    spec = _spec(tmp_path, source("c", {"kind": "jsonl", "paths": ["c.jsonl"]}))
    chunks = list(lib.jsonl_chunks(spec, spec.sources[0], chunk_bytes))
    data = p.read_bytes()
    assert [c.start for c in chunks] == [0] + [c.stop for c in chunks[:-1]] and chunks[-1].stop == len(data)
    assert all(data[c.stop - 1:c.stop] == b"\n" for c in chunks[:-1])
    assert [c.first_line for c in chunks] == [data[:c.start].count(b"\n") + 1 for c in chunks]


@pytest.mark.parametrize("arrow", [True, False])
def test_a_line_edited_in_place_between_the_passes_is_refused_naming_the_file(tmp_path, monkeypatch, arrow):
    """Doc ids name lines, so a same-length edit of a kept line between pass 1 (choose) and pass 2
    (write) keeps every sample key: the chunk's digest from pass 1 is what catches it."""
    from mix_assets.core.storage import Storage

    p = _jsonl(tmp_path / "e.jsonl", [{"text": f"document number {i} says hello"} for i in range(50)])
    spec = _spec(tmp_path, source("e", {"kind": "jsonl", "paths": ["e.jsonl"]}), target_tokens=100_000)
    if not arrow:
        monkeypatch.setattr(lib, "_scan_arrow", lambda *a: None)
    plan_sample = lib.plan_sample

    def then_edit(*a, **kw):
        out = plan_sample(*a, **kw)
        p.write_bytes(p.read_bytes().replace(b"number 7 says hello", b"number 7 says HELLO"))
        return out

    monkeypatch.setattr(lib, "plan_sample", then_edit)
    with pytest.raises(lib.SourceError, match=r"source e: the source changed while it was read \(.*e\.jsonl, bytes 0-"):
        lib.read_raw_source(Storage(root=str(tmp_path / "st")), spec, "e")


def _bpt_spec(tmp_path, vocab: int):
    from mix_assets.stages.tokens.tokenizer import train_bpe

    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    rnd = random.Random(vocab)
    texts = [" ".join(rnd.choices(words, k=rnd.randint(5, 40))) for _ in range(60)]
    train_bpe(texts, vocab, ["<|endoftext|>"], str(tmp_path / f"tok{vocab}"))
    _jsonl(tmp_path / "a.jsonl", [{"text": t} for t in texts])
    spec = _spec(tmp_path, source("a", {"kind": "jsonl", "paths": ["a.jsonl"]}),
                 tokenizer={"kind": "file", "path": f"tok{vocab}/tokenizer.json"})
    return spec, texts


def test_bytes_per_token_is_filed_by_key_and_reused_only_for_the_same_tokenizer_bytes_and_texts(tmp_path, monkeypatch):
    """raw/<source>'s measured bytes per token (HF-encoding the head of the source) is a keyed record of the
    tokenizer file's bytes, the head's texts and the code: a rebuild that reads the same head reuses it;
    another tokenizer file, other texts or a record whose counts do not fit are encoded again."""
    import tokenizers

    from mix_assets.core import objects
    from mix_assets.core.storage import Storage

    spec, texts = _bpt_spec(tmp_path, 300)
    st = Storage(root=str(tmp_path / "st"))
    want = lib.bytes_per_token(spec, texts)  # no storage: measured, nothing filed
    assert want[1].startswith("measured") and objects.keyed_records(st, lib.BYTES_PER_TOKEN_ASSET) == []
    assert lib.bytes_per_token(spec, texts, st) == want
    (rec,) = objects.keyed_records(st, lib.BYTES_PER_TOKEN_ASSET)
    assert rec["value"]["documents"] == len(texts)

    calls = []
    real = tokenizers.Tokenizer.from_file
    monkeypatch.setattr(tokenizers.Tokenizer, "from_file", lambda p: calls.append(p) or real(p))
    assert lib.bytes_per_token(spec, texts, st) == want and calls == []  # reused: nothing encoded
    assert lib.bytes_per_token(spec, texts[1:], st)[0] != 0 and len(calls) == 1  # other texts: encoded
    # a record whose counts do not fit the texts is not trusted
    path = tmp_path / "st" / objects.keyed_key(lib.BYTES_PER_TOKEN_ASSET, rec["key"])
    bad = json.loads(path.read_text())
    bad["value"]["bytes"] += 1
    path.write_text(json.dumps(bad))
    assert lib.bytes_per_token(spec, texts, st) == want and len(calls) == 2
    # another tokenizer file (same path, other bytes): another key, encoded
    spec2, _ = _bpt_spec(tmp_path, 280)
    tok = tmp_path / "tok300" / "tokenizer.json"
    tok.write_bytes((tmp_path / "tok280" / "tokenizer.json").read_bytes())
    got = lib.bytes_per_token(spec, texts, st)
    assert len(calls) == 3 and got == lib.bytes_per_token(spec2, texts)


def test_a_jsonl_chunks_pass_1_is_filed_by_its_bytes_and_only_new_or_changed_chunks_are_scanned_again(
        tmp_path, monkeypatch):
    """raw/<source> files each JSONL chunk's pass 1 (codes, estimates, sample keys) under a key of its bytes,
    file name and first line, the source fields, seed, bytes per token and code: a rebuild after lines are
    appended scans only the chunks whose bytes changed, a filed blob that changed is scanned again (and
    refiled), and the documents and stats are a fresh read's every time."""
    from mix_assets.core import layout, objects
    from mix_assets.core.storage import Storage

    monkeypatch.setattr(lib, "JSONL_CHUNK_BYTES", 4096)  # many chunks
    rnd = random.Random(7)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    rows = [{"text": " ".join(rnd.choices(words, k=rnd.randint(3, 60)))} for _ in range(900)]
    rows[11] = {"text": "x\x00y"}  # a dropped row with a note
    path = _jsonl(tmp_path / "a.jsonl", rows)
    spec = _spec(tmp_path, source("a", {"kind": "jsonl", "paths": ["a.jsonl"]}), target_tokens=9000)
    st = Storage(root=str(tmp_path / "st"))
    docs = layout.RAW_DOCS.format(source="a")

    def fresh() -> tuple[bytes, dict]:  # a read with nothing filed
        other = Storage(root=str(tmp_path / f"fresh{len(list(tmp_path.glob('fresh*')))}"))
        raw = lib.read_raw_source(other, spec, "a")
        return open(other.source(docs), "rb").read(), raw.stats()

    scanned = []
    real = lib._scan
    monkeypatch.setattr(lib, "_scan", lambda src, chunk, *a: scanned.append(chunk.start) or real(src, chunk, *a))
    first = lib.read_raw_source(st, spec, "a")
    n_chunks = len(scanned)
    assert first.sample.exhausted and 0 < first.docs < 900  # read whole, sampled
    assert n_chunks > 5 and len(objects.keyed_records(st, lib.CHUNK_PLAN_ASSET)) == n_chunks
    want = fresh()
    assert (open(st.source(docs), "rb").read(), first.stats()) == want
    scanned.clear()
    again = lib.read_raw_source(st, spec, "a")
    assert scanned == [] and (open(st.source(docs), "rb").read(), again.stats()) == want
    assert first.sample.chunks_reused == (0, n_chunks) and again.sample.chunks_reused == (n_chunks, n_chunks)

    # lines appended: only the last chunk (its bytes grew) and the new ones are scanned
    size = path.stat().st_size
    with open(path, "a") as f:
        f.write("".join(json.dumps({"text": " ".join(rnd.choices(words, k=30))}) + "\n" for _ in range(60)))
    scanned.clear()
    grown = lib.read_raw_source(st, spec, "a")
    assert scanned and min(scanned) >= size - 4096 and len(scanned) < n_chunks
    want = fresh()
    assert (open(st.source(docs), "rb").read(), grown.stats()) == want

    # a filed plan whose blob changed is never used: that chunk is scanned again, the result the same
    head = lib._chunk_digest(next(lib.jsonl_chunks(spec, spec.sources[0])).read()).hex()
    (rec,) = [r for r in objects.keyed_records(st, lib.CHUNK_PLAN_ASSET) if r["input_keys"]["bytes"] == head]
    (sha,) = rec["outputs"].values()
    blob = tmp_path / "st" / objects.object_key(sha)
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    scanned.clear()
    again = lib.read_raw_source(st, spec, "a")
    assert scanned == [0] and (open(st.source(docs), "rb").read(), again.stats()) == want
    scanned.clear()
    lib.read_raw_source(st, spec, "a")
    assert scanned == []  # filed again
