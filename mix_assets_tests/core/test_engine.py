"""core/engine.py: the same bytes in process and on a REAL local Ray instance (issue 13 §2, §5).

One Ray instance (2 CPUs) for the whole module (ray.init takes ~5-10 s), shut down at its end; the
tests marked `ray` run in the default suite. dedup_keys' signatures and the contamination scan
are the two map stages compared here.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from functools import lru_cache

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.stages.audit import metadata as audit_md
from mix_assets.stages.dedup import assets as dedup_assets
from mix_assets.stages.filters.assets import build_filter_assets
from mix_assets.stages.sources.assets import build_source_assets
from mix_assets.config import REPO_ROOT, load_spec
from mix_assets.stages.audit import eval_scan
from mix_assets.stages.dedup import dedup as lib
from mix_assets.core import engine as eng
from mix_assets_tests.support import gen_corpus as gc
from mix_assets.core import layout, tables
from mix_assets.core.storage import Storage
from mix_assets.resources import MixResource
from mix_assets_tests.support import audit_fixtures as audit_fx
from mix_assets_tests.support.ray_local import local_ray
from mix_assets_tests.support.shared_data import FIXTURE

LOCAL1, LOCAL2 = eng.Engine(num_cpus=1), eng.Engine(num_cpus=2)
RAY2 = eng.Engine(kind="ray", num_cpus=2, chunk_rows=250)


@pytest.fixture(scope="module")
def ray_instance():
    with local_ray(RAY2) as ray:
        assert ray.cluster_resources()["CPU"] == 2
        yield ray
    assert not ray.is_initialized()


def _slow_square(x: int) -> tuple[int, int]:
    time.sleep(0.05 * (x % 3 == 0))  # later chunks finish first
    return x * x, os.getpid()


def test_local_map_is_in_chunk_order_and_ray_needs_a_connection():
    for e in (LOCAL1, LOCAL2, eng.Engine(num_cpus=4)):
        assert [r for r, _ in eng.map_chunks(_slow_square, range(20), e)] == [x * x for x in range(20)]
    with pytest.raises(ValueError, match="engine.kind"):
        eng.Engine(kind="spark")


def test_row_ranges_cover_the_file_whatever_the_row_groups(tmp_path):
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"x": list(range(1000))}), path, row_group_size=170)
    for rows in (1, 99, 170, 333, 1000, 5000):
        got = [eng.read_rows(r, ["x"]).column("x").to_pylist() for r in eng.row_ranges(path, rows)]
        assert [x for part in got for x in part] == list(range(1000))
        assert max(len(p) for p in got) == min(rows, 1000)


def test_the_address_ray_init_would_connect_to_first(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert [eng.ray_endpoint(a) for a in (None, "local", "auto")] == [None, None, None]
    assert eng.ray_endpoint("10.0.0.5:26379") == ("10.0.0.5", 26379, "the Ray GCS")
    assert eng.ray_endpoint("head") == ("head", eng.GCS_PORT, "the Ray GCS")
    assert eng.ray_endpoint("ray://head.ns.svc:10002") == ("head.ns.svc", 10002, "the Ray Client server")
    assert eng.ray_endpoint("ray://head") == ("head", eng.CLIENT_PORT, "the Ray Client server")
    assert eng.ray_endpoint("[::1]:6379") == ("::1", 6379, "the Ray GCS")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:7000")
    assert eng.ray_endpoint("auto") == ("127.0.0.1", 7000, "the Ray GCS")
    for bad in ("head:port", ":6379", "ray://"):
        with pytest.raises(ValueError, match=f"engine.address {bad!r}"):
            eng.ray_endpoint(bad)


# What a gRPC server (Ray's GCS, the Ray Client server) sends first on a new connection: an HTTP/2
# SETTINGS frame (9-byte header: length 6, type 0x4, flags 0, stream 0; one setting).
SETTINGS_FRAME = b"\x00\x00\x06\x04\x00\x00\x00\x00\x00" + b"\x00\x04\x00\x40\x00\x00"


@contextlib.contextmanager
def _listener(reply: bytes | None):
    """A TCP server on 127.0.0.1 that accepts and sends `reply` (None: says nothing); yields its port."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()
    held = []

    def serve():
        server.settimeout(0.1)
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            held.append(conn)
            if reply is not None:
                conn.sendall(reply)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield server.getsockname()[1]
    finally:
        done.set()
        t.join()
        for c in held:
            c.close()
        server.close()


@pytest.mark.parametrize("reply,what", [
    (b"HTTP/1.0 400 Bad Request\r\n\r\n", r"answered b'HTTP/1.0 400 Bad Request"),  # the dashboard, a web server
    (None, r"sent nothing"),  # accepted, silent
    (b"SSH-2.0-OpenSSH_9.6\r\n", r"answered b'SSH-2.0"),
], ids=["http", "silent", "ssh"])
def test_check_reachable_refuses_a_port_open_to_something_that_is_not_ray(reply, what):
    # ray.init on such a port blocks for good ("Failed to connect to GCS ... within 5 seconds", forever)
    with _listener(reply) as port:
        t0 = time.monotonic()
        with pytest.raises(ConnectionError, match=rf"'127.0.0.1:{port}'.*not Ray.*{what}"):
            eng.check_reachable(eng.Engine(kind="ray", address=f"127.0.0.1:{port}", connect_timeout_s=1.5))
        assert time.monotonic() - t0 < 5


@pytest.mark.ray
def test_check_reachable_passes_a_real_ray_gcs(ray_instance):
    gcs = ray_instance.get_runtime_context().gcs_address
    eng.check_reachable(eng.Engine(kind="ray", address=gcs, connect_timeout_s=10))


def test_check_reachable_waits_for_the_deadline_then_names_the_address():
    import socket

    with _listener(SETTINGS_FRAME) as port:  # a gRPC server answering (Ray's GCS, Ray Client): no wait
        eng.check_reachable(eng.Engine(kind="ray", address=f"127.0.0.1:{port}", connect_timeout_s=1))
    slept = []  # port closed now: retried until the deadline, then one error naming address and deadline
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match=rf"'127.0.0.1:{port}'.*connect_timeout_s = 1.5 s"):
        eng.check_reachable(eng.Engine(kind="ray", address=f"127.0.0.1:{port}", connect_timeout_s=1.5),
                            sleep=lambda s: slept.append(s) or time.sleep(s))
    assert 1.5 <= time.monotonic() - t0 < 5 and len(slept) >= 2
    eng.check_reachable(eng.Engine(kind="ray"))  # a new local instance: nothing to reach


def test_an_address_found_unreachable_fails_at_once_within_its_deadline():
    # Dagster initialises the engine resource a second time in the process after a run failed at its
    # init (seen through `dagster job execute`): the second check must not wait the deadline out again.
    with _listener(SETTINGS_FRAME) as port:
        pass
    e = eng.Engine(kind="ray", address=f"127.0.0.1:{port}", connect_timeout_s=1.5)
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match="nothing answered"):
        eng.check_reachable(e)
    t1 = time.monotonic()
    with pytest.raises(ConnectionError, match=rf"nothing answered at 127.0.0.1:{port}.*not waiting again"):
        eng.check_reachable(e)
    assert t1 - t0 >= 1.5 and time.monotonic() - t1 < 0.5
    time.sleep(1.6)  # past the deadline the address is tried again (a cluster may have come up)
    with pytest.raises(ConnectionError) as again:
        eng.check_reachable(e)
    assert "not waiting again" not in str(again.value)


@lru_cache(maxsize=None)
def _corpus():
    model = gc.MarkovModel.from_files(sorted((FIXTURE / "sources").glob("*/*.txt")), order=1)
    return gc.generate(model, 1200, seed=21)  # 1,320 documents, 120 planted near-copies


def _raw(folder) -> dict[str, str]:
    texts, paths = _corpus().texts, {}
    for s in range(2):
        rows = list(range(s, len(texts), 2))
        paths[f"src{s}"] = str(folder / f"src{s}.parquet")
        pq.write_table(pa.table({"doc_id": [f"src{s}-{i:06d}" for i in rows], "text": [texts[i] for i in rows],
                                 "n_chars": [len(texts[i]) for i in rows]}), paths[f"src{s}"], row_group_size=300)
    return paths


def _dedup_bytes(paths, engine, out) -> bytes:
    table, st = lib.dedup_keys_table(paths, {"src0": 1, "src1": 0}, lib.DedupParams(), engine)
    assert st["excluded_near_dup"] >= 100  # the planted near-copies are found (not an empty comparison)
    storage = Storage(root=str(out))
    tables.write_parquet(storage, layout.DEDUP_KEYS, table)
    return (out / layout.DEDUP_KEYS).read_bytes()


@pytest.mark.ray
def test_dedup_keys_bytes_identical_in_process_and_on_ray(ray_instance, tmp_path):
    paths = _raw(tmp_path)
    want = _dedup_bytes(paths, LOCAL1, tmp_path / "local1")
    assert _dedup_bytes(paths, LOCAL2, tmp_path / "local2") == want
    assert _dedup_bytes(paths, eng.Engine(num_cpus=2, chunk_rows=97), tmp_path / "local97") == want
    assert _dedup_bytes(paths, eng.Engine(num_cpus=4), tmp_path / "local4") == want  # the reduce's tasks too
    assert _dedup_bytes(paths, RAY2, tmp_path / "ray2") == want
    # Both CPUs are used: tasks ran in two worker processes, results still in chunk order.
    out = list(eng.map_chunks(_slow_square, range(12), RAY2))
    assert [r for r, _ in out] == [x * x for x in range(12)] and len({pid for _, pid in out}) >= 2


@pytest.mark.ray
def test_dedup_keys_partitioned_reduce_bytes_identical_on_ray(ray_instance, tmp_path):
    # a cluster chained across sources and partitions; the reduce's parts under a storage root any worker reads
    from mix_assets_tests.stages.dedup.test_partitioned import chain_cluster, dedup_bytes
    from mix_assets_tests.support import chain_corpus

    paths = chain_corpus.write(tmp_path)
    want = dedup_bytes(paths, LOCAL1, 1)
    assert chain_cluster(want).num_rows == chain_corpus.CHAIN
    for partitions in (1, 8):
        assert dedup_bytes(paths, RAY2, partitions) == want, partitions


@pytest.mark.ray
def test_dedup_keys_asset_on_ray_writes_the_demo_bytes(ray_instance, tmp_path):
    spec = load_spec(REPO_ROOT / "configs" / "demo.yaml")
    mix = MixResource(config_path=spec.config_path, storage_root=str(tmp_path / "storage"))
    inst = dg.DagsterInstance.ephemeral()
    assert dg.materialize([*build_source_assets(spec), *build_filter_assets(spec),
                           *dedup_assets.build_dedup_assets(spec)[:1]],
                          resources={"mix": mix}, instance=inst).success
    local = (tmp_path / "storage" / layout.DEDUP_KEYS).read_bytes()
    on_ray = spec.model_copy(update={"engine": spec.engine.model_copy(update={"kind": "ray", "chunk_rows": 300})})
    res = dg.materialize(dedup_assets.build_dedup_assets(on_ray)[:1], resources={"mix": mix}, instance=inst)
    assert res.success and ray_instance.is_initialized()  # the module's instance was used and left up
    assert (tmp_path / "storage" / layout.DEDUP_KEYS).read_bytes() == local


# -- the contamination scan (stages/audit/eval_scan.scan_chunk) ---------------------------------------------------
class _Lines:
    def __init__(self):
        self.lines: list[str] = []

    def info(self, msg: str) -> None:
        self.lines.append(msg)


def _contamination_bytes(storage, spec, engine) -> tuple[bytes, bytes, dict]:
    log = _Lines()
    eval_scan.write_contamination_report(storage, spec, engine, log=log)
    kept = eval_scan.kept_overlap(storage, spec)
    assert log.lines[-1].startswith("contamination_report: ") and "done in" in log.lines[-1]
    return (storage.read_bytes(layout.CONTAMINATION_REPORT), storage.read_bytes(layout.CONTAMINATED_DOCS),
            {k: repr(v) for k, v in audit_md.zero_eval_overlap(kept).items()})


@pytest.mark.ray
def test_contamination_outputs_bytes_identical_in_process_and_on_ray(ray_instance, tmp_path):
    spec = audit_fx.make_spec(tmp_path)
    storage = Storage(root=str(tmp_path / "storage"))
    corpus = audit_fx.make_corpus(n_web=300, n_books=500)  # planted eval copies in both sources
    for s in spec.sources:
        audit_fx.write_docs(storage, s.name, corpus.docs[s.name])
    eval_scan.write_registry(storage, spec)
    # masked: 2 of web's 3 planted docs and a clean books doc; web-0007 and books-0005 stay kept
    masked = ["web-0003", "web-0011", "books-0009"]
    with storage.writing(layout.EXCLUSION_MASKS) as tmp:
        pq.write_table(pa.table({"doc_id": masked, "source": [m.split("-")[0] for m in masked]}), tmp)
    want = _contamination_bytes(storage, spec, LOCAL1)
    assert json.loads(want[0])["contaminated_docs"] == 4 and int(want[2]["kept_contaminated_docs"]) == 2
    ray1 = eng.Engine(kind="ray", num_cpus=1, chunk_rows=301)
    ray2 = eng.Engine(kind="ray", num_cpus=2, chunk_rows=53)
    for e in (LOCAL2, eng.Engine(num_cpus=2, chunk_rows=37), ray1, ray2):
        assert _contamination_bytes(storage, spec, e) == want, e


# -- the fuzzy advisory (in stages/audit/eval_scan.scan_chunk's pass) ---------------------------------------------
def _fuzzy_bytes(storage, spec, engine) -> tuple[bytes, ...]:
    log = _Lines()
    scan, _ = eval_scan.write_contamination_report(storage, spec, engine, log=log)
    assert log.lines[-1].startswith("contamination_report: ") and "near an eval item" in log.lines[-1]
    return tuple(storage.read_bytes(k) for k in [layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS,
                                                 *scan.fuzzy.files])


@pytest.mark.ray
def test_fuzzy_outputs_bytes_identical_in_process_and_on_ray(ray_instance, tmp_path):
    spec = audit_fx.make_spec(tmp_path)
    storage = Storage(root=str(tmp_path / "storage"))
    corpus = audit_fx.make_corpus(n_web=300, n_books=500, near_copy=True)
    for s in spec.sources:
        audit_fx.write_docs(storage, s.name, corpus.docs[s.name])
    eval_scan.write_registry(storage, spec)  # with the fuzzy index
    want = _fuzzy_bytes(storage, spec, LOCAL1)
    report = json.loads(want[-2])
    assert report["docs_matched"] == 5 and report["fuzzy_only_docs"] == 1
    for e in (LOCAL2, eng.Engine(num_cpus=2, chunk_rows=37), eng.Engine(kind="ray", num_cpus=2, chunk_rows=53)):
        assert _fuzzy_bytes(storage, spec, e) == want, e


# -- the filter cascade (stages/filters/decisions.decide_chunk) --------------------------------------------------
@pytest.mark.ray
def test_filter_decisions_bytes_identical_in_process_and_on_ray(ray_instance, tmp_path):
    from mix_assets.stages.filters import decisions
    from mix_assets_tests.stages.filters.test_decisions import PARAMS, _texts, write_source

    texts = _texts()
    sources = {"a": write_source(tmp_path, "a", texts[:230]), "b": write_source(tmp_path, "b", texts[230:])}

    def decided(engine, out) -> dict:
        storage = Storage(root=str(tmp_path / out))
        assert decisions.decide_sources(storage, sources, {"a": "v", "b": "v"}, {"a": PARAMS, "b": PARAMS}, engine) == []
        return {n: storage.read_bytes(decisions.decisions_key(n)) for n in sources}

    want = decided(LOCAL1, "local1")
    assert decided(RAY2, "ray2") == want
    assert decided(eng.Engine(kind="ray", num_cpus=2, chunk_rows=41), "ray41") == want


@pytest.mark.ray
def test_raw_source_bytes_identical_in_process_and_on_ray(ray_instance, tmp_path, monkeypatch):
    from mix_assets.stages.sources import sources

    from mix_assets_tests.conftest import minimal_config, source, write_config
    from mix_assets_tests.support.jsonl_fixtures import messy_jsonl

    messy_jsonl(tmp_path / "m.jsonl", n=600)
    spec = load_spec(write_config(tmp_path, minimal_config(
        sources=[source("m", {"kind": "jsonl", "paths": ["m.jsonl"]})], target_tokens=1000)))
    monkeypatch.setattr(sources, "JSONL_CHUNK_BYTES", 2000)  # chunks are cut here; tasks read their ranges

    def read(engine, tag):
        st = Storage(root=str(tmp_path / tag))
        sources.read_raw_source(st, spec, "m", eng=engine)
        return [(tmp_path / tag / k).read_bytes() for k in (layout.RAW_DOCS.format(source="m"),
                                                             layout.RAW_STATS.format(source="m"))]

    assert read(RAY2, "ray2") == read(LOCAL1, "local1") == read(LOCAL2, "local2")


# -- contamination_report's pass signs for dedup_keys (stages/audit/eval_scan.scan_chunk with `sign`) ---------------
def _write_raw(storage, source: str, docs: list[tuple[str, str]], null_text_at: int | None = None) -> None:
    texts = [None if i == null_text_at else t for i, (_, t) in enumerate(docs)]
    t = pa.table({"doc_id": [d for d, _ in docs], "text": pa.array(texts, pa.string()),
                  "n_chars": [len(t or "") for t in texts]})
    with storage.writing(layout.RAW_DOCS.format(source=source)) as tmp:
        pq.write_table(t, tmp, row_group_size=128)


def _fused_storage(tmp_path, null_text_at=None):
    spec = audit_fx.make_spec(tmp_path)
    storage = Storage(root=str(tmp_path / "storage"))
    corpus = audit_fx.make_corpus(n_web=300, n_books=500)  # planted eval copies in both sources
    for k, s in enumerate(spec.sources):
        _write_raw(storage, s.name, corpus.docs[s.name], null_text_at if k == 0 else None)
    eval_scan.write_registry(storage, spec)
    return spec, storage, [s.name for s in spec.sources]


def _report_and_signatures(storage, spec, names, engine, versions) -> tuple[list, dict, dict]:
    for n in names:  # each run a fresh pass: no stored signatures, and no stored hits to reuse instead of scanning
        for key in (lib.signatures_key(n), eval_scan.hits_key(n)):
            if storage.exists(key):
                storage.delete(key)
    scan, _ = eval_scan.write_contamination_report(storage, spec, engine, log=_Lines(), raw_versions=versions)
    report = {k: storage.read_bytes(k) for k in (layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS)}
    return scan.signed_sources, report, {n: storage.read_bytes(lib.signatures_key(n)) for n in names
                                         if storage.exists(lib.signatures_key(n))}


@pytest.mark.ray
def test_the_contamination_pass_writes_dedup_keys_signature_bytes_in_process_and_on_ray(ray_instance, tmp_path):
    spec, storage, names = _fused_storage(tmp_path)
    versions, params = {n: f"version-of-{n}" for n in names}, lib.dedup_params(spec)
    files = tables.raw_files(storage, names)
    ref = Storage(root=str(tmp_path / "ref"))  # dedup_keys' own signing
    assert lib.sign_sources(ref, files, versions, params, LOCAL1) == []
    want_sigs = {n: ref.read_bytes(lib.signatures_key(n)) for n in names}
    eval_scan.write_contamination_report(storage, spec, LOCAL1)  # without signing: the report's reference bytes
    want_report = {k: storage.read_bytes(k) for k in (layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS)}
    assert json.loads(want_report[layout.CONTAMINATION_REPORT])["contaminated_docs"] == 4
    for e in (LOCAL1, LOCAL2, eng.Engine(num_cpus=2, chunk_rows=37), RAY2):
        assert _report_and_signatures(storage, spec, names, e, versions) == (names, want_report, want_sigs), e
        assert lib.sign_sources(storage, files, versions, params, e) == sorted(names)  # dedup_keys signs nothing


def test_the_cross_split_scan_is_the_same_with_its_bands_as_ray_tasks(ray_instance, tmp_path):
    from mix_assets.stages.split.split import cross_split_near_dups
    from mix_assets_tests.stages.split.test_split_lsh import _planted

    _, _, _, split, raws, stored = _planted(tmp_path)
    want = cross_split_near_dups(split, raws, 0.8, signatures=stored)
    assert want.val_docs_with_train_near_dup and cross_split_near_dups(split, raws, 0.8, signatures=stored,
                                                                       eng=RAY2) == want


def test_a_null_text_leaves_the_source_to_dedup_keys_and_the_report_unchanged(tmp_path):
    spec, storage, names = _fused_storage(tmp_path, null_text_at=200)
    versions = {n: f"version-of-{n}" for n in names}
    eval_scan.write_contamination_report(storage, spec, LOCAL2)
    want = {k: storage.read_bytes(k) for k in (layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS)}
    signed, report, sigs = _report_and_signatures(storage, spec, names, eng.Engine(num_cpus=2, chunk_rows=64), versions)
    assert signed == names[1:] and report == want and list(sigs) == names[1:]
    with pytest.raises(lib.DedupInputError, match=r"row 200: field 'text' is null"):
        lib.sign_sources(storage, tables.raw_files(storage, names), versions, lib.dedup_params(spec), LOCAL1)
