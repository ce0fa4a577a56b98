import socket

import numpy as np
import pyarrow as pa
import pytest

from mix_assets.stages.filters import langid
from mix_assets.stages.filters.langid import LanguageFilter, identify
from mix_assets_tests.support.multilingual import SAMPLES


@pytest.fixture
def no_network(monkeypatch):
    """Any socket use fails: the model must come from the installed wheel."""
    def refuse(*a, **k):
        raise AssertionError("language id tried to open a socket")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    langid._model.cache_clear()
    yield
    langid._model.cache_clear()


def test_model_ships_in_the_wheel_and_loads_offline(no_network):
    info = langid.model_info()
    assert info["model"] == "lid.176.ftz" and info["labels"] == 176 and len(info["sha256"]) == 64
    assert {"en", "de", "zh", "ceb"} <= langid.labels() and "eng" not in langid.labels()
    assert identify(["Der Zug fährt um zwölf Uhr ab."])[0] == ["de"]


def test_hand_written_samples_in_22_languages():
    texts = [t for ts in SAMPLES.values() for t in ts]
    want = [lang for lang, ts in SAMPLES.items() for _ in ts]
    got, scores = identify(texts)
    assert got == want
    paragraphs = scores[2::3]  # the third sample of every language is a paragraph
    assert (paragraphs > 0.65).all(), dict(zip(SAMPLES, paragraphs.round(3)))


def test_bulk_input_forms_agree_and_keep_order():
    texts = [SAMPLES[k][2] for k in ("fr", "ja", "en", "ru")]
    a = identify(texts)
    b = identify(pa.chunked_array([texts[:1], texts[1:]]))
    c = identify(pa.array(texts, type=pa.string()))
    assert a[0] == b[0] == c[0] == ["fr", "ja", "en", "ru"]
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[1], c[1])


def test_newlines_do_not_break_the_model_and_text_without_letters_is_und():
    langs, scores = identify(["First line of English prose.\nSecond line, still English.\n\n", "", "  \n",
                              "12:30 1,234.56 -- 42", "[] {} ()"])
    assert langs == ["en", "und", "und", "und", "und"]
    assert scores[0] > 0.5 and (scores[1:] == 0).all()


def test_max_chars_reads_only_the_head():
    text = SAMPLES["de"][2] + " " + SAMPLES["en"][2] * 20
    assert identify([text])[0] == ["en"]
    assert identify([text], max_chars=len(SAMPLES["de"][2]))[0] == ["de"]


def test_language_filter_reads_the_first_2000_characters_by_default():
    de = SAMPLES["de"][2]
    text = (de + " ") * (langid.DEFAULT_MAX_CHARS // len(de) + 1) + SAMPLES["en"][2] * 60
    assert identify([text])[0] == ["en"]  # the whole text is mostly English
    assert LanguageFilter().max_chars == langid.DEFAULT_MAX_CHARS == 2000
    assert LanguageFilter().apply([text]).column("language").to_pylist() == ["de"]
    assert LanguageFilter(max_chars=None).apply([text]).column("language").to_pylist() == ["en"]


def test_language_filter_reasons():
    texts = [SAMPLES["en"][2], SAMPLES["de"][2], "1234 5678", "Tokyo Paris"]  # en at ~0.39
    out = LanguageFilter(languages=("en",), min_score=0.65).apply(texts)
    assert out.column_names == ["language", "language_score", "keep", "reason"]
    rows = out.to_pylist()
    assert [r["keep"] for r in rows] == [True, False, False, False]
    assert [r["reason"] for r in rows] == [None, "language:de", "language:und", "language_score"]
    # every document has its language recorded, kept or not
    assert [r["language"] for r in rows] == ["en", "de", "und", "en"]


def test_language_filter_any_language_and_score_threshold():
    texts = [SAMPLES["en"][2], SAMPLES["ja"][2]]
    assert LanguageFilter().apply(texts).column("keep").to_pylist() == [True, True]
    scores = identify(texts)[1]
    strict = LanguageFilter(min_score=float(scores.max())).apply(texts)  # datatrove keeps score > threshold
    assert strict.column("keep").to_pylist() == [False, False]
    assert strict.column("reason").to_pylist() == ["language_score", "language_score"]
    assert LanguageFilter(languages="ja").apply(texts).column("keep").to_pylist() == [False, True]


def test_language_filter_rejects_codes_the_model_does_not_have():
    # datatrove's Languages.english is "eng", which never matches a ft176 label: every document dropped
    with pytest.raises(ValueError, match=r"\['eng'\].*'en' not 'eng'"):
        LanguageFilter(languages=("eng",))
    with pytest.raises(ValueError, match="min_score"):
        LanguageFilter(min_score=1.5)


def test_bad_input_names_the_row():
    with pytest.raises(ValueError, match="row 1 is null"):
        identify(["fine", None])
    with pytest.raises(TypeError, match="must be strings"):
        identify(pa.array([1, 2]))


def test_empty_batch():
    langs, scores = identify([])
    assert langs == [] and scores.shape == (0,)
    assert LanguageFilter().apply([]).num_rows == 0
