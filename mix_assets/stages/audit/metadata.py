"""The UI metadata of the audit's assets and checks (keys: console/metadata.py's convention)."""

from __future__ import annotations

import json

import dagster as dg

from mix_assets.console import charts
from mix_assets.console.metadata import by_name, chart_once, parquet_output, seconds, share, wide_table
from mix_assets.stages.audit import contamination as ct


def metadata_strings(md: dict) -> list[tuple[str, str]]:
    """(key, text) for every string a metadata dict could show, table cells included."""
    out = []
    for k, v in md.items():
        out.append((k, str(k)))
        raw = getattr(v, "value", v)
        if isinstance(v, dg.TableMetadataValue):
            raw = [r.data for r in v.records]
        elif isinstance(v, dg.TableSchemaMetadataValue):
            raw = [c.name for c in v.schema.columns]
        try:
            strings = list(ct.json_strings(json.loads(json.dumps(raw, default=str))))
        except (TypeError, ValueError):
            strings = [str(raw)]
        out.extend((k, s) for s in strings)
    return out


def eval_registry(storage, registry_path: str, rows: list[dict]) -> dict:
    """eval_registry: the denominators every audit count is read against."""
    return {
        "path": dg.MetadataValue.path(storage.uri(registry_path)),
        "tasks": len(rows),
        "eval_rows": sum(r["rows"] for r in rows),
        "eval_ngrams": sum(r["ngrams"] for r in rows),
        **wide_table("denominators", rows, ["task", "rows", "empty_rows", "min_rows", "strings", "items", "ngrams",
                                            "short_items", "short_items_unmatched"],
                     ["task", "rows", "min_rows", "ngrams"]),
    }


def denominators_nonempty(rows: list[dict]) -> dict:
    return {"tasks": len(rows),
            **by_name("rows", {r["task"]: r["rows"] for r in rows}),
            **by_name("min_rows", {r["task"]: r["min_rows"] for r in rows}),
            **by_name("ngrams", {r["task"]: r["ngrams"] for r in rows})}


_SCAN_COLUMNS = ["source", "task", "docs_scanned", "docs_with_overlap", "overlap_ngrams", "registry_ngrams"]
_SCAN_DECIDING = ["source", "task", "overlap_ngrams"]  # zero_eval_overlap: overlap_ngrams


def contamination_report(storage, key: str, docs_key: str, scan, report: dict, previous: dict | None = None) -> dict:
    """contamination_report: overlap per source x task before the masks (counts and ids only); `previous`: the
    asset's last materialisation's metadata (its chart is shown again when drawn from the same counts)."""
    tally = scan.tally
    rows = scan.rows()
    drawn = [{k: r[k] for k in ("source", "task", "docs_with_overlap")} for r in tally.rows()]  # what the chart reads
    return {
        **parquet_output(storage, docs_key, scan.contaminated),
        "path": dg.MetadataValue.path(storage.uri(key)),
        "overlap_ngrams": tally.overlap_total,
        "contaminated_docs": report["contaminated_docs"],
        "scanned_docs": report["docs_scanned"],
        "registry_bytes": scan.registry_bytes,
        # what the pass did not rescan: sources whose stored hits held, chunks a killed run had finished
        "hits_reused_sources": ", ".join(scan.reused_sources) or "none",
        "hits_resumed_chunks": ", ".join(f"{s}: {n}" for s, n in scan.resumed_chunks.items() if n) or "none",
        **by_name("contaminated_docs", tally.contaminated),
        **wide_table("overlap", rows, _SCAN_COLUMNS, _SCAN_DECIDING),
        **chart_once("overlap_chart", drawn, lambda: charts.contamination_md(drawn), previous),
    }


def fuzzy_contamination(storage, key: str, docs_key: str, got, elapsed: float) -> dict:
    """no_fuzzy_eval_overlap: near copies of eval items (advisory; counts and ids only): per source x task what
    matched, per source what was scanned, per task what was indexed and matched, each figure once."""
    r, p = got.report, got.report["params"]
    den = r["denominators"]
    return {
        **parquet_output(storage, docs_key, got.docs),
        "path": dg.MetadataValue.path(storage.uri(key)),
        "scanned_docs": r["docs_scanned"],
        "matched_docs": r["docs_matched"],
        "fuzzy_only_docs": r["fuzzy_only_docs"],
        **by_name("fuzzy_only_docs", {s: v["fuzzy_only_docs"] for s, v in r["sources"].items()}),
        **by_name("matched_items", {t: d["items_matched"] for t, d in den.items()}),
        "indexed_items": sum(d["items_indexed"] for d in den.values()),
        "too_short_items": sum(d["items_too_short"] for d in den.values()),
        "jaccard_threshold": float(p["threshold"]),
        "shingle_words": int(p["shingle"]),
        "minhash_perms": int(p["num_perm"]),
        **wide_table("matches", fuzzy_rows(r), ["source", "task", "docs_matched", "fuzzy_only_docs"],
                     ["source", "task", "fuzzy_only_docs"]),
        **wide_table("sources", fuzzy_source_rows(r), ["source", "docs_scanned", "docs_matched", "fuzzy_only_docs"],
                     ["source", "docs_scanned", "fuzzy_only_docs"]),
        **wide_table("tasks", fuzzy_task_rows(r), ["task", "items_indexed", "items_matched", "items_too_short"],
                     ["task", "items_indexed", "items_matched"]),
        "elapsed_seconds": seconds(elapsed),
    }


def fuzzy_rows(report: dict) -> list[dict]:
    """One row per source x task of the fuzzy report: what matched there (the figures of that pair only)."""
    return [{"source": s, "task": t, "docs_matched": c["docs_matched"], "fuzzy_only_docs": c["fuzzy_only_docs"]}
            for s, v in report["sources"].items() for t, c in v["tasks"].items()]


def fuzzy_source_rows(report: dict) -> list[dict]:
    """One row per source: documents scanned and matched (any task)."""
    return [{"source": s, "docs_scanned": v["docs_scanned"], "docs_matched": v["docs_matched"],
             "fuzzy_only_docs": v["fuzzy_only_docs"]} for s, v in report["sources"].items()]


def fuzzy_task_rows(report: dict) -> list[dict]:
    """One row per eval task: items indexed, matched by some document, too short to index."""
    return [{"task": t, "items_indexed": d["items_indexed"], "items_matched": d["items_matched"],
             "items_too_short": d["items_too_short"]} for t, d in report["denominators"].items()]


def contamination_rate(tally, source: str, limit: float) -> dict:
    return {"scanned_docs": tally.docs_scanned[source], "contaminated_docs": tally.contaminated[source],
            "contaminated_share": share(tally.share(source)), "contaminated_share_limit": float(limit)}


def zero_eval_overlap(scan) -> dict:
    t = scan.tally
    return {
        "kept_overlap_ngrams": t.overlap_total,
        "kept_contaminated_docs": sum(t.contaminated.values()),
        "kept_docs": sum(t.docs_scanned.values()),
        "masked_docs": scan.masked_docs,
        **wide_table("overlap", scan.rows(), _SCAN_COLUMNS, _SCAN_DECIDING),
        **by_name("kept_docs", t.docs_scanned),
        **by_name("kept_overlap_ngrams", {s: int(v.sum()) for s, v in t.overlap_ngrams.items()}),
    }
