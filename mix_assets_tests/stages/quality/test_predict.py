"""The compiled fastText predict (stages/quality/predict.py) returns the C++ predict's floats bit for bit: on
texts that reach every rule it copies (datatrove's strip and newline replacement, max_chars, fastText's token
separators, a literal `</s>`, label-like tokens, out-of-vocabulary words with bytes >= 0x80 in the word
n-grams), for a 2-label and a 3-label softmax model; a model it does not cover goes to the C++ predict."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from mix_assets.stages.quality import predict, scoring

EDGE = ["", " ", "\n", "\n\n  \n", "a </s> b c", "</s>", "x </s>", "__label__a hello world", "__label__zzz tea",
        "x\x00y z", "\u3000hi there\u00a0", "\x1cfoo bar\x1f", "\u2028pad\u2029 \u202f", "tab\there\vand\fthere",
        "caf\u00e9 na\u00efve \u00fc\u00df \u4e2d\u6587 \U0001F600 \u00e9\u00e9\u00e9", "one\ntwo\r\nthree\n",
        "  lead and trail  \n\n", "\u200bzero width\u200b", "\u0085next\u0085", "word " * 700]


def _texts(seed: int, n: int) -> tuple[list[str], list[str]]:
    r = random.Random(seed)
    vocab = {lab: [("".join(r.choice(alpha) for _ in range(r.randint(1, 7)))) for _ in range(300)]
             for lab, alpha in (("a", "abcdefgh"), ("b", "fghijklmn\u00e9\u00fc"), ("c", "mnopqrst\u4e2d"))}
    texts, labels = [], []
    for _ in range(n):
        lab = r.choice("abc")
        words = [r.choice(vocab[lab] if r.random() < 0.7 else vocab[r.choice("abc")]) for _ in range(r.randint(1, 60))]
        seps = [r.choice([" ", " ", " ", "\n", "\t", "  ", "\u00a0", "\r\n"]) for _ in words]
        texts.append("".join(w + s for w, s in zip(words, seps)))
        labels.append(lab)
    return texts, labels


def _model(tmp_path, labels_used: str, **kw) -> str:
    import fasttext_new

    texts, labels = _texts(1, 1500)
    path = tmp_path / "train.txt"
    with open(path, "w", encoding="utf-8") as f:
        for t, lab in zip(texts, labels):
            if lab in labels_used:
                f.write(f"__label__{lab} {t.strip().replace(chr(10), ' ')}\n")
    m = fasttext_new.train_supervised(input=str(path), epoch=3, lr=0.2, dim=16, wordNgrams=kw.pop("wordNgrams", 2),
                                      minCount=1, bucket=5000, thread=1, seed=0, verbose=0, **kw)
    out = tmp_path / f"model-{labels_used}.bin"
    m.save_model(str(out))
    return str(out)


@pytest.mark.parametrize("labels_used,word_ngrams", [("ab", 2), ("abc", 3), ("ab", 1)])
def test_the_compiled_predict_returns_the_cpp_floats(tmp_path, labels_used, word_ngrams):
    path = _model(tmp_path, labels_used, wordNgrams=word_ngrams)
    sha = scoring.file_sha256(path)
    m = predict.loaded(path, sha)
    assert m.supported() and m.word_ngrams == word_ngrams
    texts = EDGE + _texts(2, 800)[0]  # unseen texts: out-of-vocabulary words and bigrams too
    arr = pa.array(texts, pa.large_string())
    for label in m.labels:
        for newline, max_chars in ((" ", None), ("", None), (" | ", 40), ("\n", None)):
            want = scoring.score_cpp(texts, path, sha, label, newline, max_chars)
            got = scoring.score(arr, path, sha, label, newline, max_chars)
            assert got.dtype == np.float64 and len(got) == len(texts)
            bad = np.flatnonzero(want != got)
            assert not len(bad), [(texts[i][:40], want[i], got[i]) for i in bad[:5]]
    # a sliced array (non-zero offset) and plain Python strings give the same floats
    assert np.array_equal(scoring.score(arr.slice(5, 50), path, sha, m.labels[0]),
                          scoring.score(texts[5:55], path, sha, m.labels[0]))


def test_a_model_it_does_not_cover_goes_to_the_cpp_predict(tmp_path, monkeypatch):
    path = _model(tmp_path, "ab", minn=2, maxn=4)  # character n-grams: not the compiled pass's
    sha = scoring.file_sha256(path)
    assert not predict.loaded(path, sha).supported()
    texts = _texts(3, 50)[0]
    called = []
    real = scoring.score_cpp
    monkeypatch.setattr(scoring, "score_cpp", lambda *a, **k: called.append(1) or real(*a, **k))
    assert np.array_equal(scoring.score(texts, path, sha, "__label__a"), real(texts, path, sha, "__label__a"))
    assert called


def test_an_unknown_label_is_named(tmp_path):
    path = _model(tmp_path, "ab")
    with pytest.raises(ValueError, match="no label '__label__q'"):
        scoring.score(["x"], path, scoring.file_sha256(path), "__label__q")
