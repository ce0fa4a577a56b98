"""The UI metadata of dedup_keys, exclusion_masks and their checks (keys: console/metadata.py's convention)."""

from __future__ import annotations

import dagster as dg

from mix_assets.console import charts
from mix_assets.console.metadata import (
    by_name, chart, parquet_file_output, seconds, share, stored_chart, table, wide_table,
)
from mix_assets.stages.dedup import lsh
from mix_assets.stages.dedup.dedup import DEDUP_SCHEMA, EXCLUSION_SCHEMA

S_CURVE_POINTS = (0.5, 0.7, 0.8, 0.9)
_CLUSTER_BINS = [(1, 1), (2, 2), (3, 5), (6, 20), (21, 10**12)]


def _cluster_sizes(kept: dict) -> list[dict]:
    """Clusters per size bin from {cluster size: clusters} (the reduce's `kept_cluster_sizes`)."""
    return [{"cluster_size": f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi < 10**12 else f">= {lo}"),
             "clusters": int(sum(c for s, c in kept.items() if lo <= s <= hi))} for lo, hi in _CLUSTER_BINS]


def _s_curve(b: int, r: int, threshold: float, storage=None) -> dict:
    p = {j: share(lsh.s_curve(b, r, j)) for j in S_CURVE_POINTS}
    # a function of (b, r, threshold) alone: stored once drawn (a rebuild draws it no more)
    curve = stored_chart(storage, "s_curve", {"bands": b, "rows": r, "threshold": threshold},
                         lambda: charts.s_curve_md(b, r, threshold))
    return {
        **by_name("candidate_probability", {f"{j:.1f}": v for j, v in p.items()}),
        "s_curve": table([{"jaccard": j, "candidate_probability": v} for j, v in p.items()]),
        "s_curve_chart": chart(curve + f"\n\nP(pair shares a band) = 1 - (1 - J^{r})^{b}; "
                               f"candidates are then verified by exact shingle Jaccard >= {threshold}"),
    }


def dedup_keys(storage, key: str, st: dict, elapsed: float, sources: list[str]) -> dict:
    """dedup_keys: LSH parameters, kill counts and shares, pair and cluster statistics; which sources'
    signatures were stored already (by an earlier dedup_keys, or contamination_report's pass) and which
    it signed."""
    n = max(st["documents"], 1)
    reused = st.get("reused_sources", [])
    per_source = [{"source": s, "docs": v["documents"], "exact_dup_docs": v["exact_dup"],
                   "near_dup_docs": v["near_dup"],
                   "excluded_share": (v["exact_dup"] + v["near_dup"]) / max(v["documents"], 1)}
                  for s, v in st["per_source"].items()]
    none = -1.0  # no pair of that kind: a number keeps the plot continuous
    return {
        **parquet_file_output(storage, key, DEDUP_SCHEMA),
        "lsh_bands": st["bands"],
        "lsh_rows": st["rows"],
        "minhash_permutations": st["num_perm"],
        "jaccard_threshold": st["threshold"],
        **_s_curve(st["bands"], st["rows"], st["threshold"], storage),
        "docs": st["documents"],
        "kept_docs": st["kept"],
        "exact_dup_docs": st["excluded_exact_dup"],
        "near_dup_docs": st["excluded_near_dup"],
        "exact_dup_share": share(st["excluded_exact_dup"] / n),
        "near_dup_share": share(st["excluded_near_dup"] / n),
        "wordless_docs": st["no_shingle_documents"],  # no words, so no shingle: keyed on their raw text
        "wordless_exact_dup_docs": st["wordless_exact_dup"],
        "candidate_pairs": st["candidate_pairs"],
        "confirmed_pairs": st["confirmed_pairs"],
        "rejected_pairs": st["rejected_pairs"],
        "min_confirmed_jaccard": share(st["confirmed_jaccard_min"]) if st["confirmed_jaccard_min"] is not None else none,
        "max_rejected_jaccard": share(st["rejected_jaccard_max"]) if st["rejected_jaccard_max"] is not None else none,
        "clusters": st["clusters"],
        "multi_member_clusters": st["multi_member_clusters"],
        "largest_cluster_docs": st["largest_cluster"],
        "cluster_sizes": table(_cluster_sizes(st["kept_cluster_sizes"])),
        **wide_table("kills_per_source", per_source, ["source", "docs", "exact_dup_docs", "near_dup_docs",
                                                      "excluded_share"],
                     ["source", "exact_dup_docs", "near_dup_docs", "excluded_share"]),
        "signatures_reused_sources": ", ".join(reused) or "none",
        "signatures_signed_sources": ", ".join(s for s in sorted(sources) if s not in reused) or "none",
        "elapsed_seconds": seconds(elapsed),
        "docs_per_second": round(st["documents"] / max(elapsed, 1e-9), 1),
    }


COMPOSITION_COLUMNS = ["source", "docs_before", "docs_after", "bytes_before", "bytes_after", "tokens_before",
                       "tokens_after", "share_before", "share_after", "lost_token_share"]
# the gates read tokens_after (source_budgets_met) and lost_token_share (no_source_vanished has kept_docs/<source>)
COMPOSITION_DECIDING = ["source", "tokens_after", "lost_token_share"]


def _rejects_md(m) -> str:
    """Dup samples beside their kept member, then contaminated documents by id only (never their text)."""
    parts = []
    for reason in ("exact_dup", "near_dup"):
        rows = [{"excluded": charts.code_span(s.excluded), "kept": charts.code_span(s.kept), "Jaccard": f"{s.jaccard:.3f}",
                 "excluded text": charts.code_span(s.excluded_text), "kept text": charts.code_span(s.kept_text)}
                for s in m.samples if s.reason == reason]
        cols = ["excluded", "kept", "Jaccard", "excluded text", "kept text"]
        parts.append(f"**{reason}** ({m.per_reason[reason]:,} excluded)\n\n" + charts.markdown_table(rows, cols))
    ids, n = m.contaminated_ids, m.contaminated_docs
    parts.append(f"**contaminated** ({n:,} documents; ids only, text is never shown)\n\n"
                 + (", ".join(map(charts.code_span, ids[:50])) + (" ..." if n > 50 else "") if ids else "none"))
    return "\n\n".join(parts)


def exclusion_masks(storage, key: str, m) -> dict:
    """exclusion_masks (`dedup.Masks`): exclusions per reason and the composition before/after."""
    n = max(m.documents, 1)
    comp = m.composition
    return {
        **parquet_file_output(storage, key, EXCLUSION_SCHEMA),
        "docs": m.documents,
        "excluded_docs": m.excluded_docs,
        **by_name("excluded_docs", m.per_reason),
        **by_name("excluded_share", {r: share(c / n) for r, c in m.per_reason.items()}),
        "excluded_share": share(m.excluded_docs / n),
        "mask_contaminated": m.mask_contaminated,
        **wide_table("composition", comp, COMPOSITION_COLUMNS, COMPOSITION_DECIDING),
        "composition_chart": chart(charts.composition_md(
            {a["source"]: a["tokens_before"] for a in comp}, {a["source"]: a["tokens_after"] for a in comp},
            "estimated tokens per source, before and after the masks")),
        "rejects": dg.MetadataValue.md(_rejects_md(m)),
    }


def no_source_vanished(m) -> dict:
    return {"vanished_sources": ", ".join(m.vanished) or "none",
            **by_name("kept_docs", {a["source"]: a["docs_after"] for a in m.composition})}


def source_budgets_met(m) -> dict:
    return {**by_name("kept_tokens", {a["source"]: a["tokens_after"] for a in m.composition}),
            **by_name("minimum_tokens", m.minimum_tokens)}


def source_loss_within_limit(m, limit: float) -> dict:
    return {"lost_token_share_limit": limit,
            **by_name("lost_token_share", {a["source"]: share(a["lost_token_share"]) for a in m.composition})}
