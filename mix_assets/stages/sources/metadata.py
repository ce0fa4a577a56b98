"""The UI metadata of raw/<source> and its checks (keys: console/metadata.py's convention)."""

from __future__ import annotations

import dagster as dg
import numpy as np

from mix_assets.console import charts
from mix_assets.console.metadata import by_name, chart, column_schema, share, table

_LENGTH_BINS = [0, 256, 1024, 4096, 16384, 65536, np.inf]
_LENGTH_LABELS = ["< 256", "256 - 1K", "1K - 4K", "4K - 16K", "16K - 64K", ">= 64K"]


def length_histogram(n_chars: np.ndarray) -> list[dict]:
    counts, _ = np.histogram(n_chars, bins=_LENGTH_BINS)
    return [{"chars": lab, "docs": int(c)} for lab, c in zip(_LENGTH_LABELS, counts)]


def raw_source(storage, key: str, raw) -> dict:
    """raw/<source>: what was read, dropped and kept, against the budget (`sources.RawSource`)."""
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
