"""Access to the real text in ../shared/data for tests (read at run time, never copied)."""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def data_dir() -> Path:
    """`<repo>/../shared/data` (a worktree under /work/wt/<name> looks one level further up)."""
    env = os.environ.get("MIX_SHARED_DATA")
    cands = [Path(env)] if env else [REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data"]
    for c in cands:
        if c.is_dir():
            return c
    pytest.skip(f"shared data not found at {cands[0]}")


@lru_cache(maxsize=None)
def paragraphs(source: str) -> list[str]:
    """Blank-line separated paragraphs (lines joined) of every text file of a shared source."""
    out: list[str] = []
    for p in sorted((data_dir() / "sources" / source).glob("*.txt")):
        raw = p.read_bytes()
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
            para = " ".join(line.strip() for line in block.split("\n") if line.strip())
            if len(para.split()) >= 12:
                out.append(para)
    return out
