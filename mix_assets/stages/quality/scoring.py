"""A fastText classifier's score on texts, in bulk (no Dagster): the probability of one label per text.

The text handed to fastText is datatrove's FastTextClassifierFilter's (`text.strip().replace("\\n", r)`),
optionally cut to its first `max_chars` characters. A supervised softmax model without character n-grams
(what the graph trains, and DCLM-style classifiers) is scored by stages/quality/predict.py: one compiled pass
over the Arrow text buffers computing fastText's own float arithmetic; any other model by the C++ `predict` of
fasttext-predict, once per text without the Python wrapper (its list API returns no scores), with k=-1 as
datatrove does. Either way the scores are the floats datatrove records for the same model and text
(bench/quality.py; test_predict pins the compiled pass to the C++ one).
"""

from __future__ import annotations

import functools
import hashlib
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.core.textkeys import text_array


@functools.lru_cache(maxsize=4)
def _load(path: str, sha256: str):
    import fasttext  # fasttext-predict (predict-only); the model bytes are checked by the caller's sha256

    return fasttext.load_model(path)


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def prepared(texts, newline_replacement: str = " ", max_chars: Optional[int] = None) -> list[str]:
    """The one-line texts fastText reads (also what the classifier is trained on)."""
    arr = text_array(texts, "quality")
    if max_chars is not None:
        arr = pc.utf8_slice_codeunits(arr, 0, max_chars)
    # str.strip, not pyarrow's trim: Python's whitespace set is datatrove's
    return [t.strip().replace("\n", newline_replacement) for t in arr.to_pylist()]


def labels(path: str, sha256: str) -> list[str]:
    """The model's labels (fasttext-predict has no get_labels: k=-1 on an empty line returns them all)."""
    return sorted(lab for _, lab in _load(path, sha256).f.predict("\n", -1, 0.0, "strict"))


def score(texts: Sequence[str] | pa.Array | pa.ChunkedArray, path: str, sha256: str, label: str,
          newline_replacement: str = " ", max_chars: Optional[int] = None) -> np.ndarray:
    """The probability of `label` for every text (float64; 0.0 where fastText does not return it). Not clipped:
    fastText returns exp(log(p + 1e-5)), so a sure document scores up to 1.00001, as datatrove records it."""
    from mix_assets.stages.quality import predict as compiled  # numba: only in processes that score

    m = compiled.loaded(path, sha256)
    if m.supported():
        if label not in m.labels:
            raise ValueError(f"{path}: the model has no label {label!r}; its labels: {sorted(m.labels)}")
        arr = text_array(texts, "quality")
        if arr.type == pa.string():
            arr = arr.cast(pa.large_string())
        return compiled.score_array(m, arr, m.labels.index(label), newline_replacement, max_chars)
    return score_cpp(texts, path, sha256, label, newline_replacement, max_chars)


def score_cpp(texts: Sequence[str] | pa.Array | pa.ChunkedArray, path: str, sha256: str, label: str,
              newline_replacement: str = " ", max_chars: Optional[int] = None) -> np.ndarray:
    """`score` by fastText's C++ predict, one call per text (any model fastText loads)."""
    model = _load(path, sha256)
    if label not in (known := labels(path, sha256)):
        raise ValueError(f"{path}: the model has no label {label!r}; its labels: {known}")
    predict = model.f.predict
    out = np.zeros(len(texts), dtype=np.float64)
    for i, t in enumerate(prepared(texts, newline_replacement, max_chars)):
        for p, lab in predict(t + "\n", -1, 0.0, "strict"):
            if lab == label:
                out[i] = p
                break
    return out
