"""Progress reporting for long steps: documents, bytes, tokens, rate and ETA at a steady interval.

Pure (no Dagster import): pass any object with an ``info(str)`` method, e.g. ``context.log``, and the
lines land in the run's log view. Logging is time-driven, not count-driven, so a step that processes
a million tiny documents and one that processes ten huge ones both log every ``interval`` seconds.

    progress = Progress(context.log, "tokenize", total_docs=n_docs, total_bytes=n_bytes)
    for batch in batches:
        ...
        progress.update(docs=len(batch), bytes=batch_bytes, tokens=batch_tokens)
    progress.done()
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class _Logger(Protocol):
    def info(self, msg: str) -> object: ...


_UNITS = ("", "K", "M", "G", "T", "P")


def human(n: float, unit: str = "") -> str:
    """1234567 -> '1.23M' (decimal prefixes; bytes use 'B' as unit)."""
    n = float(n)
    for prefix in _UNITS:
        if abs(n) < 1000 or prefix == _UNITS[-1]:
            return f"{n:.3g}{unit}" if prefix == "" else f"{n:.2f}{prefix}{unit}"
        n /= 1000
    raise AssertionError("unreachable")


def duration(seconds: float) -> str:
    """Seconds as '1h02m03s' / '4m05s' / '6.1s'."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


@dataclass
class Progress:
    """Counts work and logs a status line at most once per ``interval`` seconds (and at ``done``).

    ETA comes from whichever total is known, preferring bytes (the steadiest measure of work), then
    documents, then tokens. `item` names what `docs` counts ("rows" for a reader that has not yet
    filtered or sampled them); tokens appear only once some are counted or a total is given, so a
    step that does not tokenize never reports "0 tokens".
    """

    log: _Logger
    label: str
    total_docs: int | None = None
    total_bytes: int | None = None
    total_tokens: int | None = None
    interval: float = 10.0
    item: str = "docs"
    clock: Callable[[], float] = time.monotonic  # injectable for tests
    docs: int = 0
    bytes: int = 0
    tokens: int = 0
    lines: int = 0  # status lines logged so far
    _start: float = field(init=False)
    _last: float = field(init=False)

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ValueError(f"interval must be > 0 seconds, got {self.interval}")
        self._start = self._last = self.clock()

    def update(self, docs: int = 0, bytes: int = 0, tokens: int = 0) -> bool:
        """Add work done; log if the interval elapsed. Returns True when a line was logged."""
        self.docs += docs
        self.bytes += bytes
        self.tokens += tokens
        now = self.clock()
        if now - self._last >= self.interval:
            self._last = now
            self._emit(now, final=False)
            return True
        return False

    def done(self, outcome: str | None = None) -> str:
        """Log (and return) the final line: totals, average rates, elapsed time, and `outcome` (what
        the step kept, in the words of its metadata) when given."""
        return self._emit(self.clock(), final=True, outcome=outcome)

    @property
    def elapsed(self) -> float:
        return self.clock() - self._start

    def _fraction(self) -> float | None:
        for done, total in ((self.bytes, self.total_bytes), (self.docs, self.total_docs),
                            (self.tokens, self.total_tokens)):
            if total:
                return min(done / total, 1.0)
        return None

    def status(self, now: float | None = None, final: bool = False) -> str:
        now = self.clock() if now is None else now
        el = max(now - self._start, 1e-9)
        parts = [self._count(self.docs, self.total_docs, f" {self.item}"),
                 self._count(self.bytes, self.total_bytes, "B")]
        rates = [f"{human(self.docs / el)} {self.item}/s", f"{human(self.bytes / el, 'B')}/s"]
        if self.tokens or self.total_tokens:
            parts.append(self._count(self.tokens, self.total_tokens, " tokens"))
        if self.tokens:
            rates.append(f"{human(self.tokens / el)} tokens/s")
        line = f"{self.label}: " + ", ".join(parts) + " | " + ", ".join(rates)
        if final:
            return line + f" | done in {duration(el)}"
        frac = self._fraction()
        if frac is not None:
            eta = el * (1 - frac) / frac if frac > 0 else float("inf")
            line += f" | {frac:.1%}, ETA {duration(eta) if eta != float('inf') else '?'}"
        return line + f" | elapsed {duration(el)}"

    def _count(self, n: int, total: int | None, unit: str) -> str:
        if unit == "B":
            return human(n, "B") + (f"/{human(total, 'B')}" if total else "")
        return human(n) + (f"/{human(total)}" if total else "") + unit

    def _emit(self, now: float, final: bool, outcome: str | None = None) -> str:
        line = self.status(now, final) + (f" | {outcome}" if outcome else "")
        self.log.info(line)
        self.lines += 1
        return line


def reused_line(label: str, what: str, counts: dict[str, int], why: str, item: str = "docs") -> str:
    """The line a step logs for the stored results it reuses instead of a progress line of zeros:
    'dedup_keys signatures: reused the stored signatures of math (400 docs), web (1,200 docs): 1,600 docs
    not recomputed (raw data and parameters unchanged)'."""
    parts = ", ".join(f"{name} ({n:,} {item})" for name, n in sorted(counts.items()))
    return f"{label}: reused the stored {what} of {parts}: {sum(counts.values()):,} {item} not recomputed ({why})"
