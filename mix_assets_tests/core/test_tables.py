"""core/tables.py: returning freed allocator pages between the phases of a reduce."""

import hashlib

import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.core import tables


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
