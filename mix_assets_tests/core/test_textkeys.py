import hashlib
import random
import re
import unicodedata

import numpy as np
import pyarrow as pa
import pytest

from mix_assets.core import textkeys as tk


def reference_normalise(s: str) -> str:
    s = unicodedata.normalize("NFKC", s).lower()
    s = "".join(c for c in s if unicodedata.category(c)[0] in "LNMZ" or c.isspace())
    return " ".join(s.split())


CASES = [
    "Hello, World!  It's   a test.",
    "Café déjà-vu — naïve façade…",
    "ＦＵＬＬ-width ﬁ ligature and\u00a0non-breaking\tspace",
    "Ελληνικά κείμενα, και русский текст!",
    "数学 问题：3 + 4 = 7。",
    "",
    "   \n\t  ",
    "!!! ??? ...",
    "Line one\r\nLine two\r\n",
]


@pytest.mark.parametrize("text", CASES)
def test_normalise_matches_reference(text):
    assert tk.normalise([text]).to_pylist() == [reference_normalise(text)]


def test_recased_repunctuated_copies_normalise_equal():
    a = "The quick brown fox, jumps over the lazy dog."
    b = "the QUICK brown fox jumps over -- the lazy dog!!"
    assert tk.normalise([a, b]).to_pylist()[0] == tk.normalise([a, b]).to_pylist()[1]


def test_ngram_hashes_match_reference_and_respect_doc_boundaries():
    rng = random.Random(3)
    vocab = [f"w{i}" for i in range(50)]
    docs = [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 30))) for _ in range(200)]
    wl = tk.words(docs)
    h, off = tk.word_hashes(wl)
    for n in (1, 5, 13):
        got, goff = tk.ngram_hashes(h, off, n)
        for d, doc in enumerate(docs):
            ref = tk.ngram_hash_reference(reference_normalise(doc).split(), n)
            assert got[goff[d] : goff[d + 1]].tolist() == ref, (n, d)


def test_short_rule_whole_vs_drop():
    wl = tk.words(["one two three", "", "a b c d e f"])
    h, off = tk.word_hashes(wl)
    whole, woff = tk.ngram_hashes(h, off, 5, short="whole")
    drop, doff = tk.ngram_hashes(h, off, 5, short="drop")
    assert np.diff(woff).tolist() == [1, 0, 2]
    assert np.diff(doff).tolist() == [0, 0, 2]
    assert whole[woff[2] : woff[3]].tolist() == drop[doff[2] : doff[3]].tolist()


def test_exact_keys_stable():
    keys = tk.exact_keys(tk.normalise(["A b.", "a  B"]))
    assert keys[0] == keys[1]
    assert re.fullmatch(r"[0-9a-f]{64}", keys[0])


def test_text_array_names_the_bad_row():
    text_array = tk.text_array
    assert text_array(pa.chunked_array([["a"], ["b"]]), "x").to_pylist() == ["a", "b"]
    with pytest.raises(ValueError, match=r"x: text at row 1 is null"):
        text_array(["a", None], "x")
    with pytest.raises(ValueError, match=r"x: text at row 2 is not valid text"):
        text_array(["a", "b", "c\udc80"], "x")
    with pytest.raises(ValueError, match=r"x: text at row 0 is not valid text"):
        text_array([3, "b"], "x")
    with pytest.raises(TypeError, match=r"x: texts must be strings, got int64"):
        text_array(pa.array([1]), "x")


def test_dedup_keys_differ_from_exact_keys_only_for_texts_without_words():
    texts = ["A b.", "a  B", "😀", " 😀\n", "→ ⇒", "", "  ", "?! x"]
    wk = tk.word_keys(texts)
    plain, dedup = wk.exact_keys(), wk.dedup_keys()
    assert [p == d for p, d in zip(plain, dedup)] == [True, True, False, False, False, True, True, True]
    assert dedup[2] == dedup[3] != dedup[4] and dedup[5] == dedup[6] == plain[5]
    assert dedup[2] == hashlib.sha256("😀".encode()).hexdigest()
