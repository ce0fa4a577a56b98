"""Check `fingerprint_reproduced` on `manifest`: the same input keys give the same fingerprint.

The comparison point is the revision this deployment last published (`publish/published_revision.json`
in the storage root, written by `published_revision` with the revision's input keys,
stages/publish/input_keys.py), read back from the publish target. In a `rebuild_mix` run the check
runs after `manifest` and before `published_revision`, so it always compares with the previous
publication. Outcomes:
  * nothing published yet: skipped, not passed: the check returns no result, so the UI shows it as
    *Skipped* (grey); the check's description (the *About* section of its page) says when that
    happens, and the run log says which case it was; nothing downstream is held back;
  * same input keys (source data, eval registry, code of the chain) and config, same fingerprint: passed;
  * same input keys and config, different fingerprint: failed (blocking, ERROR) with a table naming
    every file whose bytes changed and every count that moved, so nothing non-reproducible gets published;
  * changed input keys or config (new data in a source, say): passed with the revision diff as
    metadata (per source: documents added/removed/changed, tokens per split; files added/removed/
    changed); `published_revision` then publishes the rebuild as a new revision.
A publication record without input keys (written before they were recorded) is compared as before:
same config must give the same fingerprint, a changed config is skipped.
"""


import json
from typing import Optional

import dagster as dg

from mix_assets.console.metadata import markdown_table, table
from mix_assets.stages.common import gate, gated, restore_inputs
from mix_assets.core import layout
from mix_assets.stages.publish.drift import (DIFF_COLUMNS, compare_manifests, diff_text, documents_of_dedup_keys,
                                             revision_diff)
from mix_assets.stages.publish.input_keys import changed_keys, input_keys
from mix_assets.stages.publish.target import write_target
from mix_assets.resources import MixResource

FINGERPRINT_REPRODUCED = "fingerprint_reproduced"
MANIFEST_KEY = dg.AssetKey("manifest")
MANIFEST_FILE = "manifest.json"
# Dagster shows a check that reported nothing as "Skipped" with no text of its own, so the reason
# lives in the check's description, which its page shows under "About".
CHECK_DESCRIPTION = (
    "With the same input keys (each source's documents, the eval registry, the code of every stage) and "
    "config, the rebuilt manifest's fingerprint equals the last published one; on drift, names each "
    "changed file and count (blocking). Changed input keys (new data) pass with the revision diff as "
    "metadata: per source documents added/removed/changed and tokens per split, files changed.\n\n"
    "Skipped (no result, grey) when there is nothing to compare with: nothing published yet from this "
    "storage root (a first build), or, for a publication recorded without input keys, the config changed "
    "since (a new fingerprint is expected). Skipped is not a pass: nothing was compared. The run's log says "
    "which case it was (`fingerprint_reproduced skipped: ...`); the next rebuild is compared.")


def _published_manifest(mix, record: dict) -> dict | None:
    """The manifest of the recorded revision, read from the publish target (None if it is gone)."""
    raw = write_target(mix.spec).read(f"{record['revision']}/{MANIFEST_FILE}")
    return None if raw is None else json.loads(raw)


def _skipped(context: dg.AssetCheckExecutionContext, why: str) -> None:
    """Nothing to compare with: no result at all, which the UI shows as a skipped check, not a pass."""
    context.log.info(f"{FINGERPRINT_REPRODUCED} skipped: {why}")
    return None


def _new_revision(context, mix, record: dict, published: dict, rebuilt: dict, moved: list[str], cmp,
                  meta: dict) -> dg.AssetCheckResult:
    """Changed inputs: a new revision is expected; pass with the revision diff as metadata."""
    in_revision = layout.MIX_DEDUP_KEYS.removeprefix(layout.MIX_DIR + "/")
    before = documents_of_dedup_keys(write_target(mix.spec).read(f"{record['revision']}/{in_revision}"))
    after = documents_of_dedup_keys(mix.storage.read_bytes(layout.MIX_DEDUP_KEYS)
                                    if mix.storage.exists(layout.MIX_DEDUP_KEYS) else None)
    diff = revision_diff(published, rebuilt, before, after)
    meta["revision_diff"] = table(diff["sources"], columns=DIFF_COLUMNS)
    meta["revision_diff_md"] = dg.MetadataValue.md("```\n" + diff_text(diff) + "```")
    meta["revision_diff_json"] = dg.MetadataValue.json(diff)
    why = ", ".join(moved) if moved else "the config"
    context.log.info(f"{FINGERPRINT_REPRODUCED}: inputs changed ({why}): a new revision\n{diff_text(diff)}")
    f = diff["files"]
    return dg.AssetCheckResult(
        passed=True, metadata=meta,
        description=f"new revision: input keys changed ({why}); fingerprint {cmp.published_fingerprint[:16]} -> "
                    f"{cmp.rebuilt_fingerprint[:16]}; {len(f['added'])} file(s) added, {len(f['removed'])} "
                    f"removed, {len(f['changed'])} changed")


def build_reproducibility_checks(asset_keys: set[dg.AssetKey]) -> list:
    """The check, when the graph has a `manifest` asset (none otherwise)."""
    if MANIFEST_KEY not in asset_keys:
        return []

    @dg.asset_check(
        asset=MANIFEST_KEY,
        name=FINGERPRINT_REPRODUCED,
        blocking=True,
        description=CHECK_DESCRIPTION,
    )
    @gated
    def fingerprint_reproduced(context: dg.AssetCheckExecutionContext, mix: MixResource) -> Optional[dg.AssetCheckResult]:
        storage = mix.storage
        restore_inputs(storage, ["manifest"], context)  # this config's, when the checkout holds another's
        rebuilt = json.loads(storage.read_text(layout.MANIFEST))
        if not storage.exists(layout.PUBLISHED):
            return _skipped(context, "no previous revision: nothing published yet from this storage root")
        record = json.loads(storage.read_text(layout.PUBLISHED))
        # the same keys on every evaluation, so the Plots view draws unbroken lines
        meta: dict = {
            "rebuilt_fingerprint": dg.MetadataValue.text(rebuilt["fingerprint"]),
            "published_revision": dg.MetadataValue.text(str(record.get("revision"))),
            "published_location": dg.MetadataValue.text(str(record.get("location"))),
            "n_drifts": 0,
            "n_files_changed": 0,
        }
        published = _published_manifest(mix, record)
        if published is None:
            return gate(context, MANIFEST_KEY, dg.AssetCheckResult(
                passed=False, metadata=meta,
                description=f"revision {record.get('revision')} recorded as published, but its manifest.json "
                            f"is missing at {record.get('location')}"))
        cmp = compare_manifests(published, rebuilt)
        keys_then = record.get("input_keys")
        moved = changed_keys(keys_then, input_keys(storage)) if keys_then is not None else []
        meta["input_keys_changed"] = dg.MetadataValue.text(", ".join(moved))
        if keys_then is None and not cmp.comparable and not cmp.reproduced:
            return _skipped(context, cmp.summary())
        meta["published_fingerprint"] = dg.MetadataValue.text(cmp.published_fingerprint)
        meta["n_files_changed"] = sum(d.kind.startswith("file_") for d in cmp.drifts)
        if keys_then is not None and (moved or not cmp.comparable) and not cmp.reproduced:
            return _new_revision(context, mix, record, published, rebuilt, moved, cmp, meta)
        meta["n_drifts"] = len(cmp.drifts)
        if cmp.drifts:
            rows = [d.as_row() for d in cmp.drifts]
            meta["drift"] = table(rows[:200], columns=["kind", "what", "published", "rebuilt"])
            meta["drift_md"] = markdown_table(rows, columns=["kind", "what", "published", "rebuilt"])
            for d in cmp.drifts[:20]:
                context.log.error(f"fingerprint drift: {d.describe()}")
        summary = cmp.summary() + (" with the same input keys" if keys_then is not None and not cmp.passed else "")
        return gate(context, MANIFEST_KEY, dg.AssetCheckResult(passed=cmp.passed, metadata=meta, description=summary,
                                                               severity=dg.AssetCheckSeverity.ERROR))

    return [fingerprint_reproduced]
