"""The `quality:` section of the mix spec (the classifier) and the `filters.quality` keep rule per source.

`quality:` names one fastText model: `file` + `sha256` (a model the user brings, refused when its bytes
differ) or `train` (DCLM-style: positives from reference sources, negatives a seeded sample of the raw
pool; trained with one thread and a fixed seed, so the file is byte-identical on a rebuild). A source keeps
by it when its merged `filters:` has a `quality:` rule (a threshold on the score or a top fraction).
Absent: no quality asset, and the config's bytes and fingerprint are those from before this stage.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field, model_validator

from mix_assets.core.spec import Strict

NAME = r"^[a-z0-9][a-z0-9_.-]{0,63}$"


class QualityTraining(Strict):
    """How the classifier is trained (fastText supervised, thread=1: Hogwild with more threads is not
    reproducible)."""

    positives: list[str] = Field(min_length=1)  # reference sources: their documents are label `hq`
    negatives: Optional[list[str]] = None  # sources sampled as `lq`; None: the whole raw pool
    max_docs_per_label: int = Field(20000, ge=10)  # a seeded sample of each side at most this large
    held_out: float = Field(0.2, gt=0, lt=0.9)  # seeded share of the labelled documents kept for metrics
    max_chars: int = Field(2000, ge=100)  # characters of each document trained and scored on
    epoch: int = Field(5, ge=1, le=100)
    lr: float = Field(0.1, gt=0, le=2)
    dim: int = Field(64, ge=2, le=512)
    word_ngrams: int = Field(2, ge=1, le=5)  # DCLM: bigrams
    bucket: int = Field(100_000, ge=1000)  # hashed n-gram rows: the .bin holds (words + bucket) x dim floats
    min_count: int = Field(1, ge=1)
    seed: int = 0  # fastText's seed and the sampling seed (with the mix seed)


class QualitySpec(Strict):
    """The classifier every `filters.quality` rule scores with."""

    name: str = Field(pattern=NAME)  # the model's name: rejections read `quality:<name>`
    file: Optional[str] = None  # a fastText .bin/.ftz the user brings (relative to the config file) ...
    sha256: Optional[str] = Field(None, pattern=r"^[0-9a-f]{64}$")  # ... pinned by its sha256
    label: str = "__label__hq"  # the label whose probability is the score (a brought model's own)
    # with `file`: only the labelled data its held-out metrics are computed on (nothing is trained)
    train: Optional[QualityTraining] = None
    newline_replacement: str = " "  # fastText reads one line (datatrove's FastTextClassifierFilter: "")
    min_auc: float = Field(0.8, ge=0.5, le=1)  # quality_classifier_separates_heldout (blocking)
    histogram_bins: int = Field(10, ge=2, le=100)

    @model_validator(mode="after")
    def _one_model(self) -> "QualitySpec":
        if self.file is None and self.train is None:
            raise ValueError("quality: give `train` (a classifier trained in the graph) or `file` with `sha256`")
        if self.file is not None and self.sha256 is None:
            raise ValueError("quality.file needs `sha256`: a brought model is pinned by its bytes")
        return self


class QualityKeep(Strict):
    """A source's keep rule on the classifier's score: `threshold` (keep score >= it) or `top_fraction`
    (keep the best-scored share of the source's documents)."""

    enabled: bool = True
    threshold: Optional[float] = Field(None, ge=0, le=1)
    top_fraction: Optional[float] = Field(None, gt=0, le=1)

    @model_validator(mode="after")
    def _one_rule(self) -> "QualityKeep":
        if (self.threshold is None) == (self.top_fraction is None):
            raise ValueError("filters.quality: give exactly one of `threshold` or `top_fraction`")
        return self
