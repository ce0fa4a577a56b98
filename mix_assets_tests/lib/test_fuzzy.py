"""lib/fuzzy.py: the fuzzy contamination advisory's measure, recall on planted edits, false positives.

Measured on the shared data's five eval tasks (the in-repo fixture's task when the folder is absent),
200 items of >= 8 words per task planted in generated prose (mix_assets_tests/support/fuzzy_plants.py),
2-word shingles, 32 permutations, Jaccard 0.6 (the defaults): one word changed, the advisory found
0.992 of 1,000 planted items and the 13-gram audit 0.755 (commonsense_qa: 0.98 against 0.25); two words
changed, 0.82 against 0.68. The assertions below leave a margin under those figures.
"""

import numpy as np
import pyarrow as pa
import pytest

from mix_assets.lib import fuzzy, textkeys as tk
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
