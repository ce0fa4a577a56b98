"""manifest: manifest.json describing the mix directory, proven self-consistent before publishing."""

import json
import os
import tempfile
import time
from typing import BinaryIO

import dagster as dg

from mix_assets.console import metadata as console_md
from mix_assets.stages.common import (
    code_version,
    current_code_versions,
    gate,
    gated,
    raw_key,
    raw_name,
    recorded,
    reused,
    run_lock,
    stored_check,
    verified_inputs,
    with_lineage,
)
from mix_assets.config import MixSpec
from mix_assets.core import layout, lineage
from mix_assets.stages.sources import modifiers
from mix_assets.stages.audit import published
from mix_assets.format.checker import check_manifest
from mix_assets.format.manifest import ManifestError
from mix_assets.stages.manifest.builder import review_config_json, write_manifest
from mix_assets.stages.manifest import metadata as md
from mix_assets.stages.quality import assets as quality_assets
from mix_assets.stages.quality import scores as quality_scores
from mix_assets.core.storage import Storage
from mix_assets.reader.errors import ReaderError
from mix_assets.resources import EngineResource, MixResource

GROUP = "tokens"
MANIFEST_SELF_CONSISTENT = "manifest_self_consistent"
SHARDS_AUDIT_CLEAN = "shards_audit_clean"
# the lineage name of the audit record: published_revision refuses a manifest without a clean one
SHARDS_AUDIT_RECORD = f"manifest/{SHARDS_AUDIT_CLEAN}"
MANIFEST_KEY = dg.AssetKey("manifest")
MANIFEST_INPUTS = ["token_shards", "tokenizer", "dedup_keys", "exclusion_masks", "contamination_report"]


class _MixDir:
    """The root's `mix/` folder as the checker's file source, through `Storage` (local or S3 alike)."""

    def __init__(self, storage: Storage):
        self.storage = storage

    def open(self, rel: str) -> BinaryIO:
        return self.storage.open(f"{layout.MIX_DIR}/{rel}")

    def list(self) -> list[str]:  # every file but manifest.json, so an unlisted one is reported
        keys = self.storage.list(layout.MIX_DIR)
        return [k.removeprefix(layout.MIX_DIR + "/") for k in keys if k != layout.MANIFEST]


def build_manifest_assets(spec: MixSpec) -> list:
    scrubbing = modifiers.scrub_sources(spec)  # their raw stats give the scrub manifest
    # what it writes from the spec: the name, the seed and the published config (review/mix_config.json),
    # so a revision's manifest always belongs to the config that published it
    published_config = review_config_json(spec.model_dump(mode="json"))
    classified = [quality_assets.QUALITY_CLASSIFIER] if quality_scores.quality_sources(spec) else []

    @dg.asset(
        name="manifest",
        group_name=GROUP,
        kinds={"json"},
        owners=spec.owners,
        code_version=code_version(__name__, scrubbing, published_config, *(["quality"] if classified else [])),
        deps=[dg.AssetKey("token_shards"), dg.AssetKey("tokenizer"), dg.AssetKey("dedup_keys"),
              dg.AssetKey("exclusion_masks"), dg.AssetKey("contamination_report"),
              *map(raw_key, scrubbing), *classified],
    )
    def manifest(context: dg.AssetExecutionContext, mix: MixResource) -> dg.MaterializeResult:
        """manifest.json: token counts, shards, tokenizer identity, packing, review files, fingerprint."""
        s = mix.spec
        scrubbed = [raw_name(x) for x in modifiers.scrub_sources(s)]
        quality = ["quality_classifier"] if quality_scores.quality_sources(s) else []  # model + training set published
        with run_lock(context, mix.storage, "manifest"):  # no lease: it writes this run's checkout only
            inputs = verified_inputs(mix.storage, "manifest", MANIFEST_INPUTS + scrubbed + quality, context)
            if hit := reused(context, mix, "manifest", inputs):
                return hit
            m = write_manifest(mix.storage, name=s.name, seed=s.seed, spec_dump=s.model_dump(mode="json"),
                               scrub=modifiers.build_scrub_manifest(mix.storage, s) if scrubbed else None,
                               quality=bool(quality))
            lin = recorded(mix.storage, "manifest",
                           [layout.MANIFEST, *([layout.MIX_SCRUB_MANIFEST] if scrubbed else []),
                            *([layout.MIX_QUALITY_MODEL, layout.MIX_QUALITY_TRAINING_SET] if quality else [])],
                           inputs, context)
        return with_lineage(md.manifest(mix.storage, layout.MANIFEST, m), lin)

    @dg.asset_check(asset=manifest, name=MANIFEST_SELF_CONSISTENT, blocking=True)
    @gated
    def manifest_self_consistent(context: dg.AssetCheckExecutionContext, mix: MixResource) -> dg.AssetCheckResult:
        """Totals equal the sum of parts, shards match the file listing, every size and sha256 recomputed."""
        st = mix.storage
        verified_inputs(st, MANIFEST_SELF_CONSISTENT, ["manifest"], context)
        m = json.loads(st.read_text(layout.MANIFEST))
        problems = check_manifest(m, _MixDir(st), strict=False)
        return gate(context, MANIFEST_KEY, dg.AssetCheckResult(
            passed=not problems,
            metadata={"files": len(m.get("files", [])), "fingerprint": str(m.get("fingerprint")),
                      **console_md.problems(problems, shown=50)},
            description=f"{len(problems)} problem(s); first: {problems[0]}" if problems else None,
        ))

    @dg.asset_check(asset=manifest, name=SHARDS_AUDIT_CLEAN, blocking=True,
                    resource_defs={"engine": EngineResource.from_spec(spec)})  # every engine: the same report
    @gated
    def shards_audit_clean(context: dg.AssetCheckExecutionContext, mix: MixResource,
                           engine: EngineResource) -> dg.AssetCheckResult:
        """The bytes to publish: train and val shards decoded with the mix's tokenizer, 0 eval 13-grams.

        Each shard is a map task on `engine` (in process or Ray)."""
        st, s = mix.storage, mix.spec
        inputs = verified_inputs(st, SHARDS_AUDIT_CLEAN, ["manifest"], context)

        def audit():
            t0 = time.perf_counter()
            ref = eval_reference(st, s, current_code_versions(context))
            report, known = audited_mix(st, s, ref, engine.engine, context)
            secs = time.perf_counter() - t0
            st.write_text(layout.SHARDS_AUDIT, published.dumps(report))
            if "unreadable" in report:  # about the files present, not the manifest's bytes: not stored
                return dg.AssetCheckResult(passed=False, description=report["unreadable"],
                                           metadata={"fingerprint": report["fingerprint"]}), False
            result = shards_audit_result(report, secs)
            return result._replace(metadata={**result.metadata, **known, EVAL_REFERENCE: (
                STORED_REFERENCE if ref is not None else REBUILT_REFERENCE)})

        # a pure function of the bytes the manifest names (its artifact key) and the audit config: a reused
        # manifest re-emits the stored audit (and its audit/shards_audit.json) instead of decoding every shard
        def mix_as_listed() -> bool:  # another run may have rewritten mix/ since the manifest's record
            try:
                listed = {f"{layout.MIX_DIR}/{f['path']}": f["sha256"]
                          for f in json.loads(st.read_text(layout.MANIFEST)).get("files", [])}
            except (OSError, ValueError, KeyError, TypeError):
                return False
            have = lineage.current_hashes(st, list(listed))
            return all(have[k] == sha for k, sha in listed.items())

        result = stored_check(context, st, "manifest", SHARDS_AUDIT_CLEAN, shards_audit_version(s, st.uri(layout.MIX_DIR)),
                              audit, files=(layout.SHARDS_AUDIT,), present=mix_as_listed)
        recorded(st, SHARDS_AUDIT_RECORD, [layout.SHARDS_AUDIT], inputs, context)
        return gate(context, MANIFEST_KEY, result)

    return [manifest, manifest_self_consistent, shards_audit_clean]


EVAL_REFERENCE = "eval_reference"  # shards_audit_clean's metadata: where its eval registry came from
KNOWN_CLEAN_PIECES = "known_clean_pieces"  # shards_audit_clean's metadata: pieces not hashed again
STORED_REFERENCE = "eval_registry's files (built from the current eval files by the current code)"
REBUILT_REFERENCE = "rebuilt from the eval task files"


def eval_reference(st: Storage, spec: MixSpec, code_versions: dict[str, str]) -> "published.EvalReference | None":
    """The eval registry eval_registry wrote, for the audit to scan with instead of parsing and hashing every
    eval item again (`published.stored_reference`), when lineage proves it is the one this manifest's
    contamination_report used and was computed by the current code; None: the audit builds its own."""
    try:
        lineage.verify_inputs(st, SHARDS_AUDIT_CLEAN, ["manifest", "eval_registry"], hash_files=False,
                              code_versions=code_versions)
    except lineage.StaleInputError:
        return None
    return published.stored_reference(st, spec)


def audited_mix(st: Storage, spec: MixSpec, ref: "published.EvalReference | None", eng, context) -> tuple[dict, dict]:
    """(shards_audit_clean's report of mix/, its known-clean metadata). The clean documents of an earlier audit
    under the same registry, tokenizer and scan code are decoded but their windows not hashed again
    (stages/audit/published.KnownClean), and this audit's are filed for the next one."""
    ctx = published.known_clean_context(json.loads(st.read_text(layout.MANIFEST)), ref) if ref else None
    clean = published.load_known_clean(st, ctx) if ctx else None
    try:
        with tempfile.TemporaryDirectory(prefix="shards-audit-", dir=_cache_dir(st)) as cache:
            report = published.audit_published(st.uri(layout.MIX_DIR), spec, cache, eng=eng, log=context.log,
                                               label=SHARDS_AUDIT_CLEAN, reference=ref, clean=clean,
                                               s3_endpoint_url=st.s3_endpoint_url)
    except (ManifestError, ReaderError, FileNotFoundError) as e:  # mix/ is not what the manifest lists
        return unreadable_mix_report(json.loads(st.read_text(layout.MANIFEST)), e), {}
    if clean is None:
        return report, {}
    published.file_known_clean(st, ctx, report["fingerprint"], clean.found, layout.SHARDS_AUDIT_KNOWN_CLEAN,
                               context.run.run_id)
    context.log.info(f"{SHARDS_AUDIT_CLEAN}: {clean.pieces:,} of {clean.all_pieces:,} pieces are of documents an "
                     "earlier audit found clean (same ids, registry, tokenizer and scan code): decoded, their "
                     "windows not hashed again")
    return report, {KNOWN_CLEAN_PIECES: clean.pieces}


def unreadable_mix_report(manifest: dict, err: Exception) -> dict:
    """The audit record of a mix/ the reader refuses (files missing or not what the manifest lists): a failed
    audit of this fingerprint, so published_revision refuses it, with a description a reviewer can act on."""
    problems = getattr(err, "problems", None) or [str(err)]
    first = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
    return {"fingerprint": manifest.get("fingerprint"), "passed": False, "overlap_total": None,
            "unreadable": f"mix/ does not hold the files manifest.json lists, so its shards cannot be audited: "
                          f"{first}. Was mix/ rewritten after this manifest (another run on the same storage "
                          "root)? Re-materialise token_shards and manifest."}


def shards_audit_version(spec: MixSpec, location: str) -> str:
    """shards_audit_clean's code_version: this module's code (with the audit and reader code it imports), the
    audit section and the audited location (named in the report)."""
    return code_version(__name__, spec.audit.model_dump_json(), location)


def _cache_dir(storage: Storage) -> str | None:
    if storage.cache_dir:
        os.makedirs(storage.cache_dir, exist_ok=True)
    return storage.cache_dir


def shards_audit_result(report: dict, seconds: float) -> dg.AssetCheckResult:
    """The check result of a published-audit report: counts per split x task, denominators beside them."""
    tokens = sum(v["tokens_scanned"] for v in report["splits"].values())
    problems = report["denominator_problems"]
    desc = (f"0 eval {report['ngram']}-grams in {tokens:,} decoded tokens" if report["passed"] else
            f"{report['overlap_total']:,} overlapping {report['ngram']}-grams in {report['samples_with_overlap']:,} "
            "published samples" + (f"; {'; '.join(problems)}" if problems else "")
            + ". Re-materialise from the stale or failing stage.")
    return dg.AssetCheckResult(passed=bool(report["passed"]), description=desc,
                               metadata=md.shards_audit(report, seconds))
