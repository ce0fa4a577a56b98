"""The serial steps' faster code against the code as first written (support/serial_reference.py)."""

import random

import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.lib import dedup
from mix_assets_tests.support import serial_reference as ref


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
