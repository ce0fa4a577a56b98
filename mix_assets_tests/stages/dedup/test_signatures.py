"""stages/dedup/signatures.py: shingle sets spilled to disk give lsh.set_jaccard's numbers, a bounded chunk at a time."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mix_assets.core import engine
from mix_assets.stages.dedup import lsh, minhash
from mix_assets.stages.dedup import signatures as sig


def test_spilled_sets_equal_in_memory_sets_whatever_the_chunk(tmp_path):
    rng = np.random.default_rng(0)
    texts = [" ".join(f"w{x}" for x in rng.integers(0, 60, rng.integers(0, 40))) for _ in range(300)]
    paths = {}
    for k, s in enumerate(["a", "b"]):
        paths[s] = str(tmp_path / f"{s}.parquet")
        pq.write_table(pa.table({"text": texts[k * 150:(k + 1) * 150]}), paths[s], row_group_size=40)
    need = np.sort(rng.choice(300, 120, replace=False))
    (tmp_path / "spill").mkdir()
    sets = sig.shingle_reader(paths, {"a": 0, "b": 150}, 5, str(tmp_path / "spill"), batch_rows=33)(need)
    values, offsets = minhash.shingle_sets([texts[i] for i in need], 5)
    assert len(sets) == len(need) and np.array_equal(sets.offsets, offsets)
    a, b = rng.integers(0, len(need), 500), rng.integers(0, len(need), 500)
    want = lsh.set_jaccard(values, offsets, a, b)
    for chunk in (1, 50, 1 << 21):
        assert np.array_equal(sets.jaccard(a, b, chunk=chunk), want)
    # one task per row group on the engine: the same spill file with 1, 2 or 4 threads (chunk order kept)
    spill = (tmp_path / "spill" / "shingles-0.u64").read_bytes()
    for k, workers in enumerate((1, 2, 4)):
        (tmp_path / f"spill{k}").mkdir()
        got = sig.shingle_reader(paths, {"a": 0, "b": 150}, 5, str(tmp_path / f"spill{k}"), batch_rows=33,
                                 eng=engine.Engine(num_cpus=workers))(need)
        assert np.array_equal(got.offsets, offsets) and open(got.path, "rb").read() == spill
        for chunk in (1, 50, 1 << 21):  # and the chunks of pairs compared as tasks give the same numbers
            assert np.array_equal(got.jaccard(a, b, chunk=chunk), want)


def test_regroup_holds_only_the_unwritten_rows_between_groups():
    sch = pa.schema([("x", pa.int64())])
    # Arrow-allocated inputs (pc.add copies), so the pool counts what regroup keeps alive
    parts = (pa.table({"x": pc.add(pa.array(np.arange(k * 1000, (k + 1) * 1000)), 0)}) for k in range(10))
    groups = sig.regroup(parts, 2500, sch)
    base = pa.total_allocated_bytes()
    seen = []
    for g in groups:
        seen.append(g.column(0).to_numpy().copy())
        del g
        # between groups: at most the input table being cut (1000 rows), not the consumed chunks or the group
        assert pa.total_allocated_bytes() - base <= 1000 * 8
    assert [len(s) for s in seen] == [2500] * 4 and np.array_equal(np.concatenate(seen), np.arange(10000))


def test_stored_columns_equal_with_the_files_held_open(tmp_path):
    rng = np.random.default_rng(5)
    sch, files, sigs = sig.schema(8, sig.describe(None, 8, 5, 1)), [], []
    for i, n in enumerate([30, 0, 57]):
        s = rng.integers(0, 2**32, (n, 8), dtype=np.uint32)
        t = sig.table(pa.array([f"d{i}-{k}" for k in range(n)], pa.string()), [None] * n, np.zeros(n, np.int64),
                      np.zeros(n, np.int64), np.zeros(n, np.int64), s, sch)
        files.append(str(tmp_path / f"{i}.parquet"))
        pq.write_table(t, files[-1], row_group_size=13)
        sigs.append(s)
    stored, want = sig.Stored(files, 8), np.concatenate(sigs)
    with stored.held():
        held = [stored.columns(b, b + 4) for b in (0, 4, 2)]
    assert stored._held is None  # closed on exit: later calls open their own
    for got, b in zip(held, (0, 4, 2)):
        assert (got == want[:, b:b + 4]).all() and (stored.columns(b, b + 4) == got).all()


def test_the_signatures_reuse_key_covers_every_module_minhash_reaches():
    from mix_assets.core import imports

    # derived, not listed: an edit to textkeys or kernels_jit (reached through minhash) re-signs stored files
    assert sig._CODE == imports.source_version("mix_assets.stages.dedup.minhash")[:16]
    assert {"mix_assets.core.textkeys", "mix_assets.core.kernels_jit"} <= set(
        imports.reached("mix_assets.stages.dedup.minhash"))
