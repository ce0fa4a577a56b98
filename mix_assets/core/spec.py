"""The base every config section builds on: a strict, frozen pydantic model and the name pattern.

`mix_assets/config.py` composes the stage sections (`stages/<stage>/config.py`) into the mix spec; they
all derive from `Strict`, so an unknown key in any section is refused at load.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

NAME = r"^[a-z][a-z0-9_]{0,62}$"  # a mix, source or eval task name: an asset key part, a doc_id prefix


class Strict(BaseModel):
    """A config section: unknown keys are refused, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
