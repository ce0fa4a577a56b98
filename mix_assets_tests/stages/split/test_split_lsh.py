"""val_disjoint_from_train's scan: LSH candidates over stored signatures, verified by exact Jaccard."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.stages.dedup import dedup
from mix_assets.core import engine
from mix_assets_tests.support import gen_corpus as gc
from mix_assets.stages.dedup.minhash import shingle_sets
from mix_assets.stages.split.split import check_bands, cross_split_near_dups, miss_probability
from mix_assets.core.storage import Storage
from mix_assets_tests.support.shared_data import FIXTURE


def _exact_jaccard(a: str, b: str) -> float:
    g, off = shingle_sets([a, b], 5)
    x, y = set(g[off[0]:off[1]].tolist()), set(g[off[1]:off[2]].tolist())
    return len(x & y) / len(x | y)


def test_the_check_banding_misses_a_pair_at_the_threshold_with_probability_under_1e_7():
    assert check_bands(128) == (32, 4)
    assert miss_probability(0.8, 32, 4) == pytest.approx((1 - 0.8**4) ** 32) and miss_probability(0.8, 32, 4) < 1e-7


def _planted(tmp_path):
    """Two sources of generated prose whose planted pairs (Jaccard 0.80-0.82) straddle the split, and
    dedup_keys' stored signature files of them."""
    model = gc.MarkovModel.from_files(sorted((FIXTURE / "sources").glob("*/*.txt")), order=1)
    c = gc.generate(model, 400, seed=11, near_dup_fraction=0.3, jaccard_range=(0.80, 0.82))
    true_j = np.array([_exact_jaccard(c.texts[a], c.texts[b]) for a, b in c.pairs])
    assert len(c.pairs) >= 100 and true_j.min() >= 0.8 and true_j.max() < 0.83
    n = len(c.texts)
    is_val = np.random.default_rng(1).random(n) < 0.05
    is_val[c.pairs[:, 0]], is_val[c.pairs[:, 1]] = True, False  # every planted pair straddles the split
    ids = [f"d{i:05d}" for i in range(n)]
    raws = {}
    for k, s in enumerate(["a", "b"]):
        idx = list(range(k, n, 2))
        raws[s] = str(tmp_path / f"{s}.parquet")
        pq.write_table(pa.table({"doc_id": [ids[i] for i in idx], "text": [c.texts[i] for i in idx],
                                 "n_chars": [len(c.texts[i]) for i in idx]}), raws[s], row_group_size=100)
    split = pa.table({"doc_id": ids, "source": [["a", "b"][i % 2] for i in range(n)],
                      "split": ["val" if v else "train" for v in is_val]})
    # dedup_keys' stored map outputs, as the asset check reads them
    st = Storage(str(tmp_path / "st"))
    dedup.sign_sources(st, raws, {"a": "v", "b": "v"}, dedup.DedupParams(), engine.Engine(chunk_rows=150))
    stored = {s: st.source(dedup.signatures_key(s)) for s in raws}
    return c, n, is_val, split, raws, stored


def test_planted_cross_split_pairs_at_080_082_are_caught_from_stored_signatures(tmp_path):
    c, n, is_val, split, raws, stored = _planted(tmp_path)
    got = cross_split_near_dups(split, raws, 0.8, signatures=stored)
    want = len(set(c.pairs[:, 0].tolist()))  # val documents with a planted train copy at J 0.80-0.82
    assert got.val_docs_with_train_near_dup == want and got.max_jaccard >= 0.8
    assert got.val_docs == int(is_val.sum()) and got.train_docs == n - got.val_docs
    assert got.pairs_compared >= len(c.pairs) and got.miss_probability < 1e-7
    # signing here (no stored file) gives the same scan
    assert cross_split_near_dups(split, raws, 0.8) == got


def test_the_scan_is_the_same_with_its_bands_as_tasks_on_two_threads(tmp_path, monkeypatch):
    from mix_assets.stages.split import split as split_lib

    _, _, _, split, raws, stored = _planted(tmp_path)
    want = cross_split_near_dups(split, raws, 0.8, signatures=stored)
    monkeypatch.setattr(split_lib, "BANDS_PER_TASK", 3)  # 32 bands: 11 tasks, the last one shorter
    for eng in (engine.Engine(num_cpus=2), engine.Engine(num_cpus=1)):
        assert cross_split_near_dups(split, raws, 0.8, signatures=stored, eng=eng) == want
        assert cross_split_near_dups(split, raws, 0.8, eng=eng) == want  # signed here: files in a temp dir



def test_the_scan_loads_the_kernels_even_when_no_pair_is_a_candidate(tmp_path):
    """The verification's kernels (numba, ~150 MB) load at the scan's start, so the check's peak does not
    depend on whether a (train, val) pair shares a band: over stored signatures and with no val side no
    pair can be a candidate (and nothing is signed), yet numba loads."""
    import subprocess
    import sys

    raws = {"a": str(tmp_path / "a.parquet")}
    pq.write_table(pa.table({"doc_id": ["d0", "d1"], "text": ["one two three four five six", "seven eight"],
                            "n_chars": [27, 11]}),
                   raws["a"])
    st = Storage(str(tmp_path / "st"))
    dedup.sign_sources(st, raws, {"a": "v"}, dedup.DedupParams(), engine.Engine(chunk_rows=150))
    stored = {"a": st.source(dedup.signatures_key("a"))}
    code = (
        "import sys, pyarrow as pa\n"
        "from mix_assets.stages.split.split import cross_split_near_dups\n"
        "split = pa.table({'doc_id': ['d0', 'd1'], 'source': ['a', 'a'], 'split': ['train', 'train']})\n"
        f"s = cross_split_near_dups(split, {raws!r}, 0.8, signatures={stored!r})\n"
        "print(s.pairs_compared, 'numba' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "True"]
