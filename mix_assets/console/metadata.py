"""Every metadata value the UI shows, built here so asset modules stay thin and keys stay one vocabulary.

Key convention (`<noun>_<unit>`, snake_case, the unit last):
  * counts end in the thing counted: `docs`, `kept_docs`, `train_tokens`, `overlap_ngrams`, `shards`,
    `files`, `problems`; sizes in `_bytes` / `_mb`; durations in `_seconds`; rates in `_per_second`;
  * fractions in [0, 1] end in `_share` (`val_share`, `excluded_share`, `train_seam_share`), rounded to
    4 places (`share`); seconds to 2 (`seconds`);
  * a breakdown by a configured name (source, task) or a reason is `<key>/<name>`:
    `kept_tokens/web`, `rows/demo_qa`, `excluded_docs/near_dup`;
  * identifiers and text are bare nouns (`path`, `fingerprint`, `revision`); a list of problems is
    `problem_list` beside its count `problems`;
  * each table appears once, as a `MetadataValue.table` named after its rows, holding only the columns
    that decide (the row's name, then the deciding figure: at 1,600 px the asset page gives a table
    ~450 px, three columns of names like `python_reference` / `gopher_repetition`, and cuts the rest);
    a wider table's every column is beside it as Markdown, `<table>_md` (a list of rows when short
    enough for the UI to show inline; a table no gate reads, whose name alone takes three columns, is
    Markdown only), and a chart beside it is `<table>_chart`. Table cells are display text: counts with thousands separators,
    `_share` columns as percentages. Parquet-backed assets carry `dagster/row_count` and
    `dagster/column_schema`.
Numeric keys are the same on every run, so the Plots view draws continuous lines. Every
materialisation also carries `peak_rss_mb` (`peak_rss`; per step only under a per-step-process executor).
"""

from __future__ import annotations

import json
import resource
import sys
from collections.abc import Mapping, Sequence

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.console import charts
from mix_assets.stages.dedup import lsh
from mix_assets.stages.audit import contamination as ct
from mix_assets.stages.dedup.dedup import EXCLUSION_SCHEMA
from mix_assets.stages.split.split import SPLIT_SCHEMA

SHARE_PLACES = 4
SECONDS_PLACES = 2
_LENGTH_BINS = [0, 256, 1024, 4096, 16384, 65536, np.inf]
_LENGTH_LABELS = ["< 256", "256 - 1K", "1K - 4K", "4K - 16K", "16K - 64K", ">= 64K"]
S_CURVE_POINTS = (0.5, 0.7, 0.8, 0.9)


# -- generic values -------------------------------------------------------------------------------


def share(x: float) -> float:
    return round(float(x), SHARE_PLACES)


def seconds(x: float) -> float:
    return round(float(x), SECONDS_PLACES)


def _column_type(values: list[object]) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return "bool"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "int"
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "float"
    return "string"


percent = charts.percent  # a share as the UI shows it: 0.1234 -> "12.3%"


def number(v: object, column: str = "") -> object:
    """A table cell as display text: ints with thousands separators, a `_share` column's floats as
    percentages, other floats to 4 significant digits; strings and None as they are."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        if column.endswith("_share"):
            return percent(v)
        return f"{float(v):,.4g}" if abs(v) < 1e6 else f"{float(v):,.0f}"
    return str(v)


def _columns(rows: Sequence[Mapping[str, object]], columns: Sequence[str] | None, what: str) -> list[str]:
    if columns is None:
        columns = []
        for r in rows:
            columns.extend(k for k in r if k not in columns)
    if not columns:
        raise ValueError(f"{what}: no columns (empty rows and no column list)")
    return list(columns)


def table(rows: Sequence[Mapping[str, object]], columns: Sequence[str] | None = None,
          descriptions: Mapping[str, str] | None = None) -> dg.TableMetadataValue:
    """Rows of dicts as `MetadataValue.table`: the schema's types inferred from the values, the cells as
    display text (`number`: the UI prints a cell as it is, 1234567 without separators)."""
    columns = _columns(rows, columns, "table")
    types = {c: _column_type([r.get(c) for r in rows]) for c in columns}
    schema = dg.TableSchema(columns=[
        dg.TableColumn(c, types[c], description=(descriptions or {}).get(c)
                       or ("a percentage" if c.endswith("_share") and types[c] == "float" else None))
        for c in columns
    ])
    records = [dg.TableRecord({c: number(r.get(c), c) for c in columns}) for r in rows]
    return dg.MetadataValue.table(records=records, schema=schema)


MD_INLINE_CHARS = 1000  # the UI shows Markdown shorter than this inline (a table cut like any), longer in a dialog


def markdown_table(rows: Sequence[Mapping[str, object]], columns: Sequence[str] | None = None,
                   max_rows: int = 50) -> dg.MarkdownMetadataValue:
    """Rows as a markdown table, `_share` columns as percentages. A table short enough for the UI to show
    inline, in the ~450 px it gives a metadata value, is given as a list of rows instead (one line of
    `column value` pairs per row, which wraps): inline, a wide table is cut like a table entry."""
    columns = _columns(rows, columns, "markdown_table")
    pct = [c for c in columns if c.endswith("_share")]
    out = charts.markdown_table(rows, columns, max_rows, percent=pct)
    if len(out) < MD_INLINE_CHARS and len(columns) > 3:
        out = charts.markdown_records(rows, columns, max_rows, percent=pct)
    return dg.MetadataValue.md(out)


FULL_ROWS = 200  # rows of a `<table>_md` (the table itself holds every row)


def wide_table(key: str, rows: Sequence[Mapping[str, object]], columns: Sequence[str],
               deciding: Sequence[str]) -> dict:
    """`key`: the table cut to the columns that decide (`deciding`: the row's name first); `key_md`: every
    column as Markdown (the UI shows a wider table cut at 1,600 px)."""
    missing = [c for c in deciding if c not in columns]
    if missing:
        raise ValueError(f"wide_table {key}: deciding column(s) {missing} not among {list(columns)}")
    return {key: table(rows, columns=deciding), f"{key}_md": markdown_table(rows, columns, FULL_ROWS)}


def chart(markdown: str) -> dg.MarkdownMetadataValue:
    """A chart from `console/charts.py` (`*_md` functions) as markdown metadata."""
    return dg.MetadataValue.md(markdown)


_ARROW_TYPES = {"string": "string", "large_string": "string", "bool": "bool", "float": "float",
                "double": "float", "int64": "int", "int32": "int"}


def column_schema(schema: pa.Schema) -> dg.TableSchemaMetadataValue:
    """An Arrow schema as `dagster/column_schema` (the UI's column list of the asset)."""
    return dg.MetadataValue.table_schema(dg.TableSchema(columns=[
        dg.TableColumn(f.name, _ARROW_TYPES.get(str(f.type), str(f.type))) for f in schema]))


def parquet_output(storage, key: str, t: pa.Table) -> dict:
    """path, `dagster/row_count` and `dagster/column_schema` of a Parquet file an asset wrote."""
    return {"path": dg.MetadataValue.path(storage.uri(key)), "dagster/row_count": t.num_rows,
            "dagster/column_schema": column_schema(t.schema)}


def parquet_file_output(storage, key: str, schema: pa.Schema) -> dict:
    """`parquet_output` of a file written a row group at a time with `schema`: rows from its footer."""
    rows = pq.ParquetFile(storage.source(key)).metadata.num_rows
    return {"path": dg.MetadataValue.path(storage.uri(key)), "dagster/row_count": rows,
            "dagster/column_schema": column_schema(schema)}


def problems(found: Sequence[str], shown: int = 20) -> dict:
    """`problems` (count, plotted) and `problem_list` (the first `shown`, as a markdown list)."""
    lines = [f"- {p}" for p in found[:shown]]
    if len(found) > shown:
        lines.append(f"- ... and {len(found) - shown} more")
    return {"problems": len(found), "problem_list": dg.MetadataValue.md("\n".join(lines) or "none")}


def peak_rss() -> dict:
    """`peak_rss_mb`: the peak resident memory of the process that ran the step, so far (getrusage).

    It is the step's own peak only when the step has a process to itself (MIX_EXECUTOR=multiprocess
    or k8s); under the default in_process executor it is the run's peak up to this step, so it is
    the largest of every step run before it. Ray map tasks run in other processes and are not in it.
    """
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux, bytes on macOS
    return {"peak_rss_mb": round(kb / (1e6 if sys.platform == "darwin" else 1e3), 1)}


def by_name(key: str, values: Mapping[str, object]) -> dict:
    """`{key}/{name}` for every name (a source, a task, a reason)."""
    return {f"{key}/{name}": v for name, v in values.items()}


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


# -- raw/<source> -----------------------------------------------------------------------------------


def length_histogram(n_chars: np.ndarray) -> list[dict]:
    counts, _ = np.histogram(n_chars, bins=_LENGTH_BINS)
    return [{"chars": lab, "docs": int(c)} for lab, c in zip(_LENGTH_LABELS, counts)]


def raw_source(storage, key: str, raw) -> dict:
    """raw/<source>: what was read, dropped and kept, against the budget (`lib.sources.RawSource`)."""
    got, n_chars = raw.sample, raw.sample.n_chars  # the documents were streamed to `key`, not held
    md = {
        "path": dg.MetadataValue.path(storage.uri(key)), "dagster/row_count": raw.docs,
        "dagster/column_schema": column_schema(raw.schema),
        "read_rows": got.rows_read,
        "docs": raw.docs,
        **by_name("dropped_docs", got.dropped),
        "text_bytes": raw.text_bytes,
        "estimated_tokens": raw.est_tokens,
        "budget_tokens": raw.budget_tokens,
        "budget_fill_share": share(raw.est_tokens / raw.budget_tokens) if raw.budget_tokens else 0.0,
        "bytes_per_token": share(raw.bytes_per_token),
        "token_estimate_method": raw.token_estimate,
        "source_exhausted": got.exhausted,
        "fallback_decoded_docs": len(got.fallback_decoded),
        "drop_notes": dg.MetadataValue.json(got.drop_notes),
        "length_histogram": table(length_histogram(n_chars), columns=["chars", "docs"]),
    }
    md.update(raw_modifiers(got.modifiers))
    if raw.docs:
        md["length_histogram_chart"] = chart(charts.histogram_md(n_chars, f"{raw.name}: document length",
                                                                 "characters", log_x=True))
    return md


def raw_modifiers(mods: dict) -> dict:
    """What the text modifiers did to a source (stages/sources/modifiers.py; nothing when none is configured)."""
    out = {}
    if "pii" in mods:
        p = mods["pii"]
        out.update({"pii_rules_version": p["rules_version"], "pii_scrubbed_docs": p["scrubbed_docs"],
                    **by_name("pii_redactions", p["redactions"])})
    if "c4" in mods:
        out.update({"c4_modified_docs": mods["c4"]["modified_docs"], "c4_removed_chars": mods["c4"]["removed_chars"]})
    return out


def has_documents(raw) -> dict:
    return {"docs": raw.docs, "read_rows": raw.sample.rows_read, **by_name("dropped_docs", raw.sample.dropped)}


def budget_met(raw) -> dict:
    return {"estimated_tokens": raw.est_tokens, "budget_tokens": raw.budget_tokens,
            "minimum_tokens": raw.minimum_tokens, "token_estimate_method": raw.token_estimate}


# -- dedup_keys -------------------------------------------------------------------------------------

_CLUSTER_BINS = [(1, 1), (2, 2), (3, 5), (6, 20), (21, 10**12)]


def _cluster_sizes(t: pa.Table) -> list[dict]:
    sizes = np.asarray(t.column("cluster_size"))[np.asarray(t.column("keep"))]
    return [{"cluster_size": f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi < 10**12 else f">= {lo}"),
             "clusters": int(np.count_nonzero((sizes >= lo) & (sizes <= hi)))} for lo, hi in _CLUSTER_BINS]


def _s_curve(b: int, r: int, threshold: float) -> dict:
    p = {j: share(lsh.s_curve(b, r, j)) for j in S_CURVE_POINTS}
    return {
        **by_name("candidate_probability", {f"{j:.1f}": v for j, v in p.items()}),
        "s_curve": table([{"jaccard": j, "candidate_probability": v} for j, v in p.items()]),
        "s_curve_chart": chart(charts.s_curve_md(b, r, threshold) + f"\n\nP(pair shares a band) = 1 - (1 - J^{r})^{b}; "
                               f"candidates are then verified by exact shingle Jaccard >= {threshold}"),
    }


def dedup_keys(storage, key: str, t: pa.Table, st: dict, elapsed: float, sources: list[str]) -> dict:
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
        **parquet_output(storage, key, t),
        "lsh_bands": st["bands"],
        "lsh_rows": st["rows"],
        "minhash_permutations": st["num_perm"],
        "jaccard_threshold": st["threshold"],
        **_s_curve(st["bands"], st["rows"], st["threshold"]),
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
        "cluster_sizes": table(_cluster_sizes(t)),
        **wide_table("kills_per_source", per_source, ["source", "docs", "exact_dup_docs", "near_dup_docs",
                                                      "excluded_share"],
                     ["source", "exact_dup_docs", "near_dup_docs", "excluded_share"]),
        "signatures_reused_sources": ", ".join(reused) or "none",
        "signatures_signed_sources": ", ".join(s for s in sorted(sources) if s not in reused) or "none",
        "elapsed_seconds": seconds(elapsed),
        "docs_per_second": round(st["documents"] / max(elapsed, 1e-9), 1),
    }


# -- exclusion_masks ----------------------------------------------------------------------------------

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
    """exclusion_masks (`lib.dedup.Masks`): exclusions per reason and the composition before/after."""
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


# -- audit ------------------------------------------------------------------------------------------


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


def contamination_report(storage, key: str, docs_key: str, scan, report: dict) -> dict:
    """contamination_report: overlap per source x task before the masks (counts and ids only)."""
    tally = scan.tally
    rows = scan.rows()
    return {
        **parquet_output(storage, docs_key, scan.contaminated),
        "path": dg.MetadataValue.path(storage.uri(key)),
        "overlap_ngrams": tally.overlap_total,
        "contaminated_docs": report["contaminated_docs"],
        "scanned_docs": report["docs_scanned"],
        "registry_bytes": scan.registry_bytes,
        **by_name("contaminated_docs", tally.contaminated),
        **wide_table("overlap", rows, _SCAN_COLUMNS, _SCAN_DECIDING),
        "overlap_chart": chart(charts.contamination_md(tally.rows())),
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


# -- validation_split -------------------------------------------------------------------------------


def validation_split(storage, key: str, split, v) -> dict:
    """validation_split (`lib.split.SplitSummary` and `ValShare` of the written split): docs per side and
    per source."""
    per = split.per_source
    return {
        **parquet_file_output(storage, key, SPLIT_SCHEMA),
        "docs": v.docs,
        "val_docs": v.val_docs,
        "val_share": share(v.share),
        "val_byte_share": share(v.byte_share),
        "per_source": table([{"source": s, **c} for s, c in per.items()], columns=["source", "train_docs", "val_docs"]),
    }


def val_disjoint_from_train(d, scan) -> dict:
    return {
        "shared_doc_ids": d.shared_doc_ids,
        "shared_clusters": d.shared_clusters,
        "shared_exact_keys": d.shared_exact_keys,
        "val_docs": d.val_docs,
        "scanned_train_docs": scan.train_docs,
        "val_docs_with_train_near_dup": scan.val_docs_with_train_near_dup,
        "cross_split_near_dup_share": share(scan.rate),
        "max_cross_split_jaccard": share(scan.max_jaccard),
        "jaccard_threshold": scan.threshold,
        "compared_pairs": scan.pairs_compared,
        # candidates: (train, val) pairs sharing a band of the check's own LSH, each verified exactly
        "lsh_bands": scan.bands,
        "lsh_rows": scan.rows,
        "miss_probability_at_threshold": float(f"{scan.miss_probability:.3g}"),
    }


def val_share_in_tolerance(v) -> dict:
    return {
        "val_share": share(v.share),
        "target_val_share": v.target,
        "min_val_share": share(v.target * (1 - v.tolerance)),
        "max_val_share": share(v.target * (1 + v.tolerance)),
        "val_docs": v.val_docs,
        "docs": v.docs,
        "val_byte_share": share(v.byte_share),
    }


# -- tokenizer, token_shards, manifest -----------------------------------------------------------------


def tokenizer(storage, key: str, ident) -> dict:
    return {
        "path": dg.MetadataValue.path(storage.uri(key)),
        "kind": ident.kind,
        "repo_id": ident.repo_id or "",
        "revision": ident.revision or "",
        "vocab_size": ident.vocab_size,
        "special_tokens": dg.MetadataValue.json(ident.special_tokens),
        "files": dg.MetadataValue.json(ident.files),
    }


def token_shards(storage, key: str, res, elapsed: float) -> dict:
    """token_shards (`lib.shards` result): tokens, samples and shards per split, seams, throughput."""
    tr, va = res.splits["train"], res.splits["val"]
    mb = res.encoded_bytes / 1e6
    return {
        "path": dg.MetadataValue.path(storage.uri(key)),
        "dtype": res.dtype,
        "train_tokens": tr.tokens,
        "val_tokens": va.tokens,
        "train_samples": tr.samples,
        "val_samples": va.samples,
        "shards": len(tr.shards) + len(va.shards),
        "dropped_tail_tokens": tr.dropped_tail_tokens + va.dropped_tail_tokens,
        # packing.doc_index: bytes of the per-shard document indexes (0 without them)
        "doc_index_bytes": sum(sh.doc_index["bytes"] for sp in (tr, va) for sh in sp.shards if sh.doc_index),
        "train_seam_share": share(tr.seam_rate),
        "val_seam_share": share(va.seam_rate),
        "encoded_mb": round(mb, 3),
        "encode_mb_per_second": round(mb / elapsed, 3) if elapsed else 0.0,
        "elapsed_seconds": seconds(elapsed),
        **per_source(res.to_json()["sources"]),
    }


PER_SOURCE_COLUMNS = ["source", "train_tokens", "val_tokens", "budget_tokens", "epochs", "unique_documents"]


def per_source(sources: Mapping[str, Mapping]) -> dict:
    """token_shards' and manifest's tokens per source ({source: shard_stats' per-source record}) as a table."""
    rows = [{"source": s, **{c: v.get(c) for c in PER_SOURCE_COLUMNS[1:]}} for s, v in sources.items()]
    return wide_table("per_source", rows, PER_SOURCE_COLUMNS, ["source", "train_tokens", "budget_tokens"])


def rendered_samples(storage, key: str, r) -> dict:
    """token_shards' samples as the trainer reads them (`lib.samples.Rendered`), scrubbed like every audit artifact."""
    return {
        "rendered_samples": dg.MetadataValue.md(r.ui_markdown),
        "rendered_samples_path": dg.MetadataValue.path(storage.uri(key)),
        "shown_samples": r.samples,
        "scrubbed_words": r.scrubbed_words,
        "withheld_samples": r.withheld_samples,
        "draw_seed": str(r.seed),
    }


def manifest(storage, key: str, m: dict) -> dict:
    t = m["totals"]
    return {
        "path": dg.MetadataValue.path(storage.uri(key)),
        "fingerprint": m["fingerprint"],
        "train_tokens": t["train_tokens"],
        "val_tokens": t["val_tokens"],
        "train_samples": t["train_samples"],
        "val_samples": t["val_samples"],
        "shards": t["shards"],
        "files": len(m["files"]),
        "dropped_tail_tokens": t["dropped_tail_tokens"],
        **per_source(m["sources"]),
    }


def shards_audit(report: dict, elapsed: float) -> dict:
    """shards_audit_clean: overlap of the decoded shards per split x task, denominators beside them."""
    splits = report["splits"]
    tokens = sum(v["tokens_scanned"] for v in splits.values())
    rows = [{c: r[c] for c in ("split", "task", "samples_scanned", "overlap_ngrams", "samples_with_overlap",
                               "eval_rows", "eval_ngrams")} for r in report["rows"]]
    return {
        "fingerprint": report["fingerprint"],
        "overlap_ngrams": report["overlap_total"],
        "samples_with_overlap": report["samples_with_overlap"],
        **{f"{s}_scanned_samples": v["samples_scanned"] for s, v in splits.items()},
        **{f"{s}_scanned_tokens": v["tokens_scanned"] for s, v in splits.items()},
        "denominator_problems": len(report["denominator_problems"]),
        **wide_table("overlap", rows, ["split", "task", "samples_scanned", "overlap_ngrams", "samples_with_overlap",
                                       "eval_rows", "eval_ngrams"],
                     ["split", "task", "overlap_ngrams"]),
        "elapsed_seconds": seconds(elapsed),
        "tokens_per_second": round(tokens / elapsed) if elapsed else 0,
    }


# -- published_revision -------------------------------------------------------------------------------


def published_revision(result) -> dict:
    """published_revision (`lib.publish` result): where, what and how much was uploaded."""
    return {
        "revision": result.revision,
        "location": dg.MetadataValue.text(result.location),
        "fingerprint": result.fingerprint,
        "published_files": result.files,
        "published_bytes": result.bytes,
        "uploaded_files": result.uploaded_files,
        "uploaded_bytes": result.uploaded_bytes,
        "created": result.created,
    }


def published_readable(v) -> dict:
    return {
        "location": dg.MetadataValue.text(v.location),
        "verified_files": v.files_verified,
        "verified_bytes": v.bytes_verified,
        "compared_samples": v.samples_compared,
        "total_samples": v.samples_total,
        "elapsed_seconds": seconds(v.seconds),
        **problems(v.problems),
    }
