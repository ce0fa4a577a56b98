"""Check `fingerprint_reproduced` on `manifest`: a rebuild of the same config reproduces what was published.

The comparison point is the revision this deployment last published (`publish/published_revision.json`
in the storage root, written by `published_revision`), read back from the publish target. In a
`rebuild_mix` run the check runs after `manifest` and before `published_revision`, so it always
compares with the previous publication. Outcomes:
  * nothing published yet, or the config changed since (a new fingerprint is expected): skipped,
    not passed: the check returns no result, so the UI shows it as *Skipped* (grey); the check's
    description (the *About* section of its page) says when that happens, and the run log says which
    case it was; nothing downstream is held back;
  * same config, same fingerprint: passed;
  * same config, different fingerprint: failed (blocking, ERROR) with a table naming every file
    whose bytes changed and every count that moved, so nothing non-reproducible gets published.
"""


import json
from typing import Optional

import dagster as dg

from mix_assets.console.metadata import markdown_table, table
from mix_assets.stages.common import gate, gated
from mix_assets.core import layout
from mix_assets.stages.publish.drift import compare_manifests
from mix_assets.stages.publish.target import write_target
from mix_assets.resources import MixResource

FINGERPRINT_REPRODUCED = "fingerprint_reproduced"
MANIFEST_KEY = dg.AssetKey("manifest")
MANIFEST_FILE = "manifest.json"
# Dagster shows a check that reported nothing as "Skipped" with no text of its own, so the reason
# lives in the check's description, which its page shows under "About".
CHECK_DESCRIPTION = (
    "With an unchanged config, the rebuilt manifest's fingerprint equals the last published one; on drift, "
    "names each changed file and count.\n\n"
    "Skipped (no result, grey) when there is nothing to compare with: nothing published yet from this "
    "storage root (a first build), or the config changed since the last publication (a new fingerprint "
    "is expected). Skipped is not a pass: nothing was compared. The run's log says which case it was "
    "(`fingerprint_reproduced skipped: ...`); the next rebuild of an unchanged config is compared.")


def _published_manifest(mix, record: dict) -> dict | None:
    """The manifest of the recorded revision, read from the publish target (None if it is gone)."""
    raw = write_target(mix.spec).read(f"{record['revision']}/{MANIFEST_FILE}")
    return None if raw is None else json.loads(raw)


def _skipped(context: dg.AssetCheckExecutionContext, why: str) -> None:
    """Nothing to compare with: no result at all, which the UI shows as a skipped check, not a pass."""
    context.log.info(f"{FINGERPRINT_REPRODUCED} skipped: {why}")
    return None


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
        if not cmp.comparable and not cmp.reproduced:
            return _skipped(context, cmp.summary())
        meta["published_fingerprint"] = dg.MetadataValue.text(cmp.published_fingerprint)
        meta["n_drifts"] = len(cmp.drifts)
        meta["n_files_changed"] = sum(d.kind.startswith("file_") for d in cmp.drifts)
        if cmp.drifts:
            rows = [d.as_row() for d in cmp.drifts]
            meta["drift"] = table(rows[:200], columns=["kind", "what", "published", "rebuilt"])
            meta["drift_md"] = markdown_table(rows, columns=["kind", "what", "published", "rebuilt"])
            for d in cmp.drifts[:20]:
                context.log.error(f"fingerprint drift: {d.describe()}")
        return gate(context, MANIFEST_KEY, dg.AssetCheckResult(passed=cmp.passed, metadata=meta, description=cmp.summary(),
                                                               severity=dg.AssetCheckSeverity.ERROR))

    return [fingerprint_reproduced]
