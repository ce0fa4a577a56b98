"""core/chunks.py: chunk parts keyed by what computed them, stored atomically, and a resume that maps only the
chunks without a part, in chunk order."""

import pyarrow as pa

from mix_assets.core import chunks, engine
from mix_assets.core.storage import Storage

META = {"format": "x/1", "raw": "v1", "params": {"k": 1}, "code": "abc"}


def test_the_key_changes_with_the_source_meta_and_row_range_only():
    k = chunks.part_key("filters", "web", META, 0, 10)
    assert k == chunks.part_key("filters", "web", dict(reversed(list(META.items()))), 0, 10)  # canonical JSON
    others = [chunks.part_key("signatures", "web", META, 0, 10), chunks.part_key("filters", "books", META, 0, 10),
              chunks.part_key("filters", "web", {**META, "raw": "v2"}, 0, 10),
              chunks.part_key("filters", "web", {**META, "params": {"k": 2}}, 0, 10),
              chunks.part_key("filters", "web", {**META, "code": "abd"}, 0, 10),
              chunks.part_key("filters", "web", META, 0, 11), chunks.part_key("filters", "web", META, 1, 10)]
    assert len({k, *others}) == 8
    parts = chunks.Parts(Storage("/nowhere"), "filters")
    assert parts.key("web", {**META, "raw": None}, engine.RowRange("f", 0, 10)) is None  # no raw version: no part


def test_put_get_present_drop(tmp_path):
    st = Storage(str(tmp_path))
    parts = chunks.Parts(st, "filters")
    t = pa.table({"a": [1, 2, 3]}).replace_schema_metadata({b"docs": b"3"})
    assert parts.get("k1") is None and parts.present(["k1", None]) == set()
    parts.put("k1", t)
    assert parts.get("k1").equals(t) and parts.get("k1").schema.metadata == {b"docs": b"3"}
    assert st.list("parts") == ["parts/filters/k1.arrow"]  # no temporary file left beside it
    assert parts.present(["k1", "k2", None]) == {"k1"}
    parts.drop(["k1", None])
    assert st.list("parts") == []


def test_resume_maps_only_the_missing_chunks_in_chunk_order(tmp_path):
    parts = chunks.Parts(Storage(str(tmp_path)), "test")
    for k in ("c0", "c2"):
        parts.put(k, pa.table({"x": [f"stored {k}"]}))
    calls = []

    def fn(c):
        calls.append(c)
        return pa.table({"x": [f"computed {c}"]})

    got = list(chunks.resume(fn, [0, 1, 2, 3], ["c0", "c1", "c2", None], engine.Engine(num_cpus=2), parts))
    assert [t.column("x")[0].as_py() for t, _ in got] == ["stored c0", "computed 1", "stored c2", "computed 3"]
    assert [r is None for _, r in got] == [True, False, True, False] and sorted(calls) == [1, 3]
    assert parts.present(["c1"]) == {"c1"} and len(parts.storage.list("parts/test")) == 3  # None key: not stored
    assert chunks.resumed_line("s", "web", ["c0", "c1", "c2"], {"c0", "c2"}) == \
        "s: resumed web at chunk 2 of 3 (2 chunks from a killed run)"
    assert chunks.resumed_line("s", "web", ["c0"], set()) is None
