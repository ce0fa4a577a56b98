"""The UI metadata of tokenizer, token_shards and the rendered samples (keys: console/metadata.py's convention)."""

from __future__ import annotations

from collections.abc import Mapping

import dagster as dg

from mix_assets.console.metadata import seconds, share, wide_table


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
    """token_shards (`shards.ShardsResult`): tokens, samples and shards per split, seams, throughput."""
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
        "encoded_mb": round(mb, 3),  # text actually tokenised (documents from the token cache not counted)
        "encode_mb_per_second": round(mb / elapsed, 3) if elapsed else 0.0,
        "elapsed_seconds": seconds(elapsed),
        "encoder_backend": res.backend,  # stages/tokens/backends.py: tiktoken | hf (same ids either way)
        "encoder_fallback_reason": res.backend_reason,
        **token_cache(res),
        **per_source(res.to_json()["sources"]),
    }


def token_cache(res) -> dict:
    """What the token-id cache (stages/tokens/idcache.py) saved: documents read from it and encoded, per source."""
    hit, miss = (sum(v[i] for v in res.cache_docs.values()) for i in (0, 1))
    return {
        "encoded_documents": miss,
        "cached_documents": hit,
        "token_cache": dg.MetadataValue.json({
            "key": res.cache_key, "tokenizer_sha256": res.tokenizer_sha256,
            "sources": {s: {"cached": h, "encoded": m} for s, (h, m) in sorted(res.cache_docs.items())}}),
    }


def token_ids_match_reference(rep) -> dict:
    """token_ids_match_reference (`exactness.ExactnessReport`): the sample per source and what differed."""
    return {
        "sampled_documents": sum(s.sampled for s in rep.sources.values()),
        "compared_tokens": sum(s.tokens for s in rep.sources.values()),
        "mismatched_documents": rep.mismatches,
        "first_mismatches": ", ".join(rep.first_mismatches()),
        "per_source": dg.MetadataValue.json({k: v.to_json() for k, v in sorted(rep.sources.items())}),
    }


def encoder_backend(backend: str, reason: str) -> dict:
    """Which encoder built the checked shards; HF is the reference itself (the check then tests the packing)."""
    note = ("the reference itself: the check compares HF with HF-built shards" if backend == "hf" else
            "the fast backend, compared with the HF reference")
    return {"encoder_backend": backend, "encoder_note": note + (f" ({reason})" if reason else "")}


PER_SOURCE_COLUMNS = ["source", "train_tokens", "val_tokens", "budget_tokens", "epochs", "unique_documents"]


def per_source(sources: Mapping[str, Mapping]) -> dict:
    """token_shards' and manifest's tokens per source ({source: shard_stats' per-source record}) as a table."""
    rows = [{"source": s, **{c: v.get(c) for c in PER_SOURCE_COLUMNS[1:]}} for s, v in sources.items()]
    return {**wide_table("per_source", rows, PER_SOURCE_COLUMNS, ["source", "train_tokens", "budget_tokens"]),
            **per_source_tier(sources)}


PER_TIER_COLUMNS = ["source", "tier", "epochs", "documents", "unique_tokens", "train_tokens"]


def per_source_tier(sources: Mapping[str, Mapping]) -> dict:
    """The sources filled by quality tier (stages/quality/tiers.py): per source x tier the effective epochs
    (source x tier), its unique documents and tokens and the train tokens they became; {} without tiers."""
    rows = [{"source": s, "tier": t, **{c: r.get(c) for c in PER_TIER_COLUMNS[2:]}}
            for s, v in sources.items() for t, r in (v.get("tiers") or {}).items()]
    return wide_table("per_source_tier", rows, PER_TIER_COLUMNS, PER_TIER_COLUMNS) if rows else {}


def rendered_samples(storage, key: str, r) -> dict:
    """token_shards' samples as the trainer reads them (`samples.Rendered`), scrubbed like every audit artifact."""
    return {
        "rendered_samples": dg.MetadataValue.md(r.ui_markdown),
        "rendered_samples_path": dg.MetadataValue.path(storage.uri(key)),
        "shown_samples": r.samples,
        "scrubbed_words": r.scrubbed_words,
        "withheld_samples": r.withheld_samples,
        "draw_seed": str(r.seed),
    }
