"""The split stage's config section: the held-out validation split."""

from __future__ import annotations

from pydantic import Field

from mix_assets.core.spec import Strict


class SplitSpec(Strict):
    """The held-out validation split."""

    val_fraction: float = Field(0.02, gt=0, lt=0.5)  # target share of kept documents
    tolerance: float = Field(0.5, gt=0, le=1)  # allowed relative deviation of the realised share
