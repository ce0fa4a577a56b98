"""The `line_dedup:` section of the mix spec: cross-document line dedup (stages/lines/lines.py, docs/filters.md).

Absent (the default, and the demo): no line_dedup asset, every byte as before. Present: every non-blank line
(whitespace-stripped) is counted once per document over every source of the mix; lines found in at least
`min_docs` documents are removed from the documents of every source not listed in `skip`.
"""

from __future__ import annotations

from pydantic import Field

from mix_assets.core.spec import Strict


class LineDedupSpec(Strict):
    """Lines occurring in >= min_docs documents of the mix are removed (a modifier); a document left with too
    little is dropped (exclusion reason `line_dedup:too_little_left`)."""

    min_docs: int = Field(10, ge=2)  # a line found in this many documents (counted once per document) is boilerplate
    # shorter stripped lines are never counted nor removed: a short line is more often structure than boilerplate
    # (GSM8K's "#### 72" answer lines are each in ~200 documents of the shared sample)
    min_line_chars: int = Field(20, ge=1)
    # a document that lost lines is dropped when what remains (non-blank characters) is under this share of
    # what it had, or under min_kept_chars
    min_kept_share: float = Field(0.2, ge=0, le=1)
    min_kept_chars: int = Field(1, ge=0)
    max_lost_share: float = Field(0.1, gt=0, le=1)  # WARN when a source loses more of its bytes than this
    skip: list[str] = []  # sources whose lines are counted but never removed (e.g. code, where lines repeat by design)
    samples: int = Field(20, ge=0, le=200)  # most frequent removed lines shown (scrubbed like every audit artifact)
