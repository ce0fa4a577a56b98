"""quality_classifier and quality_scores: the classifier trained (or checked) in the graph with its held-out
quality, and its score on every document of the sources that keep by it, before document_filters drops any.
The scores are of the text document_filters judges and the tokenizer reads: line_dedup's output when the mix
has line dedup (stages/lines/lines.text_files), raw's otherwise; the classifier trains on raw text.

Thin assets over stages/quality/{classifier,scores}.py. They exist only when the mix has a `quality:`
section and some source's merged `filters:` has a `quality:` rule; the decision itself is document_filters'
(reason `quality:<model>`), so its gates (no_domain_vanished first) judge it like every other filter.
"""

import json

import dagster as dg

from mix_assets.config import MixSpec
from mix_assets.core import layout
from mix_assets.resources import EngineResource, MixResource
from mix_assets.stages.lines import lines as lines_lib
from mix_assets.stages.lines.assets import line_deps, line_inputs
from mix_assets.stages.common import code_version, gate, gated, raw_key, raw_name, recorded, verified_inputs, with_lineage
from mix_assets.stages.common import reused as artifact_reused
from mix_assets.stages.quality import scores as lib

GROUP = "filters"
QUALITY_CLASSIFIER = dg.AssetKey("quality_classifier")
QUALITY_SCORES = dg.AssetKey("quality_scores")
SEPARATES_HELDOUT = "quality_classifier_separates_heldout"


def build_quality_assets(spec: MixSpec) -> list:
    """[quality_classifier, quality_scores] when some source keeps by the classifier, else nothing."""
    return [_classifier(spec), _scores(spec)] if lib.quality_sources(spec) else []


def quality_deps(spec: MixSpec) -> list[dg.AssetKey]:
    """What document_filters adds to its deps: quality_scores when it exists."""
    return [QUALITY_SCORES] if lib.quality_sources(spec) else []


def _classifier(spec: MixSpec) -> dg.AssetsDefinition:
    q = spec.quality
    labelled_from = sorted(lib.labelled_sources(spec))

    @dg.asset(
        key=QUALITY_CLASSIFIER,
        group_name=GROUP,
        deps=[raw_key(n) for n in labelled_from],
        kinds={"fasttext"},
        owners=spec.owners,
        code_version=code_version(__name__, q.model_dump_json(), spec.seed),
        check_specs=[dg.AssetCheckSpec(SEPARATES_HELDOUT, asset=QUALITY_CLASSIFIER, blocking=True,
                                       description="The classifier's ROC-AUC on its seeded held-out documents "
                                       "is at least quality.min_auc (before any document is dropped by it).")],
    )
    @gated
    def quality_classifier(context: dg.AssetExecutionContext, mix: MixResource) -> dg.MaterializeResult:
        """The fastText quality classifier (trained here, or the pinned file), its training set and held-out quality."""
        spec_now, storage = mix.spec, mix.storage
        inputs = verified_inputs(storage, "quality_classifier", [raw_name(s) for s in labelled_from], context)
        if hit := artifact_reused(context, mix, "quality_classifier", inputs):
            return hit
        built = lib.build_classifier(storage, spec_now, log=context.log)
        lin = recorded(storage, "quality_classifier", [layout.QUALITY_MODEL, layout.QUALITY_TRAINING_SET], inputs,
                       context)
        auc = built.metrics.get("roc_auc")
        ok = auc is not None and auc >= spec_now.quality.min_auc
        check = dg.AssetCheckResult(
            check_name=SEPARATES_HELDOUT, passed=ok, metadata=lib.metrics_metadata(built.metrics, spec_now.quality),
            description=(f"held-out ROC-AUC {auc:.4f} >= {spec_now.quality.min_auc}" if ok else
                         f"held-out ROC-AUC {auc if auc is None else round(auc, 4)} < quality.min_auc "
                         f"{spec_now.quality.min_auc}: the classifier does not separate its labels"))
        return with_lineage(lib.classifier_metadata(built), lin,
                            check_results=[gate(context, QUALITY_CLASSIFIER, check)])

    return quality_classifier


def _scores(spec: MixSpec) -> dg.AssetsDefinition:
    names = lib.quality_sources(spec)
    rules = {n: spec.filters_for(n).quality.model_dump(mode="json") for n in names}

    @dg.asset(
        key=QUALITY_SCORES,
        group_name=GROUP,
        deps=[QUALITY_CLASSIFIER, *(raw_key(n) for n in names), *line_deps(spec)],
        kinds={"parquet"},
        owners=spec.owners,
        resource_defs={"engine": EngineResource.from_spec(spec)},
        code_version=code_version(__name__, json.dumps(rules, sort_keys=True), spec.quality.newline_replacement),
    )
    def quality_scores(context: dg.AssetExecutionContext, mix: MixResource,
                       engine: EngineResource) -> dg.MaterializeResult:
        """The classifier's score on every document, a histogram per source and the cutoff each source keeps at."""
        spec_now, storage = mix.spec, mix.storage
        srcs = lib.quality_sources(spec_now)
        inputs = verified_inputs(storage, "quality_scores",
                                 ["quality_classifier", *(raw_name(s) for s in srcs), *line_inputs(spec_now)], context)
        if hit := artifact_reused(context, mix, "quality_scores", inputs):
            return hit
        # the kept text is scored: line_dedup's where it rewrites the source (same rows, raw order)
        cutoffs = lib.score_sources(storage, spec_now, lines_lib.text_files(storage, spec_now, srcs), engine.engine)
        lin = recorded(storage, "quality_scores",
                       [*(layout.QUALITY_SCORES.format(source=s) for s in srcs), layout.QUALITY_CUTOFFS], inputs, context)
        return with_lineage(lib.scores_metadata(cutoffs, spec_now.quality), lin)

    return quality_scores
