"""dedup_keys' stored map outputs (dedup/signatures/<source>.parquet): reused per source, in lineage."""

import hashlib
import json
import shutil

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.stages.dedup import assets
from mix_assets.stages.filters.assets import build_filter_assets
from mix_assets.stages.sources.assets import build_source_assets
from mix_assets.config import REPO_ROOT, load_spec
from mix_assets.stages.dedup import dedup as lib
from mix_assets.core import layout
from mix_assets.stages.dedup import signatures as sig
from mix_assets.core.storage import Storage
from mix_assets.resources import MixResource
from mix_assets_tests.support.tokens_fixtures import stamp


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _dedup_keys(spec, root):
    mix = MixResource(config_path=spec.config_path, storage_root=str(root))
    # document_filters too: dedup_keys refuses decisions computed from an older raw version
    res = dg.materialize([*build_filter_assets(spec), *assets.build_dedup_assets(spec)[:1]], resources={"mix": mix},
                         instance=dg.DagsterInstance.ephemeral())
    assert res.success
    return res


def _edit(root, source: str) -> None:
    """Refresh one source: one text edited, its lineage record with it."""
    raw = root / layout.RAW_DOCS.format(source=source)
    t = pq.read_table(raw)
    texts = t.column("text").to_pylist()
    texts[0] = texts[0] + " and one more sentence for the refresh"
    pq.write_table(t.set_column(t.column_names.index("text"), "text", pa.array(texts)), raw)
    stamp(Storage(str(root)), f"raw/{source}", [layout.RAW_DOCS.format(source=source),
                                                layout.RAW_STATS.format(source=source)])


def test_refreshing_one_source_re_signs_only_that_source(tmp_path, monkeypatch):
    spec = load_spec(REPO_ROOT / "configs" / "demo.yaml")
    root = tmp_path / "storage"
    mix = MixResource(config_path=spec.config_path, storage_root=str(root))
    assert dg.materialize([*build_source_assets(spec), *build_filter_assets(spec), *assets.build_dedup_assets(spec)[:1]],
                          resources={"mix": mix}, instance=dg.DagsterInstance.ephemeral()).success
    names = sorted(s.name for s in spec.sources)
    files = {n: root / layout.DEDUP_SIGNATURES.format(source=n) for n in names}
    before = {n: (files[n].stat().st_mtime_ns, _sha(files[n])) for n in names}
    record = json.loads((root / layout.LINEAGE.format(asset="dedup_keys")).read_text())
    assert {layout.DEDUP_SIGNATURES.format(source=n) for n in names} <= set(record["outputs"])
    t = pq.read_table(files[names[0]])
    assert t.num_rows == pq.ParquetFile(root / layout.RAW_DOCS.format(source=names[0])).metadata.num_rows
    assert t.schema.field("m127").type == pa.uint32() and sig.stored_meta(str(files[names[0]]))["num_perm"] == 128

    # refresh one source: its raw data changes (one text edited), and its lineage record with it
    changed = names[1]
    _edit(root, changed)
    signed_sources = []
    real = lib.sign_chunk

    def counting(chunk):
        signed_sources.append(chunk.source)
        return real(chunk)

    monkeypatch.setattr(lib, "sign_chunk", counting)
    _dedup_keys(spec, root)
    assert set(signed_sources) == {changed}
    after = {n: (files[n].stat().st_mtime_ns, _sha(files[n])) for n in names}
    assert all(after[n] == before[n] for n in names if n != changed)
    assert after[changed][1] != before[changed][1]

    # the same dedup_keys bytes as a run that signs everything from scratch
    fresh = tmp_path / "fresh"
    shutil.copytree(root, fresh)
    shutil.rmtree(fresh / "dedup" / "signatures")
    shutil.rmtree(fresh / "keyed")  # from scratch: no stored dedup_keys to restore (core/objects.py)
    signed_sources.clear()
    _dedup_keys(spec, fresh)
    assert sorted(set(signed_sources)) == names
    assert (fresh / layout.DEDUP_KEYS).read_bytes() == (root / layout.DEDUP_KEYS).read_bytes()
    assert all(_sha(fresh / layout.DEDUP_SIGNATURES.format(source=n)) == after[n][1] for n in names)


def test_a_stored_file_matches_only_its_raw_version_and_parameters(tmp_path):
    want = sig.describe("v1", 128, 5, 1)
    schema = sig.schema(128, want)
    path = str(tmp_path / "s.parquet")
    pq.write_table(schema.empty_table(), path)
    assert sig.matches(path, want, 0)
    assert not sig.matches(path, want, 1)  # row count differs from the raw file
    for other in (sig.describe("v2", 128, 5, 1), sig.describe("v1", 64, 5, 1), sig.describe("v1", 128, 4, 1),
                  sig.describe("v1", 128, 5, 2), sig.describe(None, 128, 5, 1)):
        assert not sig.matches(path, other, 0)


def test_signature_files_do_not_depend_on_the_chunk_size(tmp_path, monkeypatch):
    from mix_assets.core import engine

    texts = [f"doc {i} " + " ".join(f"w{(i * j) % 97}" for j in range(30)) for i in range(1000)]
    raw = str(tmp_path / "a.parquet")
    pq.write_table(pa.table({"doc_id": [f"a{i:05d}" for i in range(1000)], "text": texts,
                             "n_chars": [len(x) for x in texts]}), raw, row_group_size=128)
    shas = set()
    monkeypatch.setattr(sig, "GROUP_ROWS", 256)
    for k, rows in enumerate((1000, 97, 333)):
        st = Storage(str(tmp_path / f"st{k}"))
        lib.sign_sources(st, {"a": raw}, {"a": "v"}, lib.DedupParams(), engine.Engine(chunk_rows=rows))
        f = pq.ParquetFile(tmp_path / f"st{k}" / lib.signatures_key("a"))
        assert [f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)] == [256, 256, 256, 232]
        shas.add(_sha(tmp_path / f"st{k}" / lib.signatures_key("a")))
    assert len(shas) == 1


class _Lines:
    def __init__(self):
        self.lines: list[str] = []

    def info(self, msg: str) -> None:
        self.lines.append(msg)


def test_reused_signatures_log_what_was_reused_not_a_progress_line_of_zeros(tmp_path):
    from mix_assets.core import engine

    raws = {}
    for name, n in (("a", 120), ("b", 45)):
        texts = [f"{name} doc {i} " + " ".join(f"w{(i * j) % 53}" for j in range(20)) for i in range(n)]
        raws[name] = str(tmp_path / f"{name}.parquet")
        pq.write_table(pa.table({"doc_id": [f"{name}{i:04d}" for i in range(n)], "text": texts,
                                 "n_chars": [len(x) for x in texts]}), raws[name])
    st, versions = Storage(str(tmp_path / "st")), {"a": "v", "b": "v"}
    first, again = _Lines(), _Lines()
    lib.sign_sources(st, raws, versions, lib.DedupParams(), engine.Engine(), first)
    assert first.lines[-1].startswith("dedup_keys signatures: 165/165 docs"), first.lines
    assert lib.sign_sources(st, raws, versions, lib.DedupParams(), engine.Engine(), again) == ["a", "b"]
    assert again.lines == [
        "dedup_keys signatures: reused the stored signatures of a (120 docs), b (45 docs): 165 docs not recomputed "
        "(raw data and parameters unchanged; signed by an earlier dedup_keys or by contamination_report's pass)"
    ], again.lines
    assert not any(" 0 docs" in x or "0 docs/s" in x for x in again.lines)


# -- contamination_report's pass signs for dedup_keys (one normalisation per text) ---------------------
def _run(spec, root, assets_list) -> dict:
    """Materialise `assets_list` on `root`; {asset: its materialisation metadata (plain values)}."""
    mix = MixResource(config_path=spec.config_path, storage_root=str(root))
    res = dg.materialize(assets_list, resources={"mix": mix}, instance=dg.DagsterInstance.ephemeral())
    assert res.success
    events = [e.event_specific_data.materialization for e in res.get_asset_materialization_events()]
    return {m.asset_key.to_user_string(): {k: getattr(v, "value", v) for k, v in m.metadata.items()} for m in events}


def test_contamination_report_signs_for_dedup_keys_in_any_order(tmp_path, monkeypatch):
    from mix_assets.stages.audit.assets import build_audit_assets

    spec = load_spec(REPO_ROOT / "configs" / "demo.yaml")
    names = sorted(s.name for s in spec.sources)
    upstream = [*build_source_assets(spec), *build_filter_assets(spec)]
    report, dedup = build_audit_assets(spec)[:2], assets.build_dedup_assets(spec)[:1]
    signed_sources = []
    real = lib.sign_chunk
    monkeypatch.setattr(lib, "sign_chunk", lambda chunk: signed_sources.append(chunk.source) or real(chunk))

    def files(root) -> dict:
        keys = [layout.DEDUP_KEYS, layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS,
                *(layout.DEDUP_SIGNATURES.format(source=n) for n in names)]
        return {k: _sha(root / k) for k in keys}

    # fused: contamination_report first writes every signature file, dedup_keys signs nothing
    fused = tmp_path / "fused"
    got = _run(spec, fused, [*upstream, *report])
    assert got["contamination_report"]["dedup_signatures_written_sources"] == ", ".join(s.name for s in spec.sources)
    got = _run(spec, fused, [*build_filter_assets(spec), *dedup])["dedup_keys"]
    assert signed_sources == [] and got["signatures_reused_sources"] == ", ".join(names)
    assert got["signatures_signed_sources"] == "none"

    # alone: dedup_keys first signs everything; contamination_report after it writes nothing
    alone = tmp_path / "alone"
    _run(spec, alone, [*upstream, *dedup])
    assert sorted(set(signed_sources)) == names
    before = {n: (alone / lib.signatures_key(n)).stat().st_mtime_ns for n in names}
    got = _run(spec, alone, [*build_audit_assets(spec)[:2]])
    assert got["contamination_report"]["dedup_signatures_written_sources"] == "none"
    assert {n: (alone / lib.signatures_key(n)).stat().st_mtime_ns for n in names} == before
    assert files(alone) == files(fused)  # dedup_keys, the report and the signature files: the same bytes

    # one source edited: the fused pass re-signs only it, dedup_keys alone re-signs only it, same bytes
    changed = names[1]
    for root in (fused, alone):
        _edit(root, changed)
    got = _run(spec, fused, report)
    assert got["contamination_report"]["dedup_signatures_written_sources"] == changed
    signed_sources.clear()
    got = _run(spec, fused, [*build_filter_assets(spec), *dedup])["dedup_keys"]
    assert signed_sources == [] and got["signatures_reused_sources"] == ", ".join(names)
    _run(spec, alone, [*build_filter_assets(spec), *dedup])
    assert set(signed_sources) == {changed}
    assert _run(spec, alone, report)["contamination_report"]["dedup_signatures_written_sources"] == "none"
    assert files(alone) == files(fused)


def test_the_contamination_pass_never_replaces_a_file_computed_from_the_current_raw_data(tmp_path):
    from mix_assets.core import engine

    texts = [f"doc {i} " + " ".join(f"w{(i * j) % 97}" for j in range(30)) for i in range(300)]
    raw = str(tmp_path / "a.parquet")
    pq.write_table(pa.table({"doc_id": [f"a{i:05d}" for i in range(300)], "text": texts,
                             "n_chars": [len(x) for x in texts]}), raw)
    no_chars = str(tmp_path / "b.parquet")
    pq.write_table(pa.table({"doc_id": ["b0"], "text": ["x y"]}), no_chars)
    st, params = Storage(str(tmp_path / "st")), lib.DedupParams()
    assert list(lib.signing_plan(st, {"a": raw, "b": no_chars}, {"a": "v1", "b": "v1"}, params)) == ["a"]
    assert lib.signing_plan(st, {"a": raw}, {"a": None}, params) == {}  # no raw version: left to dedup_keys
    lib.sign_sources(st, {"a": raw}, {"a": "v1"}, params, engine.Engine())
    assert lib.signing_plan(st, {"a": raw}, {"a": "v1"}, params) == {}  # stored and matching
    # computed from v1 with other parameters: dedup_keys' lineage may still rest on it, only dedup_keys replaces it
    assert lib.signing_plan(st, {"a": raw}, {"a": "v1"}, lib.DedupParams(num_perm=64)) == {}
    assert lib.signing_plan(st, {"a": raw}, {"a": "v2"}, params) == {"a": lib.signature_meta("v2", params)}


def test_a_killed_signing_resumes_at_the_first_missing_chunk_and_writes_the_same_bytes(tmp_path, monkeypatch):
    """SIGKILL sign_sources after 4 of 10 chunks: the rerun loads the parts and signs only the 6 or 7 missing
    chunks; the signature file equals an uninterrupted run's, no part is left."""
    from mix_assets.core import engine
    from mix_assets_tests.support import killed

    texts = [f"doc {i} " + " ".join(f"w{(i * j) % 97}" for j in range(30)) for i in range(1000)]
    raw = str(tmp_path / "a.parquet")
    pq.write_table(pa.table({"doc_id": [f"a{i:05d}" for i in range(1000)], "text": texts,
                             "n_chars": [len(x) for x in texts]}), raw, row_group_size=128)
    monkeypatch.setattr(sig, "GROUP_ROWS", 256)  # several row groups: the parts are re-cut as the chunks are
    whole = Storage(str(tmp_path / "whole"))
    lib.sign_sources(whole, {"a": raw}, {"a": "v"}, lib.DedupParams(), engine.Engine(num_cpus=1, chunk_rows=100))
    root, marks = tmp_path / "killed", tmp_path / "marks"
    killed.run_killed(f"""
from mix_assets.stages.dedup import dedup as lib
from mix_assets.core import engine
from mix_assets.core.storage import Storage
slowed(lib, "sign_chunk", {str(marks)!r})
lib.sign_sources(Storage({str(root)!r}), {{"a": {raw!r}}}, {{"a": "v"}}, lib.DedupParams(),
                 engine.Engine(num_cpus=1, chunk_rows=100))
""", marks, after=4)
    st = Storage(str(root))
    parts = len(st.list("parts/signatures"))
    assert 3 <= parts < 10, f"{parts} chunk parts after 4 chunks were signed"  # 4+: a late kill
    counter, log = killed.Counter(lib.sign_chunk), killed.Lines()
    monkeypatch.setattr(lib, "sign_chunk", counter)
    assert lib.sign_sources(st, {"a": raw}, {"a": "v"}, lib.DedupParams(), engine.Engine(num_cpus=1, chunk_rows=100),
                            log) == []
    assert counter.calls == 10 - parts
    assert f"dedup_keys signatures: resumed a at chunk {parts + 1} of 10 ({parts} chunks from a killed run)" in log.lines
    assert st.read_bytes(lib.signatures_key("a")) == whole.read_bytes(lib.signatures_key("a"))
    assert st.list("parts/signatures") == []
