import numpy as np
import pyarrow as pa

from mix_assets.core.idset import IdSet


def test_membership_is_exact_for_unicode_prefixes_trailing_nuls_long_ids_and_nulls():
    members = ["s-00ff", "s-00f", "Ελληνικά-1", "a\x00", "", "zz"]
    ids = IdSet(pa.chunked_array([pa.array(members[:3]), pa.array(members[3:] + ["zz", None])]))
    assert len(ids) == 6
    queries = pa.array(["s-00ff", "s-00f", "s-00", "s-00ff0", "Ελληνικά-1", "Ελληνικά-2", "a\x00", "a",
                        "a\x00\x00", "", None, "z" * 100, "zz"])
    want = [q is not None and q in members for q in queries.to_pylist()]
    assert ids.contains(queries).tolist() == want
    assert ids.contains(queries.slice(3, 5)).tolist() == want[3:8]  # sliced arrays (non-zero offset)
    assert ids.ids() == sorted(members)
    pos = ids.index(pa.array(["zz", "nope"]))
    assert ids.ids()[pos[0]] == "zz" and pos[1] == -1


def test_empty_sets_and_queries():
    assert IdSet().contains(pa.array(["a"])).tolist() == [False]
    assert IdSet(["a"]).contains(pa.array([], pa.string())).tolist() == []
    assert len(IdSet(pa.array([None], pa.string()))) == 0


def test_bytes_per_id_is_the_width():
    ids = IdSet(pa.array([f"source-{i:016x}" for i in range(1000)]))
    assert ids.width == len("source-") + 16 + 1 and ids.keys.nbytes == 1000 * ids.width
    assert ids.contains(pa.array([f"source-{i:016x}" for i in range(990, 1010)])).tolist() == [True] * 10 + [False] * 10
    assert isinstance(ids.keys, np.ndarray)
