"""gc (mix_assets/gc.py) and the object store (core/objects.py) on a local root and on S3 (SeaweedFS).

The demo-level test (a rebuild after gc, the CLI's --dry-run) is in stages/test_reuse.py; here a root is
laid out by hand: which keyed records and blobs go, which stay, and why.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from mix_assets import gc
from mix_assets.core import checkout, layout, lineage, objects
from mix_assets.core.storage import Storage
from mix_assets.core.transport import IntegrityError
from mix_assets_tests.support.s3server import WRITER

OLD = "2020-01-01T00:00:00Z"


def _artifact(st: Storage, asset: str, body: bytes, created: str | None = None, current: bool = False
              ) -> tuple[str, str]:
    """A working file of `asset`, filed as a blob with its keyed record (`current`: and its lineage
    record); (key, blob sha256)."""
    path = f"work/{asset}/{body.decode()}.bin"
    st.write_bytes(path, body)
    sha = st.sha256(path)
    key = f"{asset}-{body.decode()}".encode().hex().ljust(64, "0")[:64]
    if current:
        key = lineage.write_record(st, asset, {path: sha}, {}, "c", input_keys={})["key"]
    objects.stash(st, asset, key, {path: sha}, input_keys={}, code_version="c", run_id="r", dagster=None)
    if created:  # backdate it (filed in the storage root's store, also from a checkout)
        rec = json.loads(st.store.read_text(objects.keyed_key(asset, key)))
        st.store.write_text(objects.keyed_key(asset, key), json.dumps({**rec, "created": created}))
    return key, sha


def _layout(st: Storage) -> dict:
    cur, cur_sha = _artifact(st, "a", b"current", OLD, current=True)
    old, old_sha = _artifact(st, "a", b"old", OLD)
    pub, pub_sha = _artifact(st, "b", b"published", OLD)
    st.write_text("publish/published_revision.json",
                  json.dumps({"revision": "rev-x", "input_keys": {"artifacts": {"b": pub}}}))
    new, new_sha = _artifact(st, "a", b"new")
    return {"current": cur, "old": old, "pub": pub, "new": new, "old_sha": old_sha, "keep_shas":
            {cur_sha, pub_sha, new_sha}}


def _check(st: Storage, backdate_blobs) -> None:
    ids = _layout(st)
    backdate_blobs()
    p = gc.plan(st, keep_days=7)
    assert set(p.remove_records) == {objects.keyed_key("a", ids["old"])}
    assert set(p.remove_blobs) == {objects.object_key(ids["old_sha"])}
    assert p.keep_records[objects.keyed_key("a", ids["current"])] == "current lineage record"
    assert p.keep_records[objects.keyed_key("b", ids["pub"])] == "published rev-x"
    assert p.keep_records[objects.keyed_key("a", ids["new"])].startswith("created within")
    gc.apply(st, p)
    assert not st.exists(objects.keyed_key("a", ids["old"])) and not st.exists(objects.object_key(ids["old_sha"]))
    assert all(objects.blob_problem(st, sha) is None for sha in ids["keep_shas"])
    assert gc.plan(st, keep_days=7).remove_records == {}  # nothing more to collect
    # everything unreferenced goes at --keep-days 0 but what records and the publication name
    p0 = gc.plan(st, keep_days=0)
    assert set(p0.remove_records) == {objects.keyed_key("a", ids["new"])}


def test_gc_on_a_local_root(tmp_path):
    st = Storage(str(tmp_path / "root"))

    def backdate():
        for k in st.list(objects.OBJECTS):
            os.utime(tmp_path / "root" / k, (0, 0))

    _check(st, backdate)


@pytest.mark.s3
def test_gc_and_the_object_store_on_s3(seaweedfs, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", WRITER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRITER[1])
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    st = Storage(seaweedfs.url("gc"), s3_endpoint_url=seaweedfs.endpoint, cache_dir=str(tmp_path / "cache"))
    _check(st, lambda: None)
    # restore: a server-side copy of exactly the blob's bytes; a blob overwritten in the store is refused
    st.write_bytes("mix/x.bin", b"shard bytes")
    sha = st.sha256("mix/x.bin")
    assert objects.put_object(st, "mix/x.bin", sha) and not objects.put_object(st, "mix/x.bin", sha)
    objects.restore_object(st, sha, "mix/y.bin")
    assert st.read_bytes("mix/y.bin") == b"shard bytes" and st.sha256("mix/y.bin") == sha
    st.location.client.put_object(Bucket=st.location.bucket, Key=st.location.key(objects.object_key(sha)),
                                  Body=b"other bytes", Metadata={"sha256": sha})  # lies about its hash
    assert "not its name" in objects.blob_problem(st, sha)
    with pytest.raises(IntegrityError):
        objects.restore_object(st, sha, "mix/z.bin")
    assert not st.exists("mix/z.bin")


# -- the caches beside the object store: chunk parts, the token-id cache, per-source files, check results --
def _part(st: Storage, key: str, source: str = "web") -> str:
    k = layout.TOKEN_CACHE_PART.format(key=key, source=source, name="0123456789abcdef")
    st.write_bytes(k, b"ids of " + key.encode())
    return k


def _caches(st: Storage, tmp_path) -> dict:
    from tokenizers import Tokenizer, models

    tok = tmp_path / "tokenizer.json"
    Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(str(tok))
    st.write_bytes(layout.TOKENIZER_FILE, tok.read_bytes())
    current = gc.current_token_cache_key(st)
    used, published, stale = "1" * 32, "2" * 32, "3" * 32
    for key in (current, used, published, stale):
        _part(st, key)
    # token_shards now (its keyed record names the cache key it encoded with) and a published one
    st.write_bytes("mix/train/s.bin", b"now")
    cur = lineage.write_record(st, "token_shards", ["mix/train/s.bin"], {}, "c", input_keys={})["key"]
    objects.stash(st, "token_shards", cur, {"mix/train/s.bin": st.sha256("mix/train/s.bin")}, input_keys={},
                  code_version="c", run_id="r", dagster=None, uses={"token_cache": used})
    st.write_bytes("work/pub.bin", b"published shards")
    objects.stash(st, "token_shards", "f" * 64, {"work/pub.bin": st.sha256("work/pub.bin")}, input_keys={},
                  code_version="c", run_id="r", dagster=None, uses={"token_cache": published})
    st.write_text("publish/published_revision.json",
                  json.dumps({"revision": "rev-y", "input_keys": {"artifacts": {"token_shards": "f" * 64}}}))
    # check results: on the current token_shards (kept with it) and on an artifact nothing keeps
    for on in (cur, "e" * 64):
        objects.write_keyed(st, "checks/token_shards/c", on[:8].ljust(64, "0"), {}, input_keys={"token_shards": on},
                            code_version="v", run_id="r", dagster=None)
    st.write_bytes("parts/document_filters/" + "9" * 64 + ".arrow", b"a killed run's chunk")
    st.write_bytes("scratch/dedup_keys/" + "8" * 32 + "/band-0-0", b"a killed reduce's part")
    for k in ("filters/decisions/web.parquet", "filters/decisions/gone.parquet", "audit/hits/gone.parquet",
              "dedup/signatures/listed.parquet"):
        st.write_bytes(k, b"per source")
    lineage.write_record(st, "dedup_keys", ["dedup/signatures/listed.parquet"], {}, "c")
    return {"current": current, "used": used, "published": published, "stale": stale, "cur": cur}


def _check_caches(st: Storage, tmp_path) -> None:
    ids = _caches(st, tmp_path)
    # written just now: the N days keep every cache
    fresh = gc.plan(st, keep_days=7, sources=["web"])
    assert not fresh.remove_parts and not fresh.remove_token_cache and not fresh.remove_per_source
    later = time.time() + 30 * 86400  # everything older than the N days
    p = gc.plan(st, keep_days=7, now=later, sources=["web"])
    assert set(p.remove_parts) == {"parts/document_filters/" + "9" * 64 + ".arrow",
                                   "scratch/dedup_keys/" + "8" * 32 + "/band-0-0"}
    assert set(p.remove_token_cache) == {f"{layout.TOKEN_CACHE_DIR}/{ids['stale']}"}
    assert p.keep_token_cache[ids["current"]] == "the current tokenizer's key"
    assert p.keep_token_cache[ids["used"]].startswith("used by keyed/token_shards/")
    assert p.keep_token_cache[ids["published"]] == f"used by keyed/token_shards/{'f' * 64}.json"
    assert set(p.remove_per_source) == {"filters/decisions/gone.parquet", "audit/hits/gone.parquet"}
    checks = {k for k in p.remove_records if k.startswith("keyed/checks/")}
    assert checks == {objects.keyed_key("checks/token_shards/c", "e" * 8 + "0" * 56)}
    assert p.keep_records[objects.keyed_key("checks/token_shards/c", ids["cur"][:8].ljust(64, "0"))] == \
        "checked artifact kept (current lineage record)"
    gc.apply(st, p)
    assert not st.list(f"{layout.TOKEN_CACHE_DIR}/{ids['stale']}")
    for key in ("current", "used", "published"):
        assert st.list(f"{layout.TOKEN_CACHE_DIR}/{ids[key]}")
    assert not st.exists("filters/decisions/gone.parquet") and st.exists("filters/decisions/web.parquet")
    assert st.exists("dedup/signatures/listed.parquet") and not st.list("parts") and not st.list("scratch")
    again = gc.plan(st, keep_days=7, now=later, sources=["web"])
    assert not again.remove_parts and not again.remove_token_cache and not again.remove_per_source


def test_gc_collects_the_caches_on_a_local_root(tmp_path):
    _check_caches(Storage(str(tmp_path / "root")), tmp_path)


@pytest.mark.s3
def test_gc_collects_the_caches_on_s3(seaweedfs, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", WRITER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRITER[1])
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    _check_caches(Storage(seaweedfs.url("gc-caches"), s3_endpoint_url=seaweedfs.endpoint,
                          cache_dir=str(tmp_path / "cache")), tmp_path)


# -- dedup_keys' verified pairs and the temporary files of killed writes -----------------------------------------
def _signature_file(st: Storage, key: str, raw: str, rows: int) -> None:
    """A signature file (stages/dedup/signatures.py) of `rows` documents computed from raw version `raw`."""
    import pyarrow as pa

    from mix_assets.core import tables
    from mix_assets.stages.dedup import signatures as sig

    sch = sig.schema(4, sig.describe(raw, 4, 5, 1))
    cols = {f.name: pa.array([f"d{i}" if f.type == pa.string() else i for i in range(rows)], f.type) for f in sch}
    tables.write_parquet(st, key, pa.table(cols, schema=sch))


def _pairs_layout(st: Storage) -> dict:
    from mix_assets.stages.dedup import pairs

    def ident(name: str, raw: str, rows: int, at: str) -> dict:
        _signature_file(st, at, raw, rows)
        return pairs.source_identity(st, name, at, rows)

    sig = layout.DEDUP_SIGNATURES.format
    web, books = ident("web", "raw-web-2", 3, sig(source="web")), ident("books", "raw-books-1", 2, sig(source="books"))
    old_web = ident("web", "raw-web-1", 2, "work/old-web.parquet")  # web before new documents came
    # a dedup_keys artifact kept by a publication, built over the old web signatures
    st.write_bytes("dedup/dedup_keys.parquet", b"old keys")
    outputs = {"dedup/dedup_keys.parquet": st.sha256("dedup/dedup_keys.parquet"),
               sig(source="web"): st.sha256("work/old-web.parquet"), sig(source="books"): st.sha256(sig(source="books"))}
    objects.put_object(st, "dedup/dedup_keys.parquet", outputs["dedup/dedup_keys.parquet"])
    objects.put_object(st, "work/old-web.parquet", outputs[sig(source="web")])
    objects.put_object(st, sig(source="books"), outputs[sig(source="books")])
    objects.write_keyed(st, "dedup_keys", "a" * 64, outputs, input_keys={}, code_version="c", run_id="r", dagster=None)
    st.write_text("publish/published_revision.json",
                  json.dumps({"revision": "rev-p", "input_keys": {"artifacts": {"dedup_keys": "a" * 64}}}))
    gone = {"source": "web", "rows": 1, "signatures": {**web["signatures"], "raw": "raw-web-0"}}  # nothing has it
    keys = {"current": [pairs.pair_key(books, web, 5), pairs.pair_key(web, web, 5), pairs.pair_key(books, books, 5)],
            "published": [pairs.pair_key(books, old_web, 5), pairs.pair_key(old_web, old_web, 5)],
            "stale": [pairs.pair_key(books, gone, 5), pairs.pair_key(gone, gone, 5)]}
    for k in (x for v in keys.values() for x in v):
        st.write_bytes(k, b"pairs")
    return keys


def test_gc_collects_stale_dedup_pairs_and_killed_writes_temporary_files(tmp_path):
    root = tmp_path / "root"
    st = Storage(str(root))
    keys = _pairs_layout(st)
    (root / "dedup").mkdir(exist_ok=True)
    killed = root / "dedup" / ".dedup_keys.parquet.k1ll3d.tmp"  # a write SIGKILLed before its rename
    killed.write_bytes(b"half a file")
    (root / "locks").mkdir(exist_ok=True)
    (root / "locks" / ".run.lease.cas").write_bytes(b"{}")  # not a temporary file: never collected
    fresh = gc.plan(st, keep_days=7)
    assert not fresh.remove_pairs and not fresh.remove_temp  # everything written just now
    later = time.time() + 30 * 86400
    os.utime(killed, (time.time() - 30 * 86400,) * 2)
    p = gc.plan(st, keep_days=7, now=later)
    assert set(p.remove_pairs) == set(keys["stale"])
    assert all(p.keep_pairs[k] == "the current signature files' pairs" for k in keys["current"])
    assert all(p.keep_pairs[k] == f"the pairs of {objects.keyed_key('dedup_keys', 'a' * 64)}" for k in keys["published"])
    assert set(p.remove_temp) == {"dedup/.dedup_keys.parquet.k1ll3d.tmp"}
    gc.apply(st, p)
    assert not any(st.exists(k) for k in keys["stale"]) and not killed.exists()
    assert all(st.exists(k) for k in keys["current"] + keys["published"])
    assert (root / "locks" / ".run.lease.cas").exists()
    again = gc.plan(st, keep_days=7, now=later)
    assert not again.remove_pairs and not again.remove_temp


def test_a_record_current_in_a_runs_checkout_is_kept(tmp_path):
    """A run that works in a checkout of its own (core/checkout.py) names its artifacts there: gc keeps them
    (and the checkout) while the run holds it; an idle checkout goes (test_gc_removes_idle_run_checkouts_...)."""
    st = Storage(str(tmp_path / "root"))
    held = checkout.hold(st, "cfg-x", "run-x")
    co = Storage(str(tmp_path / "root" / "checkouts" / "cfg-x"), store_root=str(tmp_path / "root"))
    key, sha = _artifact(co, "a", b"in-checkout", current=True)
    assert st.exists(objects.keyed_key("a", key)) and st.exists(objects.object_key(sha))  # filed in the root
    rec = json.loads(st.read_text(objects.keyed_key("a", key)))
    st.write_text(objects.keyed_key("a", key), json.dumps({**rec, "created": OLD}))
    for k in st.list(objects.OBJECTS):
        os.utime(tmp_path / "root" / k, (0, 0))
    p = gc.plan(st, keep_days=0)
    # before: removed at --keep-days 0, only the root's lineage/ counted as current
    assert p.keep_records[objects.keyed_key("a", key)] == "current lineage record"
    assert objects.object_key(sha) not in p.remove_blobs
    assert p.keep_checkouts == {"checkouts/cfg-x": "held by run run-x"}
    held.release()


# -- run checkouts (core/checkout.py), their claims and run markers ------------------------------------------------
def _checkout(st: Storage, name: str) -> Storage:
    return Storage(st.uri(f"{checkout.CHECKOUTS}/{name}"), s3_endpoint_url=st.s3_endpoint_url, cache_dir=st.cache_dir,
                   store_root=st.root)


def _claim_body(run_id: str, age: float, ttl: float = 60.0) -> str:
    now = time.time()
    return json.dumps({"run_id": run_id, "host": "elsewhere", "pid": 1, "created": now - age, "heartbeat_at": now - age,
                       "ttl_seconds": ttl})


def _check_checkouts(st: Storage) -> None:
    """A checkout a live run holds survives (whatever its age); one a killed run left (its claim stale) goes with
    its claim, and its record, now current nowhere, with it; one holding the only copy of a published artifact
    stays; a checkout claimed between the plan and apply stays."""
    live = checkout.hold(st, "cfg-live", "run-live", ttl=600)  # a run working there now (its heartbeat thread runs)
    assert live is not None
    try:
        _artifact(_checkout(st, "cfg-live"), "live", b"live-run", OLD, current=True)
        stale_key, stale_sha = _artifact(_checkout(st, "cfg-stale"), "killed", b"killed-run", OLD, current=True)
        st.write_text(f"{checkout.CLAIMS}/cfg-stale/run-killed.1.x.json", _claim_body("run-killed", age=3600))
        pub_key, _ = _artifact(_checkout(st, "run-idle"), "b", b"idle-published", OLD, current=True)
        gone_key, gone_sha = _artifact(_checkout(st, "run-only-copy"), "c", b"only-copy", OLD, current=True)
        st.write_text("publish/published_revision.json", json.dumps(
            {"revision": "rev-z", "input_keys": {"artifacts": {"b": pub_key, "c": gone_key}}}))
        st.delete(objects.object_key(gone_sha))  # the store lost the published blob: the checkout holds the only copy
        busy_key, busy_sha = _artifact(_checkout(st, "run-busy-later"), "busy", b"busy-later", OLD, current=True)
        for run, name in (("run-killed", "cfg-stale"), ("run-live", "cfg-live"), ("run-old", "run-idle")):
            st.write_text(f"{checkout.CLAIMS}/.runs/{run}", name)

        fresh = gc.plan(st, keep_days=7)  # everything was written just now: every checkout stays
        assert not fresh.remove_checkouts
        assert set(fresh.remove_claims) == {f"{checkout.CLAIMS}/cfg-stale/run-killed.1.x.json"}  # stale by heartbeat

        later = time.time() + 30 * 86400
        p = gc.plan(st, keep_days=7, now=later)
        assert set(p.remove_checkouts) == {"checkouts/cfg-stale", "checkouts/run-idle", "checkouts/run-busy-later"}
        assert p.keep_checkouts["checkouts/cfg-live"] == "held by run run-live"
        assert p.keep_checkouts["checkouts/run-only-copy"] == \
            "names c of published rev-z, whose work/c/only-copy.bin is not in the store"
        assert set(p.remove_claims) == {f"{checkout.CLAIMS}/cfg-stale/run-killed.1.x.json",
                                        f"{checkout.CLAIMS}/.runs/run-killed", f"{checkout.CLAIMS}/.runs/run-old"}
        # the killed run's record was current only in its checkout: it goes with it; the published one stays
        assert objects.keyed_key("killed", stale_key) in p.remove_records
        assert objects.object_key(stale_sha) in p.remove_blobs
        assert p.keep_records[objects.keyed_key("b", pub_key)] == "published rev-z"
        assert p.keep_records[objects.keyed_key("live", _checkout_key(st, "cfg-live"))] == "current lineage record"

        assert objects.keyed_key("busy", busy_key) in p.remove_records  # planned while idle
        busy = checkout.hold(st, "run-busy-later", "run-late", ttl=600)  # a run claims it after the plan
        said: list[str] = []
        try:
            gc.apply(st, p, log=said.append)
        finally:
            busy.release()
        assert said == ["  kept checkouts/run-busy-later: claimed by a run since the plan"]
        # what its lineage records name stays with it: its keyed record and blob
        assert st.exists(objects.keyed_key("busy", busy_key)) and objects.blob_problem(st, busy_sha) is None
        assert not st.list("checkouts/cfg-stale") and not st.list("checkouts/run-idle")
        assert st.list("checkouts/cfg-live") and st.list("checkouts/run-only-copy") and st.list("checkouts/run-busy-later")
        assert [k for k in st.list(checkout.CLAIMS) if k.endswith(".json")] == [live.key]
        assert st.list(f"{checkout.CLAIMS}/.runs") == [f"{checkout.CLAIMS}/.runs/run-live"]
        (pub_sha,) = json.loads(st.read_text(objects.keyed_key("b", pub_key)))["outputs"].values()
        assert objects.blob_problem(st, pub_sha) is None  # what the publication needs is in the store
        # the live run still works there: its next step's claim goes to the checkout it holds
        step = checkout.claim(st, "run-live", "live")
        assert step.name == "cfg-live"
        step.release()
    finally:
        live.release()


def _checkout_key(st: Storage, name: str) -> str:
    (rk,) = st.list(f"checkouts/{name}/lineage")
    return json.loads(st.read_text(rk))["key"]


def test_gc_removes_idle_run_checkouts_and_never_a_held_one_on_a_local_root(tmp_path):
    _check_checkouts(Storage(str(tmp_path / "root")))


@pytest.mark.s3
def test_gc_removes_idle_run_checkouts_and_never_a_held_one_on_s3(seaweedfs, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", WRITER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRITER[1])
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    _check_checkouts(Storage(seaweedfs.url("gc-checkouts"), s3_endpoint_url=seaweedfs.endpoint,
                             cache_dir=str(tmp_path / "cache")))


def test_gc_cli_dry_run_lists_an_idle_checkout_and_keeps_a_held_one(tmp_path, capsys):
    from mix_assets_tests.support.ui_harness import REPO, config_variant

    root = tmp_path / "root"
    cfg = config_variant(REPO / "configs" / "demo.yaml", tmp_path / "mix.yaml",
                         {"storage": {"root": str(root), "cache_dir": str(tmp_path / "cache")}})
    st = Storage(str(root))
    held = checkout.hold(st, "cfg-live", "run-live")
    try:
        for name in ("cfg-idle", "cfg-live"):
            _artifact(_checkout(st, name), name, b"x", OLD, current=True)
        assert gc.main([str(cfg), "--dry-run", "--keep-days", "0"]) == 0
        out = capsys.readouterr().out
        assert "run checkouts: 1, " in out and "  would remove checkouts/cfg-idle (" in out
        assert "  keeping checkouts/cfg-live: held by run run-live" in out
        assert st.list("checkouts/cfg-idle")  # a dry run removes nothing
        assert gc.main([str(cfg), "--keep-days", "0"]) == 0
        assert not st.list("checkouts/cfg-idle") and st.list("checkouts/cfg-live")
    finally:
        held.release()
