"""The serial steps' faster code against the code as first written (oracles/serial_reference.py)."""

import random

import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.stages.dedup import dedup
from mix_assets_tests.oracles import serial_reference as ref


def _raw(path, source: str, n: int, rng: random.Random, row_group: int) -> str:
    ids = [f"{source}-{rng.getrandbits(48):012x}" for _ in range(n)]
    texts = [None if rng.random() < 0.05 else " ".join(rng.choice(["a", "bb", "c\n", "\tdd", "é"]) * rng.randrange(1, 9)
                                                         for _ in range(rng.randrange(0, 120))) for _ in range(n)]
    pq.write_table(pa.table({"doc_id": ids, "source": [source] * n, "text": pa.array(texts, pa.large_string())}),
                   path, row_group_size=row_group)
    return str(path)


def test_snippets_match_the_first_version(tmp_path):
    rng = random.Random(20)
    paths = {s: _raw(tmp_path / f"{s}.parquet", s, 700, rng, rg) for s, rg in [("b", 64), ("a", 1000), ("c", 7)]}
    every = [d for p in paths.values() for d in pq.read_table(p, columns=["doc_id"]).column(0).to_pylist()]
    for k in (0, 1, 5, 40, 2000):
        wanted = set(rng.sample(every, min(k, len(every)))) | {"missing-id"}
        for chars in (240, 3):
            new, old = dedup.snippets(paths, wanted, chars), ref.snippets(paths, wanted, chars)
            assert list(new.items()) == list(old.items())


def _kept_inputs(tmp_path, rng: random.Random, sources="abc", prefixed=False):
    raws, keys = {}, []
    for s in sources:
        # suffixed: sources interleave in dedup_keys' doc_id order; prefixed: each source's rows are together
        ids = [f"{s}-{rng.getrandbits(40):010x}" if prefixed else f"{rng.getrandbits(40):010x}-{s}"
               for _ in range(rng.randrange(300, 900))]
        raws[s] = str(tmp_path / f"raw_{s}.parquet")
        pq.write_table(pa.table({"doc_id": ids, "source": [s] * len(ids), "n_bytes": [rng.randrange(9) for _ in ids]}),
                       raws[s], row_group_size=rng.choice([50, 1000]))
        keys += [(d, s) for d in ids]
    keys += [(f"{rng.getrandbits(40):010x}-z", rng.choice(["z", "a"])) for _ in range(200)]  # not raw documents
    keys.sort()
    dk = str(tmp_path / "dedup_keys.parquet")
    pq.write_table(pa.table({"doc_id": [d for d, _ in keys], "source": [s for _, s in keys],
                             "cluster_id": [f"c{rng.randrange(300)}" for _ in keys],
                             "exact_key": [rng.choice([None, f"k{rng.randrange(500)}"]) for _ in keys]}),
                   dk, row_group_size=333)
    ex = str(tmp_path / "masks.parquet")
    pq.write_table(pa.table({"doc_id": [d for d, _ in keys if rng.random() < 0.2]}), ex)
    return raws, dk, ex


def test_kept_batches_match_the_first_version(tmp_path, monkeypatch):
    from mix_assets.stages.split import split

    monkeypatch.setattr(split, "KEY_BATCH_ROWS", 101)
    for seed in range(4):
        raws, dk, ex = _kept_inputs(tmp_path, random.Random(seed), prefixed=seed % 2 == 1)
        new = pa.concat_tables(split.kept_batches(raws, dk, ex))
        old = pa.concat_tables(ref.kept_batches(raws, dk, ex))
        assert new.num_rows > 500 and new.equals(old)


def test_kept_batches_refuse_unsorted_keys_and_null_clusters_as_before(tmp_path):
    from mix_assets.stages.split import split

    raws, dk, ex = _kept_inputs(tmp_path, random.Random(7))
    t = pq.read_table(dk)
    for i, bad in enumerate([t.take(list(range(t.num_rows - 1, -1, -1))),  # unsorted
                             t.set_column(2, "cluster_id", pa.array([*t.column(2).to_pylist()[:-5], None, *["c"] * 4]))]):
        path = str(tmp_path / f"bad{i}.parquet")
        pq.write_table(bad, path, row_group_size=333)
        errors = []
        for impl in (split.kept_batches, ref.kept_batches):
            try:
                list(impl(raws, path, ex))
            except split.SplitError as e:
                errors.append(str(e))
        assert len(errors) == 2 and errors[0] == errors[1]


def test_disjointness_and_sides_on_a_sorted_split_file_match_the_unskipped_reads(tmp_path, monkeypatch):
    from mix_assets.stages.split import split

    monkeypatch.setattr(split, "KEY_BATCH_ROWS", 97)
    rng = random.Random(3)
    raws, dk, ex = _kept_inputs(tmp_path, rng)
    kept = split.assign_split(pa.concat_tables(split.kept_batches(raws, dk, ex)), 5, 0.2)
    n = kept.num_rows
    kept = kept.set_column(5, "split", pa.array([rng.choice([None, "val", "train", "train"]) if i % 37 == 0 else s
                                                 for i, s in enumerate(kept.column(5).to_pylist())]))
    path = str(tmp_path / "split.parquet")
    for rows in (64, 500, n):  # row groups inside one source, spanning two, the whole file
        pq.write_table(kept, path, row_group_size=rows)
        assert split.measure_disjointness(path) == ref.measure_disjointness(path)
        new, old = split._sides(path, raws), split._sides(kept, raws)  # a table: every row group read
        assert sorted(new) == sorted(old) and all(new[s].tolist() == old[s].tolist() for s in old)
