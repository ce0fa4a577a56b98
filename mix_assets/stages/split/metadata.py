"""The UI metadata of validation_split and its checks (keys: console/metadata.py's convention)."""

from __future__ import annotations

from mix_assets.console.metadata import parquet_file_output, share, table
from mix_assets.stages.split.split import SPLIT_SCHEMA


def validation_split(storage, key: str, split, v) -> dict:
    """validation_split (`split.SplitSummary` and `ValShare` of the written split): docs per side and
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
