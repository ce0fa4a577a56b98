"""published_revision: the mix at its publish target as an immutable revision, verified as a stranger reads it.

Guards against publishing past a failed gate:
  * in a run: every upstream gate is a blocking check, so a failure skips this step;
  * in automation: `all_deps_blocking_checks_passed()` is part of the automation condition;
  * always: the manifest checker runs on the local mix and `publish()` re-hashes every local file
    against the manifest; either refuses on any mismatch;
  * always: the config the revision carries (review/mix_config.json) must give every artifact of its chain
    the code_version that artifact recorded (input_keys.config_problems): a revision is never published
    under a config that did not build it.
A re-publish of an existing revision re-hashes its objects and repairs what is missing or damaged.

Every byte published is hashed as it is written and refused unless it is what the manifest lists, and
`latest` moves only when the gate `published_readable_from_empty_cache` has read the revision back and
found it whole. Both steps hold the storage root's run lease (`common.run_lock`, `common.LEASED_STEPS`), so
one run at a time writes the publish target and moves `latest`; `mix/` is the run's own checkout
(core/checkout.py), which no other live run writes.
"""


import json
from collections.abc import Callable, Mapping
from typing import Optional

import dagster as dg

from mix_assets.stages.common import code_version, gate, gated, recorded, run_lock, verified_inputs, with_lineage
from mix_assets.stages.manifest.assets import SHARDS_AUDIT_CLEAN, SHARDS_AUDIT_RECORD
from mix_assets.config import MixConfigError, MixSpec, parse_spec
from mix_assets.core import layout
from mix_assets.stages.publish import publish as pub
from mix_assets.stages.publish.input_keys import config_problems, input_keys
from mix_assets.stages.publish.target import PUBLISHED_REVISION, read_only_target, write_target
from mix_assets.stages.publish import metadata as md
from mix_assets.format.checker import check_manifest
from mix_assets.core import transport
from mix_assets.core.transport import Location
from mix_assets.reader import open_mix
from mix_assets.resources import MixResource

PUBLISHED_READABLE = "published_readable_from_empty_cache"
GROUP = "publish"
PUBLISHED_REVISION_KEY = dg.AssetKey(PUBLISHED_REVISION)


def _mix_dir(storage) -> Location:
    """The storage root's mix folder, read in place (an S3 root to an S3 target on its endpoint: copied there)."""
    return storage.sub(layout.MIX_DIR)


def _target_kind(url: str) -> str:
    return {transport.S3: "s3", transport.HUB: "huggingface"}.get(transport.scheme(url), "file")


def build_publish_assets(spec: MixSpec, derive: Optional[Callable[[MixSpec], Mapping[str, str]]] = None) -> list:
    """`published_revision` and its blocking check `published_readable_from_empty_cache`. `derive`: a spec's
    chained code versions (definitions.code_versions; None: the published config is not re-derived)."""

    @dg.asset(
        name="published_revision",
        group_name=GROUP,
        deps=[dg.AssetKey("manifest")],
        kinds={"json", _target_kind(spec.publish.url)},
        owners=list(spec.owners),
        code_version=code_version(__name__, spec.publish.model_dump_json()),
        automation_condition=dg.AutomationCondition.eager()
        & dg.AutomationCondition.all_deps_blocking_checks_passed(),
    )
    def published_revision(context: dg.AssetExecutionContext, mix: MixResource) -> dg.MaterializeResult:
        """The mix as an immutable revision at the publish target (local dir, s3:// or the hub)."""
        with run_lock(context, mix.storage, "published_revision"):  # one run writes the publish target at a time
            inputs = verified_inputs(mix.storage, "published_revision", ["manifest", SHARDS_AUDIT_RECORD], context)
            manifest = pub.load_manifest(_mix_dir(mix.storage))
            _require_clean_audit(mix.storage, manifest)
            _check_manifest_contract(manifest, _mix_dir(mix.storage))
            keys = input_keys(mix.storage)
            derived = _require_config_reproduces_keys(mix.storage, keys, derive)
            # `latest` stays where it is: the gate moves it once a stranger's read of the revision passes
            result = pub.publish(_mix_dir(mix.storage), write_target(mix.spec), log=context.log.info,
                                 point_latest=False)
            # the input keys go with the record in storage, not into the revision (its bytes stay as they were)
            record = {**result.to_json(), "input_keys": keys}
            mix.storage.write_text(layout.PUBLISHED, json.dumps(record, indent=2, sort_keys=True))
            lin = recorded(mix.storage, "published_revision", [layout.PUBLISHED], {"manifest": inputs["manifest"]},
                           context)
        return with_lineage({**md.published_revision(result), **derived}, lin)

    @dg.asset_check(
        asset=published_revision,
        name=PUBLISHED_READABLE,
        blocking=True,
        description="An empty cache with read-only access downloads the revision, every sha256 and the "
                    "fingerprint match the manifest, and the reader's samples equal the local shards; "
                    "only then does the target's `latest` name it.",
    )
    @gated
    def published_readable_from_empty_cache(context: dg.AssetCheckExecutionContext,
                                            mix: MixResource) -> dg.AssetCheckResult:
        """A stranger's read of the revision: every file re-hashed, the reader's samples equal the local ones;
        then `latest` names it."""
        with run_lock(context, mix.storage, PUBLISHED_READABLE):  # moves `latest`
            verified_inputs(mix.storage, PUBLISHED_READABLE, ["published_revision"], context)
            record = json.loads(mix.storage.read_text(layout.PUBLISHED))
            v = pub.verify(read_only_target(mix.spec), record["revision"], _mix_dir(mix.storage),
                           open_reader=open_mix)
            latest = {}
            if v.passed:
                write_target(mix.spec).point_latest(record["revision"], record["fingerprint"])
                latest = {"latest": dg.MetadataValue.text(record["revision"])}
            else:
                context.log.warning(f"{record['location']} did not verify: `latest` left where it was")
        return gate(context, PUBLISHED_REVISION_KEY, dg.AssetCheckResult(
            passed=v.passed, metadata={**md.published_readable(v), **latest},
            description=v.summary() if v.passed else f"{v.summary()}; `latest` not moved to it",
        ))

    return [published_revision, published_readable_from_empty_cache]


def _require_clean_audit(storage, manifest: dict) -> None:
    """Publish only bytes whose decoded audit passed: whatever selection ran, the check's record must say so.

    A blocking check stops the rest of its own run; this also covers a later run that selects
    published_revision alone after the check failed (or never ran) on this manifest.
    """
    report = json.loads(storage.read_text(layout.SHARDS_AUDIT))
    if report.get("fingerprint") != manifest["fingerprint"] or report.get("passed") is not True:
        raise pub.PublishError(
            f"the shards of manifest {manifest['fingerprint'][:16]} have no passing {SHARDS_AUDIT_CLEAN} "
            f"(audited fingerprint {str(report.get('fingerprint'))[:16]}, overlap_total "
            f"{report.get('overlap_total')}, passed {report.get('passed')}); materialise manifest with its checks"
        )


def _require_config_reproduces_keys(storage, keys: Optional[dict], derive) -> dict:
    """Refuse a revision whose own config would not give its artifacts' recorded code versions; the metadata
    line saying it does."""
    if derive is None or not keys:
        return {}
    try:
        spec = parse_spec(json.loads(storage.read_text(layout.MIX_CONFIG)), layout.MIX_CONFIG)
    except (MixConfigError, ValueError) as e:
        raise pub.PublishError(f"{layout.MIX_CONFIG} does not parse as a mix config: {e}") from e
    problems = config_problems(keys["code"], derive(spec), layout.MIX_CONFIG)
    if problems:
        raise pub.PublishError(
            f"{layout.MIX_CONFIG} would not rebuild the artifacts it is published with (their code versions "
            "hash their code, the config values they read and their parents'); re-materialise them under this "
            "config:\n  " + "\n  ".join(problems))
    return {"config_reproduces_keys": dg.MetadataValue.text(
        f"{len(keys['code'])} of {len(keys['code'])} artifacts: the published config gives each the code_version "
        "it recorded")}


def _check_manifest_contract(manifest: dict, mix_dir: Location) -> None:
    """Refuse to publish a manifest the shared checker rejects (in addition to the per-file re-hash)."""
    problems = check_manifest(manifest, mix_dir.open, strict=False)
    if problems:
        raise pub.PublishError("manifest.json fails the manifest checker:\n  " + "\n  ".join(problems))
