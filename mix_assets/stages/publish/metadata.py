"""The UI metadata of published_revision and published_readable (keys: console/metadata.py's convention)."""

from __future__ import annotations

import dagster as dg

from mix_assets.console.metadata import problems, seconds


def published_revision(result) -> dict:
    """published_revision (`publish.PublishResult`): where, what and how much was uploaded."""
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
