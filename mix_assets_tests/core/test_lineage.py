"""Content-hash lineage: records, the upstream walk, and what the error tells the user to redo."""

from __future__ import annotations

import pytest

from mix_assets.core import lineage
from mix_assets.core.storage import Storage


def build(st: Storage, asset: str, body: bytes, inputs: list[str]) -> dict:
    """Materialise `asset` as the graph does: verify inputs, write the file, then the record."""
    versions = lineage.verify_inputs(st, asset, inputs)
    st.write_bytes(f"{asset}/data.bin", body)
    return lineage.write_record(st, asset, [f"{asset}/data.bin"], versions)


@pytest.fixture
def chain(tmp_path) -> Storage:
    """raw -> keys -> masks -> split, plus a second source raw2 -> keys."""
    st = Storage(str(tmp_path / "root"))
    build(st, "raw", b"docs v1", [])
    build(st, "raw2", b"other docs", [])
    build(st, "keys", b"keys v1", ["raw", "raw2"])
    build(st, "masks", b"masks v1", ["keys", "raw"])
    return st


def test_consistent_chain_gives_current_versions(chain):
    got = lineage.verify_inputs(chain, "split", ["masks", "raw"])
    assert got == {"masks": lineage.read_record(chain, "masks")["data_version"],
                   "raw": lineage.read_record(chain, "raw")["data_version"]}


def test_rebuilt_source_makes_every_consumer_stale_upstream_first(chain):
    build(chain, "raw", b"docs v2", [])
    with pytest.raises(lineage.StaleInputError) as e:
        lineage.verify_inputs(chain, "split", ["masks", "raw"])
    assert e.value.rematerialise == ["keys", "masks"]
    assert "keys was computed from raw" in str(e.value) and "(then split)" in str(e.value)


def test_same_bytes_rebuilt_are_not_stale(chain):
    build(chain, "raw", b"docs v1", [])  # a refresh that read identical bytes
    lineage.verify_inputs(chain, "split", ["masks", "raw"])


def test_edited_or_missing_file_is_named(chain):
    with open(chain.local_path("keys/data.bin"), "wb") as f:
        f.write(b"tampered")
    with pytest.raises(lineage.StaleInputError, match="keys: keys/data.bin hashes to"):
        lineage.verify_inputs(chain, "masks2", ["keys"])
    chain.delete("masks/data.bin")
    with pytest.raises(lineage.StaleInputError, match="masks/data.bin is missing"):
        lineage.verify_inputs(chain, "split", ["masks"])


def test_killed_write_before_its_record_counts_as_changed(chain):
    chain.write_bytes("keys/data.bin", b"keys v2, record never written")
    with pytest.raises(lineage.StaleInputError) as e:
        lineage.verify_inputs(chain, "split", ["masks", "keys"])
    assert "changed since keys was materialised" in str(e.value) and e.value.rematerialise == ["keys", "masks"]
    # a consumer that reads only masks (computed from the recorded keys bytes) is unaffected
    lineage.verify_inputs(chain, "split", ["masks"])


def test_never_materialised_input(chain):
    with pytest.raises(lineage.StaleInputError, match="tokenizer has no lineage record"):
        lineage.verify_inputs(chain, "shards", ["tokenizer", "masks"])


def test_record_of_another_asset_is_refused(chain):
    chain.write_text(lineage.record_key("keys"), chain.read_text(lineage.record_key("raw")))
    with pytest.raises(ValueError, match="not a lineage record of keys"):
        lineage.verify_inputs(chain, "masks", ["keys"])


def test_record_of_another_code_version_is_refused(tmp_path):
    """Each record carries its asset's code_version; a consumer refuses one whose version is not the current
    one (another config or code), anywhere upstream, and names it with what to redo, upstream first."""
    st = Storage(str(tmp_path / "root"))
    st.write_bytes("raw/x", b"docs")
    lineage.write_record(st, "raw", ["raw/x"], {}, "r1")
    keys = lineage.verify_inputs(st, "keys", ["raw"], code_versions={"raw": "r1"})
    st.write_bytes("keys/x", b"keys")
    lineage.write_record(st, "keys", ["keys/x"], keys, "k1")
    assert lineage.read_record(st, "keys")["code_version"] == "k1"
    now = {"raw": "r1", "keys": "k1"}
    got = lineage.verify_inputs(st, "split", ["keys"], code_versions=now)
    assert got == {"keys": lineage.read_record(st, "keys")["data_version"]}
    with pytest.raises(lineage.StaleInputError) as e:
        lineage.verify_inputs(st, "split", ["keys"], code_versions={**now, "raw": "r2"})  # raw's config edited
    msg = str(e.value)
    assert "raw was materialised under another config or code: recorded code_version r1, current r2" in msg
    assert e.value.rematerialise == ["raw", "keys"]
    with pytest.raises(lineage.StaleInputError, match="keys was materialised under another config or code"):
        lineage.verify_inputs(st, "split", ["keys"], code_versions={**now, "keys": "k2"})
    # names the consumer has no version for (a check's record) are not versioned
    lineage.verify_inputs(st, "split", ["keys"], code_versions={"keys": "k1"})


def test_a_code_version_changed_only_through_its_chain_names_the_changed_asset_upstream(tmp_path):
    """code_versions chain (stages/common.chain_code_versions): after raw's config is edited, keys' and
    split's versions differ too. Only raw is said to be under another config; the others name raw as what
    changed upstream of them, after it, and the order to redo stays upstream first."""
    st = Storage(str(tmp_path / "root"))
    st.write_bytes("raw/x", b"docs")
    lineage.write_record(st, "raw", ["raw/x"], {}, "r1")
    st.write_bytes("keys/x", b"keys")
    lineage.write_record(st, "keys", ["keys/x"], lineage.verify_inputs(st, "keys", ["raw"]), "k1")
    st.write_bytes("split/x", b"split")
    lineage.write_record(st, "split", ["split/x"], lineage.verify_inputs(st, "split", ["keys"]), "s1")
    with pytest.raises(lineage.StaleInputError) as e:
        lineage.verify_inputs(st, "tokens", ["split"], code_versions={"raw": "r2", "keys": "k2", "split": "s2"})
    lines = [x.strip("- ") for x in str(e.value).splitlines()[1:4]]
    assert lines[0] == ("raw was materialised under another config or code: recorded code_version r1, current r2; "
                        "re-materialise raw with the current config"), lines
    assert lines[1].startswith("keys was materialised before the config or code of raw upstream changed"), lines
    assert lines[2].startswith("split was materialised before the config or code of raw upstream changed"), lines
    assert e.value.rematerialise == ["raw", "keys", "split"]


def test_record_without_code_version_counts_as_another(tmp_path):
    st = Storage(str(tmp_path / "root"))
    build(st, "raw", b"docs", [])  # written as older code did: no code_version
    assert "code_version" not in lineage.read_record(st, "raw")
    lineage.verify_inputs(st, "keys", ["raw"])  # without versions: as before
    with pytest.raises(lineage.StaleInputError) as e:
        lineage.verify_inputs(st, "keys", ["raw"], code_versions={"raw": "r1"})
    assert "recorded code_version none (a record written by older code), current r1" in str(e.value)
    assert e.value.rematerialise == ["raw"]
