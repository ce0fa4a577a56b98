"""dedup_keys and exclusion_masks: duplicate clusters over the merged pool, then every exclusion.

Thin asset functions over `stages/dedup/dedup.py` (streams the raw parquet, builds the masks), `stages/dedup/minhash.py`
and `stages/dedup/lsh.py`. The `zero_eval_overlap` gate on exclusion_masks lives in stages/audit/assets.py.
"""


import json
import time

import dagster as dg

from mix_assets.console import metadata as console_md
from mix_assets.stages.common import (
    code_version, gate, gated, raw_key, raw_name, recorded, reused, verified_inputs, with_lineage,
)
from mix_assets.stages.filters.assets import filter_deps
from mix_assets.config import MixSpec
from mix_assets.stages.filters import decisions
from mix_assets.stages.lines import lines as lines_lib
from mix_assets.core import layout, tables
from mix_assets.stages.dedup import dedup as lib
from mix_assets.stages.dedup import metadata as md
from mix_assets.resources import EngineResource, MixResource

GROUP = "dedup"
DEDUP_KEYS = dg.AssetKey("dedup_keys")
EXCLUSION_MASKS = dg.AssetKey("exclusion_masks")
CONTAMINATION_REPORT = dg.AssetKey("contamination_report")
CLUSTERS_CONSISTENT = "clusters_consistent"
NO_SOURCE_VANISHED = "no_source_vanished"
SOURCE_BUDGETS_MET = "source_budgets_met"
SOURCE_LOSS_WITHIN_LIMIT = "source_loss_within_limit"


def build_dedup_assets(spec: MixSpec) -> list:
    """The dedup_keys and exclusion_masks assets (their checks are declared on them)."""
    return [_dedup_keys(spec), _exclusion_masks(spec)]


# -- dedup_keys ----------------------------------------------------------------------------------
def _dedup_keys(spec: MixSpec) -> dg.AssetsDefinition:
    dedup_fields = spec.dedup.model_dump(exclude={"threads", "partitions", "samples_per_reason", "max_loss_share_warn"})
    # which sources' filter decisions it reads: document_filters may vanish from the graph (filters off)
    filtered = decisions.filtered_sources(spec)

    @dg.asset(
        key=DEDUP_KEYS,
        group_name=GROUP,
        deps=[raw_key(s.name) for s in spec.sources] + filter_deps(spec),
        kinds={"parquet", "numpy"},
        owners=spec.owners,
        # the engine section is not in it: every engine writes the same bytes
        resource_defs={"engine": EngineResource.from_spec(spec)},
        code_version=code_version(__name__, json.dumps(dedup_fields, sort_keys=True),
                                  {s.name: s.priority for s in spec.sources}, *((filtered,) if filtered else ())),
        check_specs=[
            dg.AssetCheckSpec(
                CLUSTERS_CONSISTENT, asset=DEDUP_KEYS, blocking=True,
                description="Every cluster has exactly one kept member whose doc_id is the cluster id; "
                "sizes and reasons agree; equal exact keys never span two clusters.",
            )
        ],
    )
    @gated
    def dedup_keys(context: dg.AssetExecutionContext, mix: MixResource, engine: EngineResource) -> dg.MaterializeResult:
        """Per document: exact key, MinHash/LSH near-duplicate cluster, keep flag and reason.

        The per-document work (read, normalise, exact key, MinHash) runs as map tasks on `engine`
        (in process or Ray) and are stored per source (reused while a source is unchanged; written by
        contamination_report's pass when it ran first); the LSH reduce's bands, text pass and
        verification, the clusters, the keep rule, the table's rows and the clusters check run as tasks on
        `engine` too. Documents the filters rejected cluster as usual but never survive a cluster holding a
        document they kept."""
        spec_now, storage = mix.spec, mix.storage
        names = [s.name for s in spec_now.sources]
        filtered = [k.to_user_string() for k in filter_deps(spec_now)]
        inputs = verified_inputs(storage, "dedup_keys", [raw_name(s) for s in names] + filtered, context)
        if hit := reused(context, mix, "dedup_keys", inputs):
            return hit
        started = time.monotonic()
        st = lib.write_dedup_keys(storage, layout.DEDUP_KEYS, tables.raw_files(storage, names),
                                  {s.name: s.priority for s in spec_now.sources}, lib.dedup_params(spec_now),
                                  engine.engine, log=context.log, raw_versions={s: inputs[raw_name(s)] for s in names},
                                  rejected=lines_lib.with_dropped_ids(
                                      decisions.rejected_array(storage, decisions.filtered_sources(spec_now)),
                                      storage, spec_now) if filtered else None)
        elapsed = time.monotonic() - started
        lin = recorded(storage, "dedup_keys", [layout.DEDUP_KEYS, *map(lib.signatures_key, sorted(names))], inputs,
                       context)
        context.log.info(f"dedup_keys: {st['documents']:,} documents in {elapsed:.1f} s on engine {engine.kind}")
        problems = lib.cluster_problems(storage, layout.DEDUP_KEYS, engine.engine, spec_now.dedup.partitions)
        check = dg.AssetCheckResult(check_name=CLUSTERS_CONSISTENT, passed=not problems,
                                    metadata={"clusters": st["clusters"], **console_md.problems(problems)},
                                    description=f"{len(problems):,} inconsistent cluster(s)" if problems else None)
        return with_lineage(md.dedup_keys(storage, layout.DEDUP_KEYS, st, elapsed, names), lin,
                            check_results=[gate(context, DEDUP_KEYS, check)])

    return dedup_keys


# -- exclusion_masks -----------------------------------------------------------------------------
def _exclusion_masks(spec: MixSpec) -> dg.AssetsDefinition:
    filtered = decisions.filtered_sources(spec)  # their rejections are exclusions (as in dedup_keys)

    @dg.asset(
        key=EXCLUSION_MASKS,
        group_name=GROUP,
        deps=[DEDUP_KEYS, CONTAMINATION_REPORT, *filter_deps(spec)],
        kinds={"parquet"},
        owners=spec.owners,
        # the engine section is not in it: every engine writes the same bytes
        resource_defs={"engine": EngineResource.from_spec(spec)},
        code_version=code_version(__name__, spec.audit.mask_contaminated, spec.split.val_fraction,
                                  {s.name: s.share for s in spec.sources}, spec.target_tokens,
                                  *((filtered,) if filtered else ())),
        check_specs=[
            dg.AssetCheckSpec(NO_SOURCE_VANISHED, asset=EXCLUSION_MASKS, blocking=True,
                              description="Every configured source keeps at least one document."),
            dg.AssetCheckSpec(SOURCE_BUDGETS_MET, asset=EXCLUSION_MASKS, blocking=True,
                              description="Every source keeps ceil(unique_budget / (1 - val_fraction)) "
                              "estimated tokens after the masks."),
            dg.AssetCheckSpec(SOURCE_LOSS_WITHIN_LIMIT, asset=EXCLUSION_MASKS, blocking=False,
                              description="WARN when a source loses more than dedup.max_loss_share_warn "
                              "of its estimated tokens."),
        ],
    )
    @gated
    def exclusion_masks(context: dg.AssetExecutionContext, mix: MixResource,
                        engine: EngineResource) -> dg.MaterializeResult:
        """One row per excluded document with its reasons (exact_dup, near_dup, contaminated, a filter's rule)."""
        spec_now, storage = mix.spec, mix.storage
        # contamination_report is an input whenever it exists, and required when contaminated docs are masked
        upstream = ["dedup_keys", *(raw_name(s.name) for s in spec_now.sources),
                    *(k.to_user_string() for k in filter_deps(spec_now))]
        if spec_now.audit.mask_contaminated or storage.exists(layout.CONTAMINATED_DOCS):
            upstream.append("contamination_report")
        inputs = verified_inputs(storage, "exclusion_masks", upstream, context)
        if hit := reused(context, mix, "exclusion_masks", inputs):
            return hit
        masks = lib.build_exclusion_masks(storage, spec_now, engine.engine)
        lin = recorded(storage, "exclusion_masks", [layout.EXCLUSION_MASKS, layout.COMPOSITION], inputs, context)
        checks = [gate(context, EXCLUSION_MASKS, r) for r in _mask_checks(masks, spec_now.dedup.max_loss_share_warn)]
        return with_lineage(md.exclusion_masks(storage, layout.EXCLUSION_MASKS, masks), lin, check_results=checks)

    return exclusion_masks


def _mask_checks(m: lib.Masks, loss_limit: float) -> list[dg.AssetCheckResult]:
    vanished, short, lossy = m.vanished, m.short, m.lossy(loss_limit)
    return [
        dg.AssetCheckResult(
            check_name=NO_SOURCE_VANISHED, passed=not vanished, metadata=md.no_source_vanished(m),
            description=f"sources with no document left: {vanished}" if vanished else "every source kept documents",
        ),
        dg.AssetCheckResult(
            check_name=SOURCE_BUDGETS_MET, passed=not short, metadata=md.source_budgets_met(m),
            description=("below budget: " + ", ".join(f"{s} keeps {k:,} < {n:,}" for s, (k, n) in short.items())
                         + ". Raise the raw sample (headroom; or filters.keep_share to what the filters keep) or "
                         "lower the share") if short else "every source meets ceil(unique_budget / (1 - val_fraction))",
        ),
        dg.AssetCheckResult(
            check_name=SOURCE_LOSS_WITHIN_LIMIT, passed=not lossy, severity=dg.AssetCheckSeverity.WARN,
            metadata=md.source_loss_within_limit(m, loss_limit),
            description=("over the limit: " + ", ".join(f"{s} {v:.1%}" for s, v in lossy.items()))
            if lossy else "no source lost more than the limit",
        ),
    ]
