"""The exactness check's sample (`exactness.choose`) is built on Arrow and numpy columns (issue 29: the Python lists
of every row's doc id and source grew the check's process with the corpus) and is the sample the per-row Python
version chose."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pyarrow as pa

from mix_assets.core.seeded import unit_hash
from mix_assets.stages.tokens import exactness


def _reference_choose(app: pa.Table, seed: int) -> tuple[dict, dict]:
    """The per-row Python version `choose` replaced (main at b266526), kept as the reference."""
    out, docs = {}, {}
    sources = app.column("source").to_pylist()
    ids = app.column("doc_id").to_pylist()
    tokens = app.column("tokens").to_numpy()
    by_source: dict[str, list[int]] = {}
    for i, s in enumerate(sources):
        by_source.setdefault(s, []).append(i)
    for s, rows in sorted(by_source.items()):
        rows = np.asarray(rows, np.int64)
        docs[s] = len({ids[i] for i in rows})
        k = exactness.sample_size(len(rows))
        h = np.fromiter((unit_hash(seed, f"exact:{ids[i]}") for i in rows), np.float64, len(rows))
        drawn = rows[np.lexsort((rows, h))[:k]]
        longest = rows[np.argsort(-tokens[rows], kind="stable")[:exactness.LONGEST]]
        out[s] = np.unique(np.concatenate([drawn, longest]))
    return out, docs


def _app(n: int, seed: int = 3) -> pa.Table:
    """An appearances table of `n` rows over 4 interleaved sources (one small, one absent from train), doc ids
    repeated across the splits, equal token counts (ties for the longest)."""
    rng = np.random.default_rng(seed)
    src = rng.choice(np.array(["web", "books", "code", "tiny"]), n, p=[0.5, 0.3, 0.1995, 0.0005])
    split = np.where(np.arange(n) < n * 0.9, "train", "val")
    doc = rng.integers(0, n, n)  # some doc ids twice (in train and in val)
    return pa.table({"split": pa.array(split), "start": pa.array(np.arange(n, dtype=np.int64) * 10),
                     "tokens": pa.array(rng.integers(1, 50, n).astype(np.int64)),
                     "source": pa.array(src).dictionary_encode().cast(pa.string()),
                     "doc_id": pa.array([f"{s}/{d:08d}" for s, d in zip(src.tolist(), doc.tolist())])})


def test_choose_picks_the_same_rows_and_counts_as_the_per_row_version():
    for n, seed in ((0, 1), (7, 2), (3_000, 5), (150_000, 11)):
        app = _app(n, seed)
        got, docs = exactness.choose(app, seed)
        want, want_docs = _reference_choose(app, seed)
        assert docs == want_docs
        assert list(got) == list(want)  # sources in name order
        for s in want:
            assert got[s].dtype == np.int64 and np.array_equal(got[s], want[s]), s


def test_choose_holds_no_python_object_per_row():
    """Python-heap peak of `choose` over 200,000 rows: the old per-row lists took >= 100 B a row (a str per doc id
    and per source, an int per row index); the columns take ~8 B a row per numpy array."""
    n = 200_000
    app = _app(n)
    tracemalloc.start()
    try:
        exactness.choose(app, 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak / n < 40, f"{peak / n:.0f} B a row"


def test_first_rows_are_the_group_bys_first_appearances():
    """`_first_rows` (dictionary encoding + numpy) gives the rows the hash aggregation gave: each doc id's first row,
    nulls one value, ascending."""
    rng = np.random.default_rng(4)
    for n in (0, 1, 5_000):
        vals = [None if v == 0 else f"d{v}" for v in rng.integers(0, max(n // 3, 1), n).tolist()]
        ids = pa.array(vals, pa.string())
        t = pa.table({"doc_id": ids, "i": pa.array(np.arange(n, dtype=np.int64))})
        want = np.sort(t.group_by(["doc_id"], use_threads=False).aggregate([("i", "min")]).column("i_min").to_numpy())
        got = exactness._first_rows(ids)
        assert got.dtype == np.int64 and np.array_equal(got, want)
