"""Artifact keys (core/keys.py), the keys lineage records carry and verifies (core/lineage.py), and the
object store's blobs (core/objects.py)."""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest

from mix_assets.core import keys, lineage, objects
from mix_assets.core.storage import Storage
from mix_assets.core.transport import IntegrityError


def test_the_key_moves_with_code_config_and_every_input_and_with_nothing_else():
    base = keys.artifact_key("dedup_keys", "abc123", {"raw/web": "k1", "raw/code": "k2"})
    assert base == keys.artifact_key("dedup_keys", "abc123", {"raw/code": "k2", "raw/web": "k1"})  # order
    assert len(base) == 64 and int(base, 16) >= 0
    others = [
        keys.artifact_key("dedup_keys", "abc124", {"raw/web": "k1", "raw/code": "k2"}),  # code or config
        keys.artifact_key("dedup_keys", "abc123", {"raw/web": "k1x", "raw/code": "k2"}),  # an input's key
        keys.artifact_key("dedup_keys", "abc123", {"raw/web": "k1"}),  # an input less
        keys.artifact_key("exclusion_masks", "abc123", {"raw/web": "k1", "raw/code": "k2"}),  # another asset
    ]
    assert len({base, *others}) == 5


def test_a_files_fingerprint_is_their_relative_paths_sizes_and_bytes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        (d / "sub").mkdir(parents=True)
        (d / "x.jsonl").write_text('{"text": "one"}\n')
        (d / "sub" / "y.jsonl").write_text('{"text": "two"}\n')
    fa = keys.files_fingerprint(keys.folder_files(a))
    assert fa == keys.files_fingerprint(keys.folder_files(b))  # another checkout path: the same
    (b / "sub" / "y.jsonl").write_text('{"text": "tw0"}\n')  # same size, other bytes
    assert keys.files_fingerprint(keys.folder_files(b)) != fa
    (b / "sub" / "y.jsonl").write_text('{"text": "two"}\n')
    os.rename(b / "sub" / "y.jsonl", b / "sub" / "z.jsonl")  # same bytes, another name
    assert keys.files_fingerprint(keys.folder_files(b)) != fa
    with pytest.raises(FileNotFoundError):
        keys.files_fingerprint([a / "missing.jsonl"])


def test_hashing_a_100_mb_file_costs_well_under_a_second(tmp_path):
    """What a root's fingerprint costs per 100 MB of source (printed; the bound is loose on a shared machine)."""
    p = tmp_path / "big.bin"
    with open(p, "wb") as f:
        for _ in range(100):
            f.write(os.urandom(1 << 20))
    t0 = time.perf_counter()
    keys.files_fingerprint([p])
    secs = time.perf_counter() - t0
    print(f"files_fingerprint of 100 MiB: {secs:.3f} s")
    assert secs < 5


def _build(st: Storage, asset: str, body: bytes, inputs: list[str], code: str = "c1") -> dict:
    versions = lineage.verify_inputs(st, asset, inputs)
    st.write_bytes(f"{asset}/data.bin", body)
    ikeys = {n: lineage.read_record(st, n)["key"] for n in inputs} or {"files": "fp-" + body.decode()}
    return lineage.write_record(st, asset, [f"{asset}/data.bin"], versions, code, input_keys=ikeys)


@pytest.fixture
def keyed_chain(tmp_path) -> Storage:
    st = Storage(str(tmp_path / "root"))
    _build(st, "raw", b"docs", [])
    _build(st, "keys", b"keys", ["raw"])
    return st


def test_records_carry_their_key_and_input_keys(keyed_chain):
    raw, k = lineage.read_record(keyed_chain, "raw"), lineage.read_record(keyed_chain, "keys")
    assert raw["input_keys"] == {"files": "fp-docs"} and raw["key"] == keys.artifact_key("raw", "c1", raw["input_keys"])
    assert k["input_keys"] == {"raw": raw["key"]}
    lineage.verify_inputs(keyed_chain, "split", ["keys"], code_versions={"raw": "c1", "keys": "c1"})


def test_a_record_whose_key_is_not_what_produced_it_is_refused_naming_it(keyed_chain):
    rec = lineage.read_record(keyed_chain, "raw")
    keyed_chain.write_text(lineage.record_key("raw"), json.dumps({**rec, "key": "f" * 64}))
    with pytest.raises(lineage.StaleInputError) as e:
        lineage.verify_inputs(keyed_chain, "split", ["keys"], code_versions={"raw": "c1", "keys": "c1"})
    assert "raw's artifact key ffffffffffff is not the one" in str(e.value)
    assert e.value.rematerialise == ["raw", "keys"]


def test_an_input_rebuilt_to_the_same_bytes_under_another_key_makes_its_consumers_stale(keyed_chain):
    """Same data_version (bytes), another key (here its files' fingerprint): the old check passed it."""
    st = keyed_chain
    rec = lineage.read_record(st, "raw")
    lineage.write_record(st, "raw", rec["outputs"], {}, "c1", input_keys={"files": "fp-other"})
    lineage.verify_inputs(st, "split", ["keys"])  # without code_versions: bytes only, as before
    with pytest.raises(lineage.StaleInputError) as e:
        lineage.verify_inputs(st, "split", ["keys"], code_versions={"raw": "c1", "keys": "c1"})
    assert "keys was computed from raw key" in str(e.value) and e.value.rematerialise == ["keys"]


def test_blobs_are_written_once_restored_atomically_and_refused_when_changed(tmp_path):
    st = Storage(str(tmp_path / "root"))
    st.write_bytes("mix/train/a.bin", b"tokens")
    sha = st.sha256("mix/train/a.bin")
    assert objects.put_object(st, "mix/train/a.bin", sha) is True
    assert objects.put_object(st, "mix/train/a.bin", sha) is False  # never overwritten
    blob = tmp_path / "root" / objects.object_key(sha)
    assert blob.read_bytes() == b"tokens" and blob.stat().st_ino == (tmp_path / "root/mix/train/a.bin").stat().st_ino
    st.write_bytes("mix/train/a.bin", b"other")  # a rewrite (temp + rename) leaves the blob as it was
    assert blob.read_bytes() == b"tokens"
    objects.restore_object(st, sha, "mix/train/b.bin")
    assert st.read_bytes("mix/train/b.bin") == b"tokens"
    st.write_bytes("mix/train/d.bin", b"not what the caller recorded")
    other = hashlib.sha256(b"what the caller recorded").hexdigest()
    with pytest.raises(IntegrityError, match="does not hash to its recorded"):
        objects.put_object(st, "mix/train/d.bin", other)  # changed since recorded: no blob under that name
    assert not st.exists(objects.object_key(other)) and st.list(objects.OBJECTS) == [objects.object_key(sha)]
    st.delete("mix/train/b.bin")
    with open(blob, "r+b") as f:  # damaged in place
        f.write(b"T")
    assert "not its name" in objects.blob_problem(st, sha)
    with pytest.raises(objects.CorruptObject, match="changed in the object store"):
        objects.restore_object(st, sha, "mix/train/c.bin")
    assert not st.exists("mix/train/c.bin")
