"""The UI metadata of the manifest and the shards audit (keys: console/metadata.py's convention)."""

from __future__ import annotations

import dagster as dg

from mix_assets.console.metadata import seconds, wide_table
from mix_assets.stages.tokens.metadata import per_source


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
