"""Quality tiers (`filters.quality.tiers`): score buckets of a source's kept documents, each with its epochs.

quality_scores computes every tier's cutoff score beside the keep cutoff (`tier_rows`, in QUALITY_CUTOFFS and
its metadata); token_shards gives each kept train document its tier (`TierPlan.of`) and fills the source's
budget tier by tier (stages/tokens/packing.fill_tiered); the manifest records per source x tier the effective
epochs and the tokens. A `top_fraction` bound is a cutoff like the keep rule's (scores.cutoff): the score of the
ceil(f x n)-th best of the source's scored documents, every document tied with it included. A document is in the
first tier whose cutoff its score reaches; the last tier holds the rest of what the source keeps.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.core import layout, tables


def tiered_sources(spec) -> dict[str, list]:
    """source -> its tiers (QualityTier, best first), for the sources that keep by the classifier with tiers."""
    if spec.quality is None:
        return {}
    out = {}
    for s in spec.sources:
        f = spec.filters_for(s.name)
        if f is not None and "quality" in f.active() and f.quality.tiers:
            out[s.name] = list(f.quality.tiers)
    return out


def top_cutoff(scores: np.ndarray, fraction: float) -> float:
    """The score of the ceil(fraction * n)-th best of `scores` (n > 0): the keep rule's and a tier's top-fraction
    cutoff, so every document tied at it is in."""
    k = max(1, math.ceil(fraction * len(scores)))
    return float(np.sort(scores)[::-1][k - 1])


def tier_cutoff(scores: np.ndarray, tier) -> float:
    """The score a bounded tier starts at (a document is in it when its score is >= this)."""
    if tier.min_score is not None:
        return float(tier.min_score)
    return top_cutoff(scores, tier.top_fraction) if len(scores) else 1.0


def assign(scores: np.ndarray, cutoffs) -> np.ndarray:
    """int64 tier of each score: the first tier whose cutoff it reaches, len(cutoffs) (the rest) when none.
    `cutoffs` (the bounded tiers', best first) never rise, so that is how many cutoffs lie above the score."""
    s = np.asarray(scores, np.float64)
    c = np.asarray(cutoffs, np.float64)
    if len(c) > 1 and bool((c[1:] > c[:-1]).any()):
        raise ValueError(f"tier cutoffs must not rise, best tier first: {c.tolist()}")
    return (s[:, None] < c[None, :]).sum(axis=1).astype(np.int64) if len(s) else np.zeros(0, np.int64)


def tier_rows(scores: np.ndarray, tiers, keep_cutoff: float) -> list[dict]:
    """QUALITY_CUTOFFS' `tiers` of one source: per tier its name, epochs, the cutoff it starts at and the
    scored documents it holds among those the keep rule keeps (the rest tier starts at the keep cutoff)."""
    *bounded, rest = tiers
    cut = [tier_cutoff(scores, t) for t in bounded]
    s = np.asarray(scores, np.float64)
    kept = s[s >= keep_cutoff]
    n = np.bincount(assign(kept, cut), minlength=len(tiers))
    return [{"name": t.name, "epochs": t.epochs, "cutoff": c, "documents": int(k)}
            for t, c, k in zip(tiers, [*cut, float(keep_cutoff)], n)]


@dataclass(frozen=True)
class TierPlan:
    """One source's tiers as token_shards uses them: names, tier epochs, the bounded tiers' cutoffs and every
    scored document's score (doc_id, score: quality_scores' table)."""

    source: str
    names: tuple[str, ...]
    epochs: tuple[float, ...]
    cutoffs: tuple[float, ...]
    scores: pa.Table

    @classmethod
    def read(cls, storage, spec) -> dict[str, "TierPlan"]:
        """The plans of every tiered source, from quality_scores' files (QUALITY_CUTOFFS, QUALITY_SCORES)."""
        want = tiered_sources(spec)
        if not want:
            return {}
        if not storage.exists(layout.QUALITY_CUTOFFS):
            raise FileNotFoundError(f"{storage.uri(layout.QUALITY_CUTOFFS)}: not found; materialise quality_scores")
        rows = json.loads(storage.read_text(layout.QUALITY_CUTOFFS))
        out = {}
        for s, tiers in want.items():
            got = (rows.get(s) or {}).get("tiers")
            if not got or [r["name"] for r in got] != [t.name for t in tiers] \
                    or [r["epochs"] for r in got] != [t.epochs for t in tiers]:
                raise ValueError(f"{storage.uri(layout.QUALITY_CUTOFFS)}: source {s!r} has tiers {got!r}, not the "
                                 f"configured {[t.name for t in tiers]}: materialise quality_scores again")
            t = tables.read_parquet(storage, layout.QUALITY_SCORES.format(source=s), ["doc_id", "score"])
            out[s] = cls(s, tuple(r["name"] for r in got), tuple(float(r["epochs"]) for r in got),
                         tuple(float(r["cutoff"]) for r in got[:-1]), t)
        return out

    def of(self, doc_ids: pa.Array) -> np.ndarray:
        """int64 tier of each document (a doc_id string array); every one must have a score."""
        pos = pc.index_in(doc_ids, value_set=self.scores.column("doc_id").combine_chunks())
        if pos.null_count:
            missing = doc_ids.filter(pc.is_null(pos)).slice(0, 3).to_pylist()
            raise ValueError(f"source {self.source!r}: {pos.null_count} kept document(s) have no quality score "
                             f"(e.g. {missing}); quality_scores is older than the raw documents: rebuild it")
        scores = self.scores.column("score").combine_chunks().to_numpy(zero_copy_only=False)
        return assign(scores[pos.to_numpy(zero_copy_only=False)], self.cutoffs)
