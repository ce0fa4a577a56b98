"""line_dedup's metadata as the UI shows it: removed lines, bytes and dropped documents per source, and the most
frequent removed lines, scrubbed like every audit artifact (console/metadata.py's conventions)."""

from __future__ import annotations

from typing import Sequence

import dagster as dg
import numpy as np

from mix_assets.console import charts
from mix_assets.console.metadata import by_name, wide_table
from mix_assets.stages.audit import contamination as ct
from mix_assets.stages.tokens.samples import scrub_text

SOURCE_COLUMNS = ["source", "docs", "modified_docs", "removed_lines", "removed_bytes", "dropped_docs",
                  "bytes_before", "lost_bytes_share", "skipped"]
SOURCE_DECIDING = ["source", "lost_bytes_share"]  # lines_lost_within_share: lost_bytes_share > max_lost_share


def scrubbed_lines(top: Sequence[dict], scrub: np.ndarray, k: int) -> tuple[list[dict], int]:
    """The top lines with runs of `k` eval-item words masked; a line still leaking is withheld whole."""
    out, withheld = [], 0
    for r in top:
        text, _ = scrub_text(r["line"], scrub, k)
        if ct.leaking_strings([text], scrub, k):
            text, withheld = "(withheld: eval text)", withheld + 1
        out.append({**r, "line": text})
    return out, withheld


def line_dedup(storage, res, top: tuple[list[dict], int], min_docs: int) -> dict:
    """line_dedup (stages/lines/lines.Result): counts per source, the most frequent removed lines."""
    rows, withheld = top
    shown = [{"docs": r["docs"], "line": charts.code_span(r["line"][:200])} for r in rows]
    return {
        "path": dg.MetadataValue.path(storage.uri("lines")),
        "distinct_lines": res.lines,
        "frequent_lines": res.frequent,
        "min_docs": min_docs,
        "removed_lines": sum(r["removed_lines"] for r in res.sources),
        "dropped_docs": sum(r["dropped_docs"] for r in res.sources),
        **by_name("removed_lines", {r["source"]: r["removed_lines"] for r in res.sources}),
        **by_name("removed_bytes", {r["source"]: r["removed_bytes"] for r in res.sources}),
        **by_name("dropped_docs", {r["source"]: r["dropped_docs"] for r in res.sources}),
        **wide_table("sources", res.sources, SOURCE_COLUMNS, SOURCE_DECIDING),
        "top_removed_lines": dg.MetadataValue.md(
            (charts.markdown_table(shown, ["docs", "line"], 200) if shown else "no line removed")
            + (f"\n\n{withheld} line(s) withheld: they still held eval text after the scrub." if withheld else "")
            + "\n\nLines of the mix's sources (raw text), runs of eval-item words masked; a line shorter than "
              "audit.scrub_words words is not matched against the eval registry."),
        "withheld_lines": withheld,
    }


def lines_lost(rows: Sequence[dict], over: Sequence[dict], max_share: float) -> dict:
    return {"over_share": len(over), "max_lost_share": max_share,
            **wide_table("sources", list(rows), SOURCE_COLUMNS, SOURCE_DECIDING)}
