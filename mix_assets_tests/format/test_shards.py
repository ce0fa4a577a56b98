"""format/shards.py: the one writer and the one reader of the token shards' bytes.

The round trip is checked against an encoding written out by hand (little-endian, no header, samples
back to back), on both dtypes; the source scan pins that no module outside mix_assets/format/ encodes or
decodes shard bytes itself.
"""

import ast
import hashlib
import io
from pathlib import Path

import numpy as np
import pytest

import mix_assets
from mix_assets.core import layout
from mix_assets.core.storage import Storage
from mix_assets.format import docindex, shards

PACKAGE = Path(mix_assets.__file__).parent


@pytest.mark.parametrize("dtype,top", [("uint16", (1 << 16) - 1), ("uint32", (1 << 32) - 1)])
def test_writer_and_reader_round_trip_the_documented_bytes(tmp_path, dtype, top):
    L, n = 5, 3
    tokens = np.array([0, 1, 258, top, top - 1, *range(7, 7 + L * n - 5)], np.int64)
    size = 2 if dtype == "uint16" else 4
    by_hand = b"".join(int(t).to_bytes(size, "little") for t in tokens)  # the format, written out
    st = Storage(str(tmp_path / "st"))
    w = shards.ShardWriter(st, "val", L, dtype)
    rec = w.shard(2, tokens.astype(np.dtype(dtype)))
    ix = w.doc_index(2, np.array([0, 4, 11]))
    key = layout.SHARD.format(split="val", index=2)
    data = Path(st.local_path(key)).read_bytes()
    assert data == by_hand == shards.to_bytes(tokens, dtype)
    assert (rec.path, rec.samples, rec.bytes, rec.sha256) == (
        "val/val-00002.bin", n, len(by_hand), hashlib.sha256(by_hand).hexdigest())
    assert rec.bytes == shards.shard_bytes(n, L, dtype)
    ix_data = Path(st.local_path(layout.DOC_INDEX.format(split="val", index=2))).read_bytes()
    assert ix == {"path": "doc_index/val/val-00002.docs.npy", "bytes": len(ix_data),
                  "sha256": hashlib.sha256(ix_data).hexdigest(), "documents": 3}
    assert docindex.from_bytes(ix_data, "ix", n * L).tolist() == [0, 4, 11]

    want = tokens.reshape(n, L)
    got = shards.rows(data, dtype, L)
    assert got.dtype.str == ("<u2" if dtype == "uint16" else "<u4") and (got == want).all()
    mapped = shards.map_rows(st.local_path(key), dtype, L, n)
    assert type(mapped) is np.ndarray and (mapped == want).all()
    for r in range(n):
        assert (shards.read_row(io.BytesIO(data), r, dtype, L) == want[r]).all()
    with pytest.raises(ValueError, match="short read at sample row 3"):
        shards.read_row(io.BytesIO(data), n, dtype, L, "val/val-00002.bin")
    with pytest.raises(ValueError, match="not whole samples"):
        shards.rows(data[:-size], dtype, L)
    with pytest.raises(ValueError, match="not whole samples"):
        w.shard(3, tokens[:-1])


def test_writer_on_a_writes_queue_fills_the_records_when_the_writes_run(tmp_path):
    """With `writes`, a record comes back before its file is written; its sha256 is set when the queued write
    runs, and the files and records are those of a direct writer."""
    tokens = np.arange(12, dtype=np.uint16)
    direct = shards.ShardWriter(Storage(str(tmp_path / "a")), "train", 4, "uint16")
    queued: list = []
    later = shards.ShardWriter(Storage(str(tmp_path / "b")), "train", 4, "uint16", writes=type(
        "Q", (), {"submit": lambda self, fn: queued.append(fn)})())
    recs = [(w.shard(0, tokens), w.doc_index(0, np.array([0, 5]))) for w in (direct, later)]
    key = layout.SHARD.format(split="train", index=0)
    assert len(queued) == 2 and not (tmp_path / "b" / key).exists() and recs[1][0].sha256 == recs[1][1]["sha256"] == ""
    tokens[:] = 0  # the caller reuses its buffer: the writer holds its own copy
    for fn in queued:
        fn()
    assert (tmp_path / "b" / key).read_bytes() == (tmp_path / "a" / key).read_bytes()
    assert recs[1] == recs[0] and recs[0][0].sha256


def test_dtypes_are_the_manifests_two_little_endian_ones():
    assert shards.token_dtype("uint16").str == "<u2" and shards.token_dtype(np.dtype("<u4")).str == "<u4"
    for bad in ("int32", "uint8", np.dtype(">u2"), np.dtype("<i4")):
        with pytest.raises(ValueError, match="is not one of"):
            shards.token_dtype(bad)
    assert shards.dtype_for_vocab(65536) == "uint16" and shards.dtype_for_vocab(65537) == "uint32"


# Functions outside mix_assets/format/ that encode or decode arrays that are not shards.
NOT_SHARDS = {
    "_Spill.append", "_SpillReader.read", "_SpillReader.gather",  # stages/tokens/shards.py: the encode spill (scratch)
    "_spill_buckets", "_pack.row_groups",  # stages/tokens/shards.py: pass 2's appearance records (keys, positions)
    "ByteDecoder.of", "ByteDecoder.texts", "ByteDecoder._redecode",  # stages/tokens/bytelevel.py: byte tables
    "perm_sha",  # reader: the hash of a shuffle permutation
    # stages/tokens/idcache.py: the token-id cache (text keys, Arrow offsets, ids in format/shards' token_dtype;
    # a cache under the storage root, never published)
    "text_keys", "_fixed", "SourceHits.read", "TokenCache.locate", "TokenCache.write",
    "TokenCache.stored_text_keys", "TokenCache.file_text_keys",  # raw text keys (16 B a row), never token ids
    "TiktokenEncoder._array",  # stages/tokens/backends.py: tiktoken's output buffer of ids, before any shard
    # stages/audit/published.py: the known-clean documents' xxh3-128 digests (a hash of ids already decoded by
    # format/shards, and 16-byte digest rows stored as a blob), never shard bytes
    "doc_digests", "load_known_clean", "file_known_clean",
}
# Where shard bytes could be handled: the stages that write, check, publish or audit shards, and the reader.
SHARD_USERS = ("reader", "stages/tokens", "stages/audit", "stages/manifest", "stages/publish", "stages/common.py",
               "audit_published.py", "definitions.py", "jobs.py", "resources.py", "ray_engine.py", "config.py")
ARRAY_IO = {"frombuffer", "fromfile", "memmap", "tobytes", "tofile"}


def _array_io_calls(path: Path) -> list[str]:
    """'qualname.call (line)' of every numpy buffer/file array read or write in the module."""
    out = []

    def visit(node, scope):
        for ch in ast.iter_child_nodes(node):
            inner = scope + [ch.name] if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else scope
            if isinstance(ch, ast.Call):
                # np.frombuffer(...), frombuffer(...) after `from numpy import frombuffer`, np.ndarray(buffer=...)
                name = ch.func.attr if isinstance(ch.func, ast.Attribute) else getattr(ch.func, "id", None)
                if name in ARRAY_IO or any(k.arg == "buffer" for k in ch.keywords):
                    out.append((".".join(scope), f"{name} (line {ch.lineno})"))
            visit(ch, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), [])
    return out


def _sources(*under: str) -> list[Path]:
    files = [p for u in under for p in ([PACKAGE / u] if u.endswith(".py") else (PACKAGE / u).rglob("*.py"))]
    return sorted(p for p in files if p.exists())


def test_the_scan_sees_each_way_of_reading_array_bytes(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import numpy as np\nfrom numpy import frombuffer, memmap\n"
                 "def a(b):\n    return np.frombuffer(b, '<u2')\n"
                 "def b(b):\n    return frombuffer(b, '<u2')\n"
                 "def c(f):\n    return memmap(f, '<u2')\n"
                 "def d(b):\n    return np.ndarray((4,), '<u2', buffer=b)\n"
                 "def e(x, f):\n    x.tofile(f)\n"
                 "def f(x):\n    return np.asarray(x).sum()\n")
    assert [scope for scope, _ in _array_io_calls(p)] == ["a", "b", "c", "d", "e"]


def test_no_module_outside_format_encodes_or_decodes_shard_bytes():
    found = [f"{p.relative_to(PACKAGE)}: {scope or '<module>'} calls {call}"
             for p in _sources(*SHARD_USERS) for scope, call in _array_io_calls(p) if scope not in NOT_SHARDS]
    assert found == [], "shard bytes are read and written through mix_assets/format/shards.py:\n" + "\n".join(found)


def test_only_format_names_the_shard_dtype_and_writes_shard_files():
    """The little-endian token dtype, its item size and the shard / document index file keys appear in
    format/ alone."""
    needles = ('newbyteorder("<")', '== "uint16"', "layout.SHARD.", "layout.DOC_INDEX.")
    found = [f"{p.relative_to(PACKAGE)}:{i}: {line.strip()}"
             for p in _sources(".") if PACKAGE / "format" not in p.parents
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if any(n in line for n in needles)]
    assert found == []
