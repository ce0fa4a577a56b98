"""document_filters: the filter cascade (heuristic quality rules, language ID) over every raw source.

Thin asset over `stages/filters/decisions.py` (a map stage on the engine, decisions per source) and its gates.
The asset exists only when some source runs filters (the mix's `filters:` or a source's override);
without one the graph is the one before filters existed, byte for byte.
"""

import dataclasses
import json

import dagster as dg

from mix_assets.stages.common import code_version, gate, gated, raw_key, raw_name, recorded, verified_inputs, with_lineage
from mix_assets.stages.common import reused as artifact_reused  # `reused` names the decisions' reuse below
from mix_assets.config import MixSpec
from mix_assets.stages.audit.eval_scan import scrub_hashes
from mix_assets.stages.dedup import dedup as dedup_lib
from mix_assets.stages.filters import decisions as lib
from mix_assets.stages.filters import metadata as md
from mix_assets.stages.lines import lines as lines_lib
from mix_assets.stages.lines.assets import line_deps, line_inputs
from mix_assets.stages.quality import scores as quality_lib
from mix_assets.stages.quality.assets import quality_deps
from mix_assets.core import layout
from mix_assets.resources import EngineResource, MixResource

GROUP = "filters"
DOCUMENT_FILTERS = dg.AssetKey("document_filters")
NO_DOMAIN_VANISHED = "no_domain_vanished"
KILL_RATES_EXPECTED = "kill_rates_expected"
BREVITY_KEPT = "brevity_kept"
KEEP_SHARE_HELD = "keep_share_held"


def build_filter_assets(spec: MixSpec) -> list:
    """[document_filters] when some source runs filters, else nothing."""
    return [_document_filters(spec)] if lib.filtered_sources(spec) else []


def filter_deps(spec: MixSpec) -> list[dg.AssetKey]:
    """What a downstream stage adds to its deps: document_filters when it exists (and line_dedup when it exists:
    the documents it drops are excluded like the filters' rejects)."""
    return ([DOCUMENT_FILTERS] if lib.filtered_sources(spec) else []) + line_deps(spec)


def _document_filters(spec: MixSpec) -> dg.AssetsDefinition:
    names = lib.filtered_sources(spec)
    configured = {n: spec.filters_for(n).model_dump(mode="json") for n in names}

    @dg.asset(
        key=DOCUMENT_FILTERS,
        group_name=GROUP,
        deps=[raw_key(n) for n in names] + line_deps(spec) + quality_deps(spec),
        kinds={"parquet"},
        owners=spec.owners,
        resource_defs={"engine": EngineResource.from_spec(spec)},
        code_version=code_version(__name__, json.dumps(configured, sort_keys=True)),
        check_specs=[
            dg.AssetCheckSpec(NO_DOMAIN_VANISHED, asset=DOCUMENT_FILTERS, blocking=True,
                              description="No source, language or length bucket holding >= guard.min_share of the "
                              "documents keeps less than guard.min_kept of its own count."),
            dg.AssetCheckSpec(KILL_RATES_EXPECTED, asset=DOCUMENT_FILTERS, blocking=False,
                              description="WARN when a filter removes more of a source than its expect.max_kill_rate."),
            dg.AssetCheckSpec(BREVITY_KEPT, asset=DOCUMENT_FILTERS, blocking=False,
                              description="WARN when a length rule removes more than guard.brevity_warn of a "
                              "source's documents shorter than guard.brevity_chars (brevity killed)."),
            dg.AssetCheckSpec(KEEP_SHARE_HELD, asset=DOCUMENT_FILTERS, blocking=False,
                              description="WARN when the filters keep less of a source's bytes than the "
                              "filters.keep_share its raw sample was sized for."),
        ],
    )
    @gated
    def document_filters(context: dg.AssetExecutionContext, mix: MixResource,
                         engine: EngineResource) -> dg.MaterializeResult:
        """Per document: keep, the first failing rule, language and score; kill rates and samples per filter."""
        spec_now, storage = mix.spec, mix.storage
        srcs = lib.filtered_sources(spec_now)
        inputs = verified_inputs(storage, "document_filters", [raw_name(s) for s in srcs] + line_inputs(spec_now)
                                 + [k.to_user_string() for k in quality_deps(spec_now)], context)
        # the blocklists are read from outside the root: their content keys the artifact
        params = {s: lib.filter_params(spec_now.filters_for(s), str(spec_now.base_dir)) for s in srcs}
        if hit := artifact_reused(context, mix, "document_filters", inputs, roots=lambda: lib.url_roots(params)):
            return hit
        params = {s: dataclasses.replace(p, quality=quality_lib.filter_quality(storage, spec_now, s))
                  for s, p in params.items()}
        reused = lib.decide_sources(storage, lines_lib.text_files(storage, spec_now, srcs), {s: inputs[raw_name(s)] for s in srcs},
                                    params, engine.engine, log=context.log)
        summary = lib.summarise_stored(storage, srcs, lib.guard_for(spec_now))  # a row group at a time
        storage.write_text(layout.FILTER_REPORT, lib.report_json(summary))
        samples = _samples(storage, spec_now, srcs, params)
        lin = recorded(storage, "document_filters", [*map(lib.decisions_key, srcs), layout.FILTER_REPORT], inputs,
                       context)
        keep = lib.below_keep_share(summary, {s: spec_now.keep_share(s) for s in srcs})
        checks = [gate(context, DOCUMENT_FILTERS, c) for c in _checks(summary, keep)]
        return with_lineage({**md.document_filters(storage, summary, samples, reused),
                             **md.url_counts(lib.url_counts(storage, srcs, params))}, lin, check_results=checks)

    return document_filters


def _samples(storage, spec: MixSpec, sources: list[str], params: dict) -> tuple[list[dict], int]:
    """Rejected documents beside kept ones, scrubbed like every audit artifact; contaminated ones never."""
    contaminated = dedup_lib.read_contaminated_ids(storage)
    never = set(contaminated.ids()) if contaminated is not None else set()
    k = spec.filters.samples_per_filter if spec.filters is not None else 3
    picked = lib.pick_stored(storage, sources, k, never)
    whole = dedup_lib.texts(lines_lib.text_paths(storage, spec, sorted(sources)), {p[2] for p in picked})
    why = lib.explain(picked, whole, params)
    texts = {d: dedup_lib.snippet(t) for d, t in whole.items()}
    return md.sample_rows(picked, texts, scrub_hashes(spec), spec.audit.scrub_words, why)


def _checks(s: lib.Summary, keep: tuple[list[dict], list[dict]]) -> list[dg.AssetCheckResult]:
    warn = dg.AssetCheckSeverity.WARN
    return [
        dg.AssetCheckResult(
            check_name=NO_DOMAIN_VANISHED, passed=not s.vanished, metadata=md.no_domain_vanished(s),
            description=("vanished: " + ", ".join(f"{d['kind']} {d['domain']} keeps {d['docs_after']:,} of "
                                                  f"{d['docs_before']:,}" for d in s.vanished))
            if s.vanished else "every large domain kept its share"),
        dg.AssetCheckResult(
            check_name=KILL_RATES_EXPECTED, passed=not s.over_expected, severity=warn,
            metadata=md.kill_rates_expected(s),
            description=("above expectation: " + ", ".join(f"{k['filter']} on {k['source']} {k['kill_share']:.1%} > "
                                                           f"{k['max_kill_share']:.0%}" for k in s.over_expected))
            if s.over_expected else "every filter within its expected kill rate"),
        dg.AssetCheckResult(
            check_name=BREVITY_KEPT, passed=not s.brevity_killed, severity=warn, metadata=md.brevity_kept(s),
            description=("brevity killed: " + ", ".join(f"{b['rule']} removed {b['removed_share']:.0%} of "
                                                        f"{b['source']}'s short documents" for b in s.brevity_killed))
            if s.brevity_killed else "no length rule removed most of a source's short documents"),
        dg.AssetCheckResult(
            check_name=KEEP_SHARE_HELD, passed=not keep[1], severity=warn, metadata=md.keep_share_held(*keep),
            description=("kept less than the raw sample assumed: " + ", ".join(
                f"{r['source']} {r['kept_bytes_share']:.1%} of its bytes < keep_share {r['keep_share']:.0%}"
                for r in keep[1]) + " (lower filters.keep_share, or source_budgets_met may fall short)")
            if keep[1] else "no source with a filters.keep_share below 1 kept less of its bytes than that"),
    ]
