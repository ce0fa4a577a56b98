"""The document filters, in cascade order: one line per filter (the `FILTER` of its rules/<name>.py).

The cascade (filters.py), the `filters:` config section (config.py), the kill-rate and brevity tables and
the samples' order (decisions.py, metadata.py) are all read from here. The order is datatrove's
examples/fineweb.py@05194d39: sanity, Gopher repetition, Gopher quality, C4, FineWeb.
"""

from __future__ import annotations

from typing import Optional

from mix_assets.stages.filters.rule import Filter
from mix_assets.stages.filters.rules import c4, fineweb, gopher_quality, gopher_repetition, sanity

_FILTERS: list[Filter] = []


def register(f: Filter, after: Optional[str] = None) -> None:
    """Add `f` to the cascade: last, or right after the filter named `after`. Names are unique."""
    if f.name in names() or f.name in ("language", "quality"):  # decisions.filter_order() ends with these two
        raise ValueError(f"a filter named {f.name!r} is registered already")
    if after is not None and after not in names():
        raise ValueError(f"no filter named {after!r} to register {f.name!r} after; registered: {list(names())}")
    at = len(_FILTERS) if after is None else names().index(after) + 1
    _FILTERS.insert(at, f)


def unregister(name: str) -> Filter:
    """Take the filter named `name` out of the cascade (a test restoring the registry); returns it."""
    return _FILTERS.pop(names().index(name))


def filters() -> tuple[Filter, ...]:
    """Every registered filter, in cascade order."""
    return tuple(_FILTERS)


def names() -> tuple[str, ...]:
    return tuple(f.name for f in _FILTERS)


def sections() -> tuple[Filter, ...]:
    """The filters a `filters:` section configures (all but those the raw stage applies), in cascade order."""
    return tuple(f for f in _FILTERS if f.section)


def length_rules() -> tuple[str, ...]:
    """The rules that judge a document by its length, in cascade order."""
    return tuple(r for f in _FILTERS for r in f.length_rules)


register(sanity.FILTER)
register(gopher_repetition.FILTER)
register(gopher_quality.FILTER)
register(c4.FILTER)
register(fineweb.FILTER)
