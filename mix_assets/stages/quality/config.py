"""The `quality:` section of the mix spec (the classifier) and the `filters.quality` keep rule per source.

`quality:` names one fastText model: `file` + `sha256` (a model the user brings, refused when its bytes
differ) or `train` (DCLM-style: positives from reference sources, negatives a seeded sample of the raw
pool; trained with one thread and a fixed seed, so the file is byte-identical on a rebuild). A source keeps
by it when its merged `filters:` has a `quality:` rule (a threshold on the score or a top fraction), and may
split what it keeps into `tiers` (score buckets, each repeated `epochs` times in the train stream).
Absent: no quality asset, and the config's bytes and fingerprint are those from before this stage.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

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


# The field's prior (../shared/seeds/002_…): repeating the top quality tier 2-4x is safe, repeating more (or
# low-quality data) amplifies its artifacts. A document is repeated at most this many times: source epochs x
# tier epochs (checked where both are known, mix_assets/config.py).
MAX_TIER_EPOCHS = 4.0


class QualityTier(Strict):
    """One score bucket of a source's kept documents, listed best first: the documents scoring >= `min_score`,
    or within the best `top_fraction` of the source's scored documents (the keep rule's population; every
    document tied at that cutoff is in), that no earlier tier took. The last tier gives neither bound: the
    rest of what the source keeps."""

    name: str = Field(pattern=NAME)  # shown in the manifest and the UI: `sources.<s>.tiers.<name>`
    min_score: Optional[float] = Field(None, ge=0, le=1)
    top_fraction: Optional[float] = Field(None, gt=0, lt=1)
    # times each of the tier's documents appears per epoch of its source (the effective epochs are source
    # epochs x this); >= 1: a tier below 1 would ask for more unique tokens than the source budget reserves
    epochs: float = Field(1.0, ge=1, le=MAX_TIER_EPOCHS)

    @model_validator(mode="after")
    def _one_bound(self) -> "QualityTier":
        if self.min_score is not None and self.top_fraction is not None:
            raise ValueError(f"tier {self.name!r}: give `min_score` or `top_fraction`, not both")
        return self

    @property
    def bound(self) -> Optional[float]:
        return self.min_score if self.min_score is not None else self.top_fraction


class QualityKeep(Strict):
    """A source's keep rule on the classifier's score: `threshold` (keep score >= it) or `top_fraction`
    (keep the best-scored share of the source's documents)."""

    enabled: bool = True
    threshold: Optional[float] = Field(None, ge=0, le=1)
    top_fraction: Optional[float] = Field(None, gt=0, le=1)
    # score buckets of the kept documents with their epochs, best first (QualityTier); None: one tier, the
    # source's own epochs (the budget fill and the shards as without this field)
    tiers: Optional[list[QualityTier]] = Field(None, min_length=2)

    @model_serializer(mode="wrap")
    def _omit_unset_tiers(self, handler: SerializerFunctionWrapHandler) -> dict:
        out = handler(self)
        if isinstance(out, dict) and out.get("tiers", 0) is None:
            out.pop("tiers")  # configs written before tiers keep their bytes and quality_scores' code_version
        return out

    @model_validator(mode="after")
    def _one_rule(self) -> "QualityKeep":
        if (self.threshold is None) == (self.top_fraction is None):
            raise ValueError("filters.quality: give exactly one of `threshold` or `top_fraction`")
        if self.tiers is not None:
            _check_tiers(self)
        return self


def _check_tiers(keep: QualityKeep) -> None:
    """Tiers best first, one kind of bound, the last one the rest, each bound stricter than the keep rule."""
    tiers = keep.tiers
    names = [t.name for t in tiers]
    if len(set(names)) != len(names):
        raise ValueError(f"filters.quality.tiers: names must be unique, got {names}")
    *bounded, rest = tiers
    if rest.bound is not None:
        raise ValueError(f"filters.quality.tiers: the last tier ({rest.name!r}) takes the rest of the kept "
                         "documents: give it no `min_score` / `top_fraction`")
    if missing := [t.name for t in bounded if t.bound is None]:
        raise ValueError(f"filters.quality.tiers: {missing} give no bound; only the last tier is the rest")
    kinds = {"min_score" if t.min_score is not None else "top_fraction" for t in bounded}
    if len(kinds) > 1:
        raise ValueError("filters.quality.tiers: bound every tier by `min_score` or every tier by `top_fraction`")
    kind = kinds.pop()
    b = [t.bound for t in bounded]
    if kind == "min_score" and any(x <= y for x, y in zip(b, b[1:])):
        raise ValueError(f"filters.quality.tiers: min_score must fall tier by tier (best first), got {b}")
    if kind == "top_fraction" and any(x >= y for x, y in zip(b, b[1:])):
        raise ValueError(f"filters.quality.tiers: top_fraction must grow tier by tier (best first), got {b}")
    # a tier as wide as the keep rule would take every kept document and leave the next ones empty
    if kind == "min_score" and keep.threshold is not None and b[-1] <= keep.threshold:
        raise ValueError(f"filters.quality.tiers: min_score {b[-1]} does not exceed the keep threshold "
                         f"{keep.threshold}")
    if kind == "top_fraction" and keep.top_fraction is not None and b[-1] >= keep.top_fraction:
        raise ValueError(f"filters.quality.tiers: top_fraction {b[-1]} is not below the kept top_fraction "
                         f"{keep.top_fraction}")
