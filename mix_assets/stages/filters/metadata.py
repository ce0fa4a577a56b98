"""document_filters' metadata as the UI shows it: kill rates per filter x source, the composition before/after,
the domains the guard watches, rejected samples beside kept ones (console/metadata.py's conventions)."""

from __future__ import annotations

from typing import Mapping, Optional

import dagster as dg
import numpy as np

from mix_assets.console import charts
from mix_assets.console.metadata import FULL_ROWS, by_name, markdown_table, share, wide_table
from mix_assets.stages.audit import contamination as ct
from mix_assets.stages.tokens.samples import scrub_text


KILL_COLUMNS = ["source", "filter", "docs", "failed_docs", "kill_share", "killed_bytes_share", "first_failure_docs",
                "max_kill_share"]
KILL_DECIDING = ["source", "filter", "kill_share"]  # kill_rates_expected: kill_share > max_kill_share
FILTER_COMPOSITION_COLUMNS = ["source", "language", "length_bucket", "docs_before", "docs_after", "bytes_before",
                              "bytes_after", "kept_share"]
DOMAIN_COLUMNS = ["kind", "domain", "docs_before", "docs_after", "kept_share"]
DOMAIN_DECIDING = ["kind", "domain", "kept_share"]  # no_domain_vanished: a large domain's kept_share


def sample_rows(picked, texts: Mapping[str, str], scrub: np.ndarray, k: int,
                why: Optional[Mapping[str, str]] = None) -> tuple[list[dict], int]:
    """Sample rows with text scrubbed as every audit artifact is (runs of `k` eval-item words masked; a text
    still leaking is withheld whole); returns the rows and how many were withheld. `why`: `explain`'s
    {doc_id: reason with its figures} (else the bare reason)."""
    rows, withheld = [], 0
    for src, f, d, r in picked:
        text, _ = scrub_text(texts.get(d, ""), scrub, k)
        if ct.leaking_strings([text], scrub, k):
            text, withheld = "(withheld: eval text)", withheld + 1
        rows.append({"source": src, "filter": f, "doc_id": d, "reason": (why or {}).get(d, r), "text": text})
    return rows, withheld


def _filter_samples_md(rows: list[dict], withheld: int) -> str:
    """Per source: rejected documents by filter, each with its rule's measured figure beside the threshold
    (`gopher_quality:alpha_words 0.78 < 0.80`), then kept documents of the same source (scrubbed text). Ids,
    reasons and texts are code spans: stored text is shown as it is, never read as Markdown."""
    parts = []
    for src in sorted({r["source"] for r in rows}):
        mine = [{"filter": r["filter"], "reason": charts.code_span(r["reason"]) if r["reason"] else "",
                 "doc_id": charts.code_span(r["doc_id"]), "text": charts.code_span(r["text"])}
                for r in rows if r["source"] == src]
        parts.append(f"**{src}**\n\n" + charts.markdown_table(mine, ["filter", "reason", "doc_id", "text"], 200))
    note = (f"\n\n{withheld} sample(s) withheld: they still held eval text after the scrub." if withheld else "")
    return ("\n\n".join(parts) or "no documents") + note + "\n\nContaminated documents are never shown; runs of " \
        "audit.scrub_words eval-item words are masked."


def document_filters(storage, s, samples: tuple[list[dict], int], reused: list[str]) -> dict:
    """document_filters (`stages/filters/decisions.Summary`): kill rates per filter x source, the composition
    before/after by source x language x length bucket, rejected samples beside kept ones."""
    rows, withheld = samples
    first = {}
    for k in s.kills:
        first[k["filter"]] = first.get(k["filter"], 0) + k["first_failure_docs"]
    return {
        "path": dg.MetadataValue.path(storage.uri("filters/decisions")),
        "docs": s.documents,
        "kept_docs": s.kept,
        "rejected_docs": s.documents - s.kept,
        "rejected_share": share((s.documents - s.kept) / max(s.documents, 1)),
        **by_name("rejected_docs", first),
        "reused_sources": ", ".join(reused) or "none",
        **wide_table("kill_rates", s.kills, KILL_COLUMNS, KILL_DECIDING),
        # no gate reads it (no_domain_vanished reads `domains`) and its name takes 3 columns: Markdown only
        "composition": markdown_table(s.composition, FILTER_COMPOSITION_COLUMNS, FULL_ROWS),
        **wide_table("domains", s.domains, DOMAIN_COLUMNS, DOMAIN_DECIDING),
        "rejects": dg.MetadataValue.md(_filter_samples_md(rows, withheld)),
        "withheld_samples": withheld,
    }


def no_domain_vanished(s) -> dict:
    return {"vanished_domains": len(s.vanished), **wide_table("domains", s.domains, DOMAIN_COLUMNS, DOMAIN_DECIDING)}


def kill_rates_expected(s) -> dict:
    return {"over_expected": len(s.over_expected), **wide_table("kill_rates", s.kills, KILL_COLUMNS, KILL_DECIDING)}


def keep_share_held(rows: list[dict], below: list[dict]) -> dict:
    cols = ["source", "bytes_before", "bytes_after", "kept_bytes_share", "keep_share"]
    return {"below_keep_share_sources": len(below),
            **by_name("kept_bytes_share", {r["source"]: share(r["kept_bytes_share"]) for r in rows}),
            **wide_table("kept_bytes_shares", rows, cols, ["source", "kept_bytes_share", "keep_share"])}


def brevity_kept(s) -> dict:
    cols = ["source", "rule", "short_docs", "removed_docs", "removed_share", "warn_share"]
    return {"brevity_killed": len(s.brevity_killed),
            **(wide_table("brevity", s.brevity, cols, ["source", "rule", "removed_share"])
               if s.brevity else {})}


def url_counts(rows: list[dict]) -> dict:
    """The URL filter per source and blocklist: `url_rejected/<source>/<list>`, and a table (nothing without it)."""
    if not rows:
        return {}
    out = {f"url_rejected/{r['source']}/{r['list']}": r["rejected_docs"] for r in rows}
    out.update({f"url_unparseable/{r['source']}": r["unparseable_urls"] for r in rows if r["unparseable_urls"] is not None})
    out.update({f"url_missing/{r['source']}": r["missing_urls"] for r in rows if r["missing_urls"] is not None})
    out["url_lists"] = markdown_table(rows, ["source", "list", "kind", "rejected_docs", "unparseable_urls",
                                             "missing_urls"], FULL_ROWS)
    return out
