import numpy as np
import pytest

from mix_assets.stages.audit import contamination as ct
from mix_assets.core import textkeys as tk

ITEM = ("The committee postponed its decision on the harbour bridge until the spring survey of the "
        "river bed had been completed")  # 20 words
OTHER = "A completely different reference sentence about lighthouse keepers and their long winter nights alone"
SHORT = "the violinist tuned her old instrument beside the stone fountain"  # 10 words: whole-item rule
TINY = "a red kite"  # 3 words: below short_item_min_words
FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor " * 3


def _reg(**tasks):
    return ct.Registry.build({t: ct.task_ngrams(items) for t, items in tasks.items()}, n=13, short_min=8)


def test_window_hashes_equal_textkeys():
    rng = np.random.default_rng(1)
    docs = [" ".join(f"w{x}" for x in rng.integers(0, 40, rng.integers(0, 40))) for _ in range(100)]
    h, off = tk.word_hashes(tk.words(docs))
    for L in (1, 5, 8, 12, 13):
        got, doc = ct.window_hashes(h, off, [L])
        ref, roff = tk.ngram_hashes(h, off, L, short="drop")
        assert np.array_equal(got, ref)
        assert np.array_equal(doc, np.repeat(np.arange(len(docs)), np.diff(roff)))


def test_verbatim_and_recased_repunctuated_copies_found():
    reg = _reg(alpha=[ITEM], beta=[OTHER])
    recased = "THE COMMITTEE -- postponed its decision, on the 'Harbour Bridge' until the spring survey " \
              "(of the river-bed?) had been completed!!"
    docs = [FILLER + ITEM + " " + FILLER, FILLER + recased, FILLER, OTHER.upper()]
    counts = reg.scan_texts(docs)
    n_item = len(ITEM.split()) - 13 + 1
    assert counts[0].tolist() == [n_item, 0]
    # "river-bed" -> "riverbed" (punctuation is deleted, as in the lm-eval convention): of the 8
    # windows only the 3 that end before "river" (word 15) still match
    assert n_item == 8 and counts[1].tolist() == [3, 0]
    assert counts[2].tolist() == [0, 0]
    assert counts[3].tolist() == [0, len(OTHER.split()) - 12]


def test_ngrams_never_span_document_boundaries():
    reg = _reg(alpha=[ITEM])
    words = ITEM.split()
    docs = [FILLER + " ".join(words[:10]), " ".join(words[10:]) + " " + FILLER]  # 10 + 10 words
    assert reg.scan_texts(docs).sum() == 0


def test_short_item_rule():
    tn = ct.task_ngrams([SHORT, TINY, ITEM])
    assert (tn.short_items, tn.short_items_unmatched, tn.items) == (1, 1, 3)
    reg = ct.Registry.build({"s": tn}, n=13, short_min=8)
    docs = [FILLER + SHORT.title() + ". " + FILLER, FILLER + TINY + " " + FILLER,
            FILLER + " ".join(SHORT.split()[:9]) + " pool", SHORT]  # 9 of its 10 words: no match
    assert reg.scan_texts(docs)[:, 0].tolist() == [1, 0, 0, 1]


def test_short_items_sharing_first_words():
    a = "when the kettle boils pour the water over the tea"  # 11 words
    b = "when the kettle boils pour the water over the coffee grounds"  # 12 words
    reg = _reg(x=[a], y=[b])
    counts = reg.scan_texts([FILLER + a + " " + FILLER, b, "when the kettle boils pour the water over"])
    assert counts.tolist() == [[1, 0], [0, 1], [0, 0]]


def test_threads_do_not_change_counts():
    reg = _reg(alpha=[ITEM, SHORT], beta=[OTHER])
    rng = np.random.default_rng(0)
    pool = [ITEM, OTHER, SHORT, FILLER, "nothing to see here at all"]
    docs = [" ".join(rng.choice(pool, 4)) for _ in range(300)]
    batches = [docs[i : i + 17] for i in range(0, len(docs), 17)]
    one = np.concatenate(list(reg.scan_batches(batches, threads=1)))
    two = np.concatenate(list(reg.scan_batches(batches, threads=2)))
    assert np.array_equal(one, two) and one.sum() > 0


def test_tally_counts_and_ids():
    reg = _reg(alpha=[ITEM], beta=[OTHER])
    t = ct.Tally(tasks=reg.tasks)
    t.add("src", ["d0", "d1", "d2"], reg.scan_texts([ITEM + " " + OTHER, FILLER, ITEM]))
    rep = t.report(13, {})
    assert rep["overlap_total"] == 2 * (len(ITEM.split()) - 12) + len(OTHER.split()) - 12
    assert rep["sources"]["src"]["contaminated_docs"] == 2
    assert rep["sources"]["src"]["tasks"]["beta"]["docs_with_overlap"] == 1
    assert [(h[0], h[2]) for h in t.hits] == [("d0", ["alpha", "beta"]), ("d2", ["alpha"])]


def test_scrub_finds_eight_word_runs_only():
    scrub = ct.scrub_ngrams([ITEM], 8)
    words = ITEM.split()
    strings = ["counts only: 12 docs", " ".join(words[3:11]).upper(), " ".join(words[3:10]), "x " + ITEM]
    assert ct.leaking_strings(strings, scrub, 8) == [1, 3]


@pytest.mark.parametrize("n_keys", [0, 1, 100_000])
def test_bitmap_prefilter_has_no_false_negatives(n_keys):
    keys = np.unique(np.random.default_rng(n_keys).integers(0, 2**64 - 1, n_keys, dtype=np.uint64))
    bm = ct._Bitmap(keys)
    assert bm.candidates(keys).size == keys.size


def test_scrub_set_from_the_registry_pass_equals_scrub_ngrams():
    items = ["One two three four five six seven eight nine.", "a b c", "", "Ten eleven twelve thirteen fourteen "
             "fifteen sixteen seventeen eighteen nineteen twenty", "one TWO three four five six seven eight"]
    for chunk in (1, 2, 4096):
        tn = ct.task_ngrams(items, 13, 8, chunk=chunk, scrub_k=8)
        assert tn.scrub.dtype == np.uint64 and np.array_equal(tn.scrub, ct.scrub_ngrams(items, 8))
    assert ct.task_ngrams([], scrub_k=8).scrub.size == 0 and ct.task_ngrams(items).scrub is None
    h, off = tk.word_hashes(tk.words(items))  # the fuzzy index's input, from the same pass
    for chunk in (1, 2, 4096):
        got = ct.task_ngrams(items, 13, 8, chunk=chunk, keep_words=True).words
        assert np.array_equal(got[0], h) and np.array_equal(got[1], off) and got[1].dtype == np.int64


def test_short_items_found_among_many_windows_past_the_prefilter():
    # the short-item prefilter (a bitmap over first-word hashes) drops windows, never a match
    items = [f"w{i} alpha beta gamma delta epsilon zeta eta theta" for i in range(300)]
    reg = ct.Registry.build({"t": ct.task_ngrams(items)}, n=13, short_min=8)
    docs = [" ".join(f"x{j}" for j in range(200)) + " " + items[i] + " tail" for i in range(0, 300, 7)]
    assert (reg.scan_texts(docs)[:, 0] == 1).all()


def test_merged_unique_is_np_unique_of_the_runs():
    """merged_unique (a stable sort that merges sorted runs) gives np.unique's array: of sorted runs with
    values shared between them, of one run, of none, and of an unsorted run too (only slower)."""
    rng = np.random.default_rng(3)
    pool = rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64)
    runs = [np.sort(rng.choice(pool, size=n)) for n in (0, 1, 700, 3000, 2)]
    got = ct.merged_unique(runs)
    assert got.dtype == np.uint64 and np.array_equal(got, np.unique(np.concatenate(runs)))
    assert np.array_equal(ct.merged_unique([runs[3]]), np.unique(runs[3]))
    assert ct.merged_unique([]).size == 0
    shuffled = rng.permutation(pool)
    assert np.array_equal(ct.merged_unique([shuffled, pool[:10]]), np.unique(pool))


def test_registry_union_is_np_unique_with_membership():
    """Registry.build's key union (a merge of the sorted task arrays, one searchsorted each) equals the
    np.unique(return_inverse) reference: the same keys and the same key x task matrix, for sorted task
    arrays as the registry stores them and for unsorted ones with repeats (Registry.build takes any)."""
    rng = np.random.default_rng(5)
    pool = rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64, endpoint=True)
    arrays = [np.unique(rng.choice(pool, n)) for n in (0, 1, 700, 3000)]
    arrays += [rng.choice(pool, 900), np.array([pool[0], pool[0], np.uint64(2**64 - 1), np.uint64(0)], np.uint64)]
    keys, member = ct._union(arrays)
    ref, inv = np.unique(np.concatenate(arrays), return_inverse=True)
    want = np.zeros((ref.size, len(arrays)), bool)
    want[inv.ravel(), np.repeat(np.arange(len(arrays)), [a.size for a in arrays])] = True
    assert keys.dtype == np.uint64 and np.array_equal(keys, ref) and np.array_equal(member, want)
    assert ct._union([])[0].size == 0
