"""Typed reads of manifest fields that record a problem instead of raising (the checkers' helper)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class Checker:
    """The problems found so far, and reads of fields that add one when a field is missing or mistyped."""

    def __init__(self, m: Mapping[str, Any]):
        self.m = m
        self.problems: list[str] = []

    def bad(self, msg: str) -> None:
        self.problems.append(msg)

    def need(self, obj: Any, key: str, where: str, kind: type | tuple = int) -> Any:
        """obj[key] when present and of `kind` (ints are non-negative), else record a problem and return None."""
        if not isinstance(obj, Mapping) or key not in obj:
            self.bad(f"{where}.{key}: missing")
            return None
        v = obj[key]
        if kind is int:
            if not is_int(v) or v < 0:
                self.bad(f"{where}.{key}: expected a non-negative integer, got {v!r}")
                return None
        elif not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
            self.bad(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got {type(v).__name__}")
            return None
        return v

    def eq(self, what: str, got: Any, claimed_where: str, claimed: Any) -> None:
        if got is not None and claimed is not None and got != claimed:
            self.bad(f"{claimed_where}: says {claimed}, but {what} is {got}")
