"""A JSONL source with every kind of row raw/<source> drops (stages/sources/test_sources.py, core/test_engine.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path


def messy_jsonl(path: Path, n: int = 400) -> Path:
    """`n` JSONL rows of short prose (padded with spaces and newlines) with every kind of bad row mixed
    in: undecodable bytes, NUL, control characters, blank lines, a lone surrogate escape (seeded)."""
    rng = random.Random(7)
    lines = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.04:
            lines.append(b'{"text": "bad \xff bytes %d"}' % i)
        elif kind < 0.08:
            lines.append(json.dumps({"text": f"binary {i}\u0000"}).encode())
        elif kind < 0.12:
            lines.append(json.dumps({"text": "\x01\x02\x03" * 5 + str(i)}).encode())
        elif kind < 0.14:
            lines.append(b"")
        elif kind < 0.16:
            lines.append(json.dumps({"text": "\\ud800"}).encode().replace(b"\\\\", b"\\"))  # a lone surrogate
        else:
            words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "epsilon"]) for _ in range(rng.randint(1, 60)))
            lines.append(json.dumps({"text": f" {words} {i}\n"}).encode())
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path
