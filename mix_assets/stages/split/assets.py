"""validation_split: kept documents -> train/val by near-dup cluster, reserved before sharding."""

import dagster as dg

from mix_assets.stages.common import code_version, gate, gated, raw_key, raw_name, recorded, reused, stored_check, verified_inputs, with_lineage
from mix_assets.config import MixSpec
from mix_assets.stages.dedup import dedup as dedup_lib
from mix_assets.core import layout, lineage, tables
from mix_assets.stages.split import metadata as md
from mix_assets.stages.split.ranges import build_validation_split
from mix_assets.stages.split.split import (
    cross_split_near_dups,
    measure_disjointness,
    measure_val_share,
)
from mix_assets.resources import EngineResource, MixResource

GROUP = "split"
VAL_DISJOINT_FROM_TRAIN = "val_disjoint_from_train"
VAL_SHARE_IN_TOLERANCE = "val_share_in_tolerance"
VALIDATION_SPLIT_KEY = dg.AssetKey("validation_split")


def build_split_assets(spec: MixSpec) -> list:
    sources = [s.name for s in spec.sources]
    deps = [dg.AssetKey("exclusion_masks"), dg.AssetKey("dedup_keys"), *(raw_key(s) for s in sources)]

    @dg.asset(
        name="validation_split",
        group_name=GROUP,
        kinds={"parquet"},
        owners=spec.owners,
        code_version=code_version(__name__, spec.seed, spec.split),
        deps=deps,
        # neither the engine nor dedup.partitions is in it: every engine and partition count writes the same bytes
        resource_defs={"engine": EngineResource.from_spec(spec)},
    )
    def validation_split(context: dg.AssetExecutionContext, mix: MixResource,
                         engine: EngineResource) -> dg.MaterializeResult:
        """Kept documents assigned to train or val by hashing their near-dup cluster with the seed."""
        s = mix.spec
        inputs = verified_inputs(mix.storage, "validation_split",
                                 ["exclusion_masks", "dedup_keys", *(raw_name(x.name) for x in s.sources)], context)
        if hit := reused(context, mix, "validation_split", inputs):
            return hit
        split = build_validation_split(mix.storage, [x.name for x in s.sources], s.seed, s.split.val_fraction,
                                       engine.engine, s.dedup.partitions)
        lin = recorded(mix.storage, "validation_split", [layout.VALIDATION_SPLIT], inputs, context)
        share = split.share(s.split.val_fraction, s.split.tolerance)
        return with_lineage(md.validation_split(mix.storage, layout.VALIDATION_SPLIT, split, share), lin)

    @dg.asset_check(asset=validation_split, name=VAL_DISJOINT_FROM_TRAIN, blocking=True,
                    resource_defs={"engine": EngineResource.from_spec(spec)})  # every engine: the same result
    @gated
    def val_disjoint_from_train(context: dg.AssetCheckExecutionContext, mix: MixResource,
                                engine: EngineResource) -> dg.AssetCheckResult:
        """No doc id, cluster or exact text on both sides; cross-split near-dup rate (shingle Jaccard) 0.

        On a Ray engine the near-dup scan's LSH bands run as map tasks; on local threads one at a time here."""
        s, st = mix.spec, mix.storage
        names = [x.name for x in s.sources]
        inputs = verified_inputs(st, VAL_DISJOINT_FROM_TRAIN,
                                 ["validation_split", "dedup_keys", *(raw_name(x) for x in names)], context)

        def scan_split() -> dg.AssetCheckResult:
            split = st.source(layout.VALIDATION_SPLIT)  # read a batch at a time
            d = measure_disjointness(split)
            raw, p = tables.raw_files(st, names), dedup_lib.dedup_params(s)
            # dedup_keys' signature files when its lineage lists them (so verified_inputs hashed them)
            recorded_keys = set(lineage.read_record(st, "dedup_keys")["outputs"])
            versions = {n: inputs[raw_name(n)] for n in names}
            # as FileAt (where any worker reads them): an open S3 file does not travel to Ray tasks
            sigs = {n: tables.file_at(st, dedup_lib.signatures_key(n))
                    for n in dedup_lib.stored_signatures(st, raw, versions, p)
                    if dedup_lib.signatures_key(n) in recorded_keys}
            scan = cross_split_near_dups(split, raw, s.dedup.threshold, p.shingle, signatures=sigs,
                                         num_perm=p.num_perm, seed=p.seed, eng=engine.engine)
            ok = d.ok and scan.val_docs_with_train_near_dup == 0
            return dg.AssetCheckResult(
                passed=ok, metadata=md.val_disjoint_from_train(d, scan),
                description=None if ok else (f"{d.shared_doc_ids:,} doc ids, {d.shared_clusters:,} clusters, "
                                             f"{d.shared_exact_keys:,} exact keys on both sides; "
                                             f"{scan.val_docs_with_train_near_dup:,} val docs with a train near-dup"))

        # a pure function of validation_split's key (which names dedup_keys' and every raw source's keys it was
        # split from) and the dedup section: a reused split re-emits the stored result
        return gate(context, VALIDATION_SPLIT_KEY, stored_check(
            context, st, "validation_split", VAL_DISJOINT_FROM_TRAIN,
            code_version(__name__, s.dedup.model_dump_json(), names), scan_split))

    @dg.asset_check(asset=validation_split, name=VAL_SHARE_IN_TOLERANCE, blocking=True)
    @gated
    def val_share_in_tolerance(context: dg.AssetCheckExecutionContext, mix: MixResource) -> dg.AssetCheckResult:
        """The realised validation share of kept documents is within the configured relative tolerance."""
        sp = mix.spec.split
        verified_inputs(mix.storage, VAL_SHARE_IN_TOLERANCE, ["validation_split"], context)
        v = measure_val_share(mix.storage.source(layout.VALIDATION_SPLIT), sp.val_fraction, sp.tolerance)
        return gate(context, VALIDATION_SPLIT_KEY, dg.AssetCheckResult(
            passed=v.ok, metadata=md.val_share_in_tolerance(v),
            description=None if v.ok else f"val share {v.share:.2%} outside {v.target:.2%} ± {v.tolerance:.0%} "
                                                       f"({v.val_docs:,} of {v.docs:,} documents)",
        ))

    return [validation_split, val_disjoint_from_train, val_share_in_tolerance]
