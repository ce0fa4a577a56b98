"""core/tables.py: returning freed allocator pages between the phases of a reduce; write_parquet_groups' options."""

import hashlib

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mix_assets.core import tables
from mix_assets.core.storage import Storage


def _rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def test_release_unused_returns_a_hash_tables_pages():
    keys = pa.array([hashlib.sha256(str(i).encode()).hexdigest() for i in range(300_000)], pa.string())
    tables.release_unused()
    before, held = _rss(), pa.total_allocated_bytes()
    enc = pc.dictionary_encode(keys)  # its hash table is freed on return; the pool keeps its pages
    del enc
    assert pa.total_allocated_bytes() == held
    tables.release_unused()
    assert _rss() - before < 16 * 2**20


def test_write_parquet_groups_default_bytes_and_other_options_same_content(tmp_path):
    """Without `options` a single table gives write_parquet's bytes (every other stage's files unchanged); with
    other options (line_dedup's documents file) the same table is read back, in the same row groups."""
    t = pa.table({"text": pa.array([f"line {i}\nmore {i % 7}" for i in range(3000)], pa.large_string()),
                  "n": pa.array(range(3000), pa.int64())})
    st = Storage(root=str(tmp_path))
    tables.write_parquet(st, "a.parquet", t)
    tables.write_parquet_groups(st, "b.parquet", t.schema, [t])
    assert st.sha256("a.parquet") == st.sha256("b.parquet")
    tables.write_parquet_groups(st, "c.parquet", t.schema, [t.slice(0, 1000), t.slice(1000)],
                                {**tables.WRITER_OPTIONS, "compression": "lz4"})
    got = pq.ParquetFile(st.source("c.parquet"))
    assert got.metadata.row_group(0).column(0).compression.startswith("LZ4")
    assert [got.metadata.row_group(i).num_rows for i in range(got.num_row_groups)] == [1000, 2000]
    assert got.read().equals(t) and st.sha256("c.parquet") != st.sha256("b.parquet")
