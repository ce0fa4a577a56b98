import random

import numpy as np
import pytest
from datasketch.lsh import _optimal_param

from mix_assets.core import engine
from mix_assets.stages.dedup import lsh
from mix_assets.stages.dedup import minhash as mh
from mix_assets_tests.support.shared_data import paragraphs


@pytest.mark.parametrize("threshold,w", [(0.8, (0.5, 0.5)), (0.8, (0.05, 0.95)), (0.7, (0.3, 0.7))])
def test_optimal_params_equal_datasketch(threshold, w):
    assert lsh.optimal_params(threshold, 128, *w) == _optimal_param(threshold, 128, *w)


def _quad_recall_params(threshold, num_perm, fp_w, fn_w):
    """recall_params as it was, its integrals by scipy's quad (the reference for the Gauss-Legendre ones)."""
    from scipy.integrate import quad

    best, opt = (float("inf"), float("inf")), (0, 0)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            miss = (1.0 - threshold**r) ** b
            fp = quad(lambda s: 1 - (1 - s ** float(r)) ** float(b), 0.0, threshold)[0]
            fn = quad(lambda s: 1 - (1 - (1 - s ** float(r)) ** float(b)), threshold, 1.0)[0]
            key = (0.0, fp * fp_w + fn * fn_w) if miss <= lsh.MAX_MISS else (miss, 0.0)
            if key < best:
                best, opt = key, (b, r)
    return opt


@pytest.mark.parametrize("threshold,num_perm", [(t, p) for p in (64, 128) for t in (0.5, 0.7, 0.8, 0.85, 0.9)]
                         + [(0.8, 256)])
def test_recall_params_equal_scipys_quad(threshold, num_perm):
    for w in ((0.5, 0.5), (0.05, 0.95), (0.3, 0.7)):
        assert lsh.recall_params(threshold, num_perm, *w) == _quad_recall_params(threshold, num_perm, *w)


def test_gauss_legendre_integrals_match_quad():
    from scipy.integrate import quad

    for b, r in ((1, 1), (27, 4), (9, 13), (128, 1), (1, 128)):
        f = lambda s: 1 - (1 - s ** float(r)) ** float(b)  # noqa: E731
        assert lsh._fp(0.8, b, r) == pytest.approx(quad(f, 0.0, 0.8)[0], rel=1e-9, abs=1e-12)


def test_parameters_do_not_import_scipy():
    """dedup_keys' driver computes (b, r) in every step: without scipy (1.9 CPU s of import)."""
    import subprocess
    import sys

    code = ("import sys; from mix_assets.stages.dedup import dedup; print(dedup.DedupParams().bands_rows); "
            "print('scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[-1] == "False" and out[0] == "(27,"


def test_s_curve():
    b, r = 16, 8
    assert lsh.s_curve(b, r, 0.8) == pytest.approx(1 - (1 - 0.8**8) ** 16)
    p = lsh.s_curve(b, r, np.array([0.5, 0.7, 0.8, 0.9]))
    assert np.all(np.diff(p) > 0) and p[2] > 0.9 and p[0] < 0.1


def _run(ids, keys, sig, n_chars, prio=None, b=16, r=8, threshold=0.8, **kw):
    n = len(ids)
    nsh = np.where((sig == mh.EMPTY).all(axis=1), 0, 10)
    prio = np.zeros(n, np.int64) if prio is None else np.asarray(prio)
    return lsh.dedup(ids, keys, sig, nsh, np.asarray(n_chars), prio, b, r, threshold, **kw)


def _random_sig(rng, n=1):
    return rng.integers(0, 1 << 32, (n, 128), dtype=np.uint64).astype(np.uint32)


def test_weak_band_collision_is_not_merged_and_strong_pairs_chain():
    rng = np.random.default_rng(0)
    a = _random_sig(rng)[0]
    weak = a.copy()
    weak[8:] = _random_sig(rng)[0][8:]  # shares band 0 only: estimated Jaccard 8/128
    weak[8:60] = a[8:60]  # now 60/128 = 0.47: a band collision, far below 0.8
    strong = weak.copy()
    strong[100:110] = _random_sig(rng)[0][100:110]  # 118/128 = 0.92 to `weak`
    sig = np.stack([a, weak, strong])
    res = _run(["a", "weak", "strong"], ["k1", "k2", "k3"], sig, [10, 10, 10])
    assert res.stats["candidate_pairs"] == 3 and res.stats["rejected_pairs"] == 2
    assert res.kept_index[0] == 0 and res.keep[0]  # `a` stays alone
    assert res.kept_index[1] == res.kept_index[2]  # weak ~ strong confirmed


def test_keep_rule_longest_then_priority_then_doc_id():
    rng = np.random.default_rng(1)
    s = _random_sig(rng)[0]
    sig = np.stack([s] * 4)
    ids = ["d", "c", "b", "a"]
    keys = ["x1", "x2", "x3", "x4"]  # distinct exact keys: near duplicates (identical signatures)
    assert _run(ids, keys, sig, [5, 9, 9, 3]).keep.tolist() == [False, False, True, False]  # tie -> b < c
    assert _run(ids, keys, sig, [5, 9, 9, 3], prio=[0, 1, 0, 0]).keep.tolist() == [False, True, False, False]
    res = _run(ids, keys, sig, [5, 5, 5, 5])
    assert res.keep.tolist() == [False, False, False, True] and res.reason[0] == "near_dup"
    res = _run(ids, ["k", "k", "k2", "k"], sig, [5, 5, 5, 5])
    assert res.reason == ["exact_dup", "exact_dup", "near_dup", None]


def test_empty_documents_are_only_exact_duplicates():
    sig = np.full((3, 128), mh.EMPTY, dtype=np.uint32)
    res = _run(["e1", "e2", "e3"], ["", "", "z"], sig, [0, 0, 0])
    assert res.stats["lsh_documents"] == 0
    assert res.reason == [None, "exact_dup", None]


def test_large_group_beyond_cap_is_one_cluster():
    rng = np.random.default_rng(2)
    base = _random_sig(rng)[0]
    sig = np.stack([base] * 100)
    sig[:, 120:] = _random_sig(rng, 100)[:, 120:]  # 120/128 shared: all near duplicates
    res = _run([f"d{i:03d}" for i in range(100)], [f"k{i}" for i in range(100)], sig, [10] * 100, group_cap=4)
    assert res.keep.sum() == 1 and (res.cluster_size == 100).all()


def test_duplicate_doc_ids_are_refused():
    sig = np.zeros((2, 128), np.uint32)
    with pytest.raises(ValueError, match="unique.*'x'"):
        _run(["x", "x"], ["a", "b"], sig, [1, 1])


def _corpus(seed=3, n=150):
    rng = random.Random(seed)
    ps = paragraphs("sherlock_holmes")
    docs = ["\n\n".join(ps[i : i + 3]) for i in range(0, 3 * n, 3)]
    ids = [f"src-{i:04d}" for i in range(n)]
    for i in rng.sample(range(n), 30):  # near duplicates by small word edits
        w = docs[i].split(" ")
        for _ in range(max(1, len(w) // 80)):
            w[rng.randrange(len(w))] = rng.choice(w)
        docs.append(" ".join(w))
        ids.append(f"nd-{i:04d}")
    for i in rng.sample(range(n), 10):  # exact duplicates after normalisation
        docs.append(docs[i].upper() + "!!")
        ids.append(f"ex-{i:04d}")
    return ids, docs


def test_result_is_independent_of_input_order_and_threads():  # signing threads and band tasks' workers
    ids, docs = _corpus()
    rng = random.Random(9)
    results = []
    for trial in range(3):
        order = list(range(len(ids)))
        rng.shuffle(order)
        sid, sdoc = [ids[i] for i in order], [docs[i] for i in order]
        batch = mh.sign_texts(sdoc, threads=1 + trial % 2, batch_bytes=2000 + 50_000 * trial)
        res = lsh.dedup(
            sid, batch.exact_keys, batch.signatures, batch.n_shingles, np.array([len(d) for d in sdoc]),
            np.zeros(len(sid), np.int64), 16, 8, 0.8, eng=engine.Engine(num_cpus=(1, 2, 4)[trial]),
        )
        results.append(
            sorted((sid[i], sid[res.kept_index[i]], res.reason[i], int(res.cluster_size[i])) for i in range(len(sid)))
        )
    assert results[0] == results[1] == results[2]
    reasons = [r[2] for r in results[0]]
    assert reasons.count("exact_dup") == 10
    assert reasons.count("near_dup") >= 27  # 30 planted, Jaccard ~0.9
    # Every planted copy is clustered with its original, and nothing else is merged.
    kept_of = {r[0]: r[1] for r in results[0]}
    for doc, kept in kept_of.items():
        if doc.startswith("src-"):
            assert kept == doc or kept in (f"nd-{doc[4:]}", f"ex-{doc[4:]}"), doc


def test_candidate_pairs_same_with_any_number_of_band_workers():
    _, docs = _corpus()
    sig = mh.sign_texts(docs, threads=1).signatures
    rows = np.arange(0, len(docs), 2)[::-1].copy()  # a subset, not in index order
    want = lsh.candidate_pairs(sig, rows, 16, 8)
    assert len(want[0]) > 0
    for workers in (1, 2, 4):
        got = lsh.candidate_pairs(sig, rows, 16, 8, eng=engine.Engine(num_cpus=workers))
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
