"""stages/audit/fuzzy.py: the fuzzy contamination advisory's measure, recall on planted edits, false positives.

Measured on the shared data's five eval tasks (the in-repo fixture's task when the folder is absent),
200 items of >= 8 words per task planted in generated prose (mix_assets_tests/support/fuzzy_plants.py),
2-word shingles, 32 permutations, Jaccard 0.6 (the defaults): one word changed, the advisory found
0.992 of 1,000 planted items and the 13-gram audit 0.755 (commonsense_qa: 0.98 against 0.25); two words
changed, 0.82 against 0.68. The assertions below leave a margin under those figures.
"""

import numpy as np
import pyarrow as pa
import pytest

from mix_assets.stages.audit import fuzzy
from mix_assets.core import textkeys as tk
from mix_assets_tests.support import fuzzy_plants as fp

PARAMS = fuzzy.Params()  # the config defaults (audit.fuzzy)


@pytest.fixture(scope="module")
def items():
    return fp.eval_items()


@pytest.fixture(scope="module")
def index(items):
    return fuzzy.build_index(items, PARAMS)


@pytest.fixture(scope="module")
def hosts():
    return fp.prose(1.0, seed=3)


def brute_jaccard(item: str, doc: str, k: int = 2) -> float:
    """Best Jaccard of the item's shingle set with any equal-length window of the document's shingles."""
    sh, off, _ = fuzzy._shingles(pa.array([item, doc], pa.large_string()), k)
    s, d = set(sh[off[0]:off[1]].tolist()), sh[off[1]:off[2]].tolist()
    m = len(s)
    w = min(m, len(d))
    return max(len(s & set(d[a:a + w])) / len(s | set(d[a:a + w])) for a in range(len(d) - w + 1))


def test_one_word_edits_are_found_where_the_13gram_audit_misses_them(items, index, hosts):
    docs, tasks, lengths = fp.plant(items, hosts, per_task=200, edits=1, seed=11)
    hit, exact = fp.found(index, docs, tasks), fp.exact_found(items, docs, tasks)
    short = np.array(lengths) < 27  # a one-word edit in the middle leaves no 13 unchanged words in a row
    assert hit.mean() >= 0.95, hit.mean()
    assert hit[short].mean() >= 0.9 and exact[short].mean() <= 0.6, (hit[short].mean(), exact[short].mean())
    assert (hit & ~exact).sum() >= 0.2 * len(docs) * short.mean()  # the advisory's news: what 13-grams miss


def test_two_word_edits_are_mostly_found(items, index, hosts):
    docs, tasks, _ = fp.plant(items, hosts, per_task=200, edits=2, seed=12)
    hit, exact = fp.found(index, docs, tasks), fp.exact_found(items, docs, tasks)
    assert hit.mean() >= 0.7 and hit.mean() >= exact.mean(), (hit.mean(), exact.mean())


def test_clean_generated_prose_matches_no_eval_item(index):
    clean = fp.prose(2.0, seed=4)
    m = fuzzy.scan_texts(index, clean)
    assert m.doc.size == 0, (m.doc.size, m.jaccard.max())


def test_reported_jaccard_is_exact_and_above_the_threshold(items, index, hosts):
    docs, tasks, _ = fp.plant(items, hosts[:100], per_task=10, edits=2, seed=13)
    m = fuzzy.scan_texts(index, docs)
    assert m.doc.size
    indexed = {}  # per task, the items build_index kept, in order (>= min_words normalised words)
    for t, its in items.items():
        n_words = np.diff(tk.word_hashes(tk.words(its))[1])
        indexed[t] = [it for it, n in zip(its, n_words) if n >= PARAMS.min_words]
    first = {t: int(np.flatnonzero(index.item_task == k)[0]) for k, t in enumerate(index.tasks)}
    for d, i, j in zip(m.doc, m.item, m.jaccard):
        task = index.tasks[index.item_task[i]]
        assert j >= PARAMS.threshold
        assert brute_jaccard(indexed[task][i - first[task]], docs[d]) == pytest.approx(j)


def test_short_items_are_counted_not_indexed_and_documents_shorter_than_an_item_still_match():
    items = {"t": ["red blue", "one two three four five six seven eight nine ten eleven twelve"]}
    index = fuzzy.build_index(items, PARAMS)
    assert index.denominators["t"] == {"items": 2, "items_indexed": 1, "items_too_short": 1, "items_empty": 0,
                                       "items_unrepresented": 0}
    m = fuzzy.scan_texts(index, ["red blue", "one two three four five six seven XX nine ten eleven",
                                 "twelve eleven ten nine eight seven six five four three two one"])
    # doc 1: the item's first 11 words, one changed, shorter than the item: the window is the whole
    # document; 8 of its 10 bigrams are among the item's 11: J = 8 / (11 + 10 - 8)
    assert m.doc.tolist() == [1]
    assert m.jaccard[0] == pytest.approx(8 / 13)


def test_the_result_does_not_depend_on_the_batch(index, hosts):
    docs, tasks, _ = fp.plant(fp.eval_items(), hosts[:300], per_task=5, edits=1, seed=14)
    docs = docs + hosts[300:400]
    whole = fuzzy.scan_texts(index, docs)
    parts = [fuzzy.scan_texts(index, docs[s:s + 7]) for s in range(0, len(docs), 7)]
    got = sorted((int(d) + s, int(i), float(j)) for s, p in zip(range(0, len(docs), 7), parts)
                 for d, i, j in zip(p.doc, p.item, p.jaccard))
    assert got == sorted(zip(whole.doc.tolist(), whole.item.tolist(), whole.jaccard.tolist()))


def test_index_postings_follow_their_definition_with_ties_and_empty_items():
    """The index's vectorised kernels against a per-item, per-permutation loop: every shingle at its item's
    minimum for a permutation is posted once per such permutation (32-bit ties included: two shingles with
    the same low 32 bits), shingles in more than MAX_ITEM_DF items are not representatives."""
    from mix_assets.stages.dedup import minhash
    rng = np.random.default_rng(5)
    common = rng.integers(0, 2**63, 3, dtype=np.int64).astype(np.uint64)  # in every item: not informative
    items = []
    for i in range(300):
        own = rng.integers(0, 2**63, int(rng.integers(0, 30)), dtype=np.int64).astype(np.uint64)
        if i % 7 == 0 and own.size:
            own = np.append(own, own[0] ^ np.uint64(1 << 40))  # same low 32 bits: ties at every permutation
        items.append(np.concatenate([own, common, own[:2]]))  # repeats inside an item count once
    off = np.concatenate([[0], np.cumsum([len(x) for x in items])]).astype(np.int64)
    flat = np.concatenate(items)
    item_sh, item_off, df = fuzzy._distinct(flat, off)
    for i, x in enumerate(items):
        assert item_sh[item_off[i]:item_off[i + 1]].tolist() == sorted(set(x.tolist()))
    count = {}
    for x in items:
        for v in set(x.tolist()):
            count[v] = count.get(v, 0) + 1
    assert df.tolist() == [count[v] for v in item_sh.tolist()]
    informative = df <= fuzzy.MAX_ITEM_DF
    a, b = minhash.permutations(8)
    want = {}
    for i in range(len(items)):
        sh = item_sh[item_off[i]:item_off[i + 1]][informative[item_off[i]:item_off[i + 1]]]
        if not sh.size:
            continue
        x = minhash.fmix32(minhash.shingle_hash32(sh))
        for p in range(len(a)):
            with np.errstate(over="ignore"):
                m = a[p] * x + b[p]
            for v in sh[m == m.min()].tolist():
                want[(v, i)] = want.get((v, i), 0) + 1
    assert any(n > 1 for n in want.values())
    owner = np.repeat(np.arange(len(items)), np.diff(item_off))[informative]
    inf_off = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=len(items)))])
    w = fuzzy._argmin_weights(item_sh[informative], inf_off, a, b)
    at = np.flatnonzero(w)
    keys, post_off, post_item, post_weight = fuzzy._postings(item_sh[informative][at], owner[at], w[at])
    got = {(int(keys[k]), int(post_item[j])): int(post_weight[j])
           for k in range(len(keys)) for j in range(post_off[k], post_off[k + 1])}
    assert got == want
    assert keys.tolist() == sorted(set(keys.tolist())) and post_off[-1] == len(post_item)
    for k in range(len(keys)):
        assert post_item[post_off[k]:post_off[k + 1]].tolist() == sorted(post_item[post_off[k]:post_off[k + 1]].tolist())


@pytest.mark.parametrize("clash", [False, True])
def test_argsort_u64_sorts_with_and_without_values_sharing_their_top_bits(clash):
    rng = np.random.default_rng(7)
    a = rng.integers(0, 2**63, 5000, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    a[100:200] = a[:100]  # duplicates: any order among equal values
    if clash:  # a larger value first, a smaller one with the same top bits after it
        a[300], a[301] = np.uint64(2**40 + 5), np.uint64(2**40 + 3)
    order, s = fuzzy._argsort_u64(a)
    assert sorted(order.tolist()) == list(range(len(a)))
    assert np.array_equal(s, a[order]) and np.array_equal(s, np.sort(a))


def test_argmin_weights_are_the_same_on_any_number_of_threads(monkeypatch):
    from mix_assets.stages.dedup import minhash
    rng = np.random.default_rng(11)
    lens = rng.integers(0, 30, 200)  # some empty items
    off = np.concatenate([[0], np.cumsum(lens)])
    sh = rng.integers(0, 50, int(off[-1]), dtype=np.int64).astype(np.uint64)  # ties within items
    a, b = minhash.permutations(8)
    monkeypatch.setattr(fuzzy, "ITEM_CHUNK", 12)  # many chunks: each thread takes several
    want = fuzzy._argmin_weights(sh, off, a, b, threads=1)
    assert want.any()
    for threads in (2, 3, 50):
        assert fuzzy._argmin_weights(sh, off, a, b, threads=threads).tolist() == want.tolist()


def _numpy_key_hits(index, sh, soff):
    """The rep-key hits as numpy found them before stages/audit/kernels.key_hits (argsort of the bitmap's
    candidates, searchsorted into the keys, searchsorted of the positions into the documents)."""
    pos, r = index.bitmap.lookup(index.rep_keys, sh, by_key=True)
    return pos, r, np.searchsorted(soff, pos, side="right") - 1


def test_compiled_key_hits_are_numpys_and_give_the_same_matches(items, index, hosts, monkeypatch):
    """kernels.key_hits finds the same (position, key, document) hits as the numpy lookup, grouped by key with
    positions ascending, on planted one- and two-word edits, clean prose and documents without shingles; the
    matches (documents, items, exact Jaccards) are then identical, so the report is."""
    from mix_assets.stages.audit import kernels

    docs = fp.plant(items, hosts, per_task=40, edits=1, seed=11)[0]
    docs2 = fp.plant(items, hosts, per_task=40, edits=2, seed=12)[0]
    texts = ["", "one", *docs[:300], "", *docs2[:300], "two words"]
    for lo in range(0, len(texts), 128):
        h, off = tk.word_hashes(tk.words(pa.array(texts[lo:lo + 128], pa.large_string())))
        sh, soff = tk.ngram_hashes(h, off, PARAMS.shingle, short="whole")
        got = kernels.key_hits(sh, soff, index.bitmap.shift, index.bitmap.bits, index.rep_keys, index.radix,
                               np.uint64(64 - index.radix_bits))
        want = _numpy_key_hits(index, sh, soff)
        order = np.lexsort((want[0], want[1]))  # by key, positions ascending
        assert all(np.array_equal(g, w[order]) for g, w in zip(got, want))
        assert np.all(np.diff(got[1]) >= 0)
    new = fuzzy.scan_texts(index, pa.array(texts, pa.large_string()))
    monkeypatch.setattr(kernels, "key_hits", lambda sh, soff, *a: _numpy_key_hits(index, sh, soff))
    old = fuzzy.scan_texts(index, pa.array(texts, pa.large_string()))
    assert len(old.doc) > 100
    assert all(np.array_equal(getattr(new, f), getattr(old, f)) for f in ("doc", "item", "jaccard"))
