"""Contamination audit: eval registry -> contamination report -> zero overlap after the masks.

Counts and ids only: no item text, matched n-gram or document text goes into any file, metadata
value, log line or exception raised here; `audit_artifact_scrubbed` proves it for files and
metadata. The logic is in `stages/audit/eval_scan.py`, `stages/audit/evals.py` and `stages/audit/contamination.py`.
"""



import dagster as dg

from mix_assets.console import metadata as console_md
from mix_assets.stages.common import code_version, demo_corpus_parts, gate, gated, raw_key, raw_name, recorded, reused, verified_inputs, with_lineage
from mix_assets.config import MixSpec
from mix_assets.stages.audit import eval_scan as lib
from mix_assets.stages.audit import contamination as ct
from mix_assets.stages.audit import evals
from mix_assets.stages.sources import demo_corpus
from mix_assets.core import layout
from mix_assets.stages.audit.published import denominator_problems
from mix_assets.stages.audit import metadata as md
from mix_assets.resources import EngineResource, MixResource

GROUP = "audit"
DENOMINATORS_NONEMPTY = "denominators_nonempty"
AUDIT_ARTIFACT_SCRUBBED = "audit_artifact_scrubbed"
ZERO_EVAL_OVERLAP = "zero_eval_overlap"
NO_FUZZY_EVAL_OVERLAP = "no_fuzzy_eval_overlap"
FUZZY_SECONDS = "fuzzy_match_seconds"  # contamination_report's metadata: the advisory's share of its map pass
EVAL_REGISTRY_KEY = dg.AssetKey("eval_registry")
CONTAMINATION_REPORT_KEY = dg.AssetKey("contamination_report")
EXCLUSION_MASKS_KEY = dg.AssetKey("exclusion_masks")


def source_rate_check_name(source: str) -> str:
    return f"contamination_rate_ok_{source}"


def build_audit_assets(spec: MixSpec) -> list:
    """eval_registry, contamination_report (+ their checks) and zero_eval_overlap on exclusion_masks."""
    # eval_registry and contamination_report compute the fuzzy advisory's index and matches when it is on
    fuzzy = [_no_fuzzy_eval_overlap(spec)] if lib.fuzzy_enabled(spec) else []
    # what both read of the audit section: not mask_contaminated (exclusion_masks applies it), source_rate_warn
    # (a WARN check's threshold, no byte of theirs) nor a task's note (free text); threads is in no dump
    unread = {"mask_contaminated": True, "source_rate_warn": True, "tasks": {"__all__": {"note"}},
              **({} if fuzzy else {"fuzzy": True})}
    section = spec.audit.model_dump_json(exclude=unread)
    # the demo's eval task is generated with its corpus
    return [_eval_registry(spec, code_version(__name__, section, *demo_corpus_parts(spec))),
            _contamination_report(spec, code_version(__name__, section)), _zero_eval_overlap(spec), *fuzzy]


# -- eval_registry ---------------------------------------------------------------------------------
def _eval_registry(spec: MixSpec, version: str) -> dg.AssetsDefinition:
    @dg.asset(
        key=EVAL_REGISTRY_KEY,
        group_name=GROUP,
        kinds={"numpy", "json"},
        owners=spec.owners,
        code_version=version,
        check_specs=[dg.AssetCheckSpec(DENOMINATORS_NONEMPTY, asset=EVAL_REGISTRY_KEY, blocking=True,
                                       description="Every eval task read at least its min_rows rows and yielded n-grams.")],
    )
    @gated
    def eval_registry(context: dg.AssetExecutionContext, mix: MixResource) -> dg.MaterializeResult:
        """Hashed 13-gram reference of every eval task's non-test splits, with its denominators."""
        storage = mix.storage
        demo_corpus.ensure_for_spec(mix.spec)  # the embedded demo's eval task is generated with its corpus
        if hit := reused(context, mix, "eval_registry", {},
                         roots=lambda: evals.root_keys(mix.spec.audit.tasks, mix.spec.base_dir)):
            return hit
        written = lib.write_registry(storage, mix.spec, log=context.log.info)
        lin = recorded(storage, "eval_registry", written.files, {}, context)
        rows = written.denominator_rows()
        bad = denominator_problems(written.tasks)
        check = dg.AssetCheckResult(
            check_name=DENOMINATORS_NONEMPTY, passed=not bad, metadata=md.denominators_nonempty(rows),
            description="; ".join(bad) if bad else f"all {len(rows):,} tasks have rows >= min_rows and n-grams",
        )
        return with_lineage(md.eval_registry(storage, layout.EVAL_REGISTRY, rows), lin,
                            check_results=[gate(context, EVAL_REGISTRY_KEY, check)])

    return eval_registry


# -- contamination_report --------------------------------------------------------------------------
def _contamination_report(spec: MixSpec, version: str) -> dg.AssetsDefinition:
    audit = spec.audit
    rate_checks = [
        dg.AssetCheckSpec(source_rate_check_name(s.name), asset=CONTAMINATION_REPORT_KEY,
                          description=f"Source {s.name}: share of contaminated documents <= "
                                      f"{audit.source_rate_warn:.0%} (WARN).")
        for s in spec.sources
    ]

    @dg.asset(
        key=CONTAMINATION_REPORT_KEY,
        group_name=GROUP,
        kinds={"json", "parquet"},
        owners=spec.owners,
        code_version=version,
        deps=[*(raw_key(s.name) for s in spec.sources), EVAL_REGISTRY_KEY],
        resource_defs={"engine": EngineResource.from_spec(spec)},  # every engine writes the same bytes
        check_specs=[
            dg.AssetCheckSpec(AUDIT_ARTIFACT_SCRUBBED, asset=CONTAMINATION_REPORT_KEY, blocking=True,
                              description=f"No audit file or metadata value holds {audit.scrub_words}+ consecutive "
                                          "words of any reference item."),
            *rate_checks,
        ],
    )
    @gated
    def contamination_report(context: dg.AssetExecutionContext, mix: MixResource,
                             engine: EngineResource) -> dg.MaterializeResult:
        """Overlap counts per source x task before masks, and the ids of contaminated documents.

        The per-document scan runs as map tasks on `engine` (in process or Ray)."""
        s, storage = mix.spec, mix.storage
        inputs = verified_inputs(storage, "contamination_report",
                                 ["eval_registry", *(raw_name(x.name) for x in s.sources)], context)
        # the scrub check scans every file under audit/, not only this artifact's: evaluated again on a reuse
        rescan = {AUDIT_ARTIFACT_SCRUBBED: lambda m: gate(context, CONTAMINATION_REPORT_KEY,
                                                          _scrub_result(context, storage, m, s.audit.scrub_words))}
        if hit := reused(context, mix, "contamination_report", inputs, recheck=rescan):
            return hit
        # the pass also writes dedup_keys' signature files it can (a cache keyed by content, not an output)
        versions = {x.name: inputs[raw_name(x.name)] for x in s.sources}
        scan, report = lib.write_contamination_report(storage, s, engine.engine, context.log, versions)
        lin = recorded(storage, "contamination_report", [layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS,
                                                          *(scan.fuzzy.outputs if scan.fuzzy else [])], inputs, context)
        metadata = md.contamination_report(storage, layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS, scan, report,
                                           _latest_metadata(context, CONTAMINATION_REPORT_KEY))
        if scan.fuzzy:  # no_fuzzy_eval_overlap reports it as its elapsed_seconds
            metadata[FUZZY_SECONDS] = console_md.seconds(scan.fuzzy.seconds)
        metadata["dedup_signatures_written_sources"] = ", ".join(scan.signed_sources) or "none"
        context.log.info(f"scanned {report['docs_scanned']:,} docs: {report['contaminated_docs']:,} contaminated, "
                         f"overlap_total {scan.tally.overlap_total:,}")
        scrubbed = _scrub_result(context, storage, metadata, s.audit.scrub_words)
        rates = [_rate_result(scan.tally, x.name, s.audit.source_rate_warn) for x in s.sources]
        return with_lineage(metadata, lin, check_results=[gate(context, CONTAMINATION_REPORT_KEY, scrubbed), *rates])

    return contamination_report


def _rate_result(tally: ct.Tally, source: str, limit: float) -> dg.AssetCheckResult:
    share, ok = tally.share(source), tally.share(source) <= limit
    return dg.AssetCheckResult(
        check_name=source_rate_check_name(source), passed=ok, severity=dg.AssetCheckSeverity.WARN,
        metadata=md.contamination_rate(tally, source, limit),
        description=None if ok else (f"source {source}: {share:.2%} of its documents are contaminated "
                                     f"(limit {limit:.0%}); look at the source, not only the items"),
    )


def _scrub_result(context, storage, own_metadata: dict, k: int) -> dg.AssetCheckResult:
    """audit_artifact_scrubbed: every audit file and metadata value, scanned for k-word item runs."""
    scrub = lib.load_npy(storage, layout.EVAL_SCRUB_NGRAMS)
    files = storage.list("audit/")
    leaks = [key for key in files if ct.leaking_strings(ct.file_strings(storage.local_path(key)), scrub, k)]
    n_values = 0
    for where, values in _audit_metadata(context, own_metadata).items():
        pairs = md.metadata_strings(values)
        n_values += len(pairs)
        leaks += [f"metadata {where}[{pairs[i][0]}]" for i in ct.leaking_strings([s for _, s in pairs], scrub, k)]
    leaks = sorted(set(leaks))
    return dg.AssetCheckResult(
        check_name=AUDIT_ARTIFACT_SCRUBBED,
        passed=not leaks,
        metadata={"scanned_files": len(files), "scanned_metadata_values": n_values, "leaks": len(leaks)},
        description=(f"{k}+ consecutive item words found in: {', '.join(leaks)}" if leaks else None),
    )


def _latest_metadata(context, key: dg.AssetKey) -> dict | None:
    """The metadata of `key`'s latest materialisation in the instance, None when there is none."""
    ev = context.instance.get_latest_materialization_event(key)
    return dict(ev.asset_materialization.metadata) if ev is not None and ev.asset_materialization is not None else None


def _audit_metadata(context, own: dict) -> dict[str, dict]:
    """The audit's metadata in the UI: this report's, eval_registry's and its check's (latest of each)."""
    out = {"contamination_report": own}
    if (registry := _latest_metadata(context, EVAL_REGISTRY_KEY)) is not None:
        out["eval_registry"] = registry
    check = dg.AssetCheckKey(EVAL_REGISTRY_KEY, DENOMINATORS_NONEMPTY)
    rec = context.instance.event_log_storage.get_latest_asset_check_execution_by_key([check]).get(check)
    evaluation = getattr(getattr(rec, "event", None), "asset_check_evaluation", None) if rec else None
    if evaluation is not None:
        out[f"eval_registry:{DENOMINATORS_NONEMPTY}"] = dict(evaluation.metadata)
    return out


# -- zero_eval_overlap -----------------------------------------------------------------------------
def _zero_eval_overlap(spec: MixSpec):
    @dg.asset_check(
        asset=EXCLUSION_MASKS_KEY,
        name=ZERO_EVAL_OVERLAP,
        blocking=True,
        additional_deps=[EVAL_REGISTRY_KEY, CONTAMINATION_REPORT_KEY, *(raw_key(s.name) for s in spec.sources)],
        description="Every document contamination_report found overlapping the eval registry is masked: the "
                    "KEPT documents (raw minus masked) have 0 overlap.",
    )
    @gated
    def zero_eval_overlap(context: dg.AssetCheckExecutionContext, mix: MixResource) -> dg.AssetCheckResult:
        """The kept documents (raw minus masked) have 0 overlap: every document with a hit is masked."""
        storage = mix.storage
        # lineage: the report was computed from these raw sources and this registry (no re-scan needed)
        verified_inputs(storage, ZERO_EVAL_OVERLAP, ["exclusion_masks", "contamination_report", "eval_registry",
                                                     *(raw_name(s.name) for s in mix.spec.sources)], context)
        try:
            scan = lib.kept_overlap(storage, mix.spec)
        except lib.AuditInputError as e:
            raise dg.Failure(description=str(e), allow_retries=False) from None
        bad, t = scan.overlapping_sources(), scan.tally
        return gate(context, EXCLUSION_MASKS_KEY, dg.AssetCheckResult(
            passed=not bad,
            metadata=md.zero_eval_overlap(scan),
            description=(f"kept documents still overlap the eval registry in sources: {', '.join(bad)} "
                         f"({t.overlap_total:,} n-grams); mask them (audit.mask_contaminated) or drop the source"
                         if bad else f"0 overlapping n-grams in {sum(t.docs_scanned.values()):,} kept documents"),
        ))

    return zero_eval_overlap


# -- no_fuzzy_eval_overlap -------------------------------------------------------------------------
def _no_fuzzy_eval_overlap(spec: MixSpec):
    f = spec.audit.fuzzy

    @dg.asset_check(
        asset=CONTAMINATION_REPORT_KEY,
        name=NO_FUZZY_EVAL_OVERLAP,
        blocking=False,
        additional_deps=[EVAL_REGISTRY_KEY],
        description=f"Advisory (WARN, excludes nothing): no document the 13-gram audit let through holds a near "
                    f"copy of an eval item (Jaccard >= {f.threshold} with an equal-length window, "
                    f"{f.shingle}-word shingles).",
    )
    def no_fuzzy_eval_overlap(context: dg.AssetCheckExecutionContext, mix: MixResource) -> dg.AssetCheckResult:
        """Near copies of eval items (one or two words changed) that the exact 13-gram audit misses.

        contamination_report's map pass matched them (against eval_registry's fuzzy index); read here."""
        st, s = mix.storage, mix.spec
        verified_inputs(st, NO_FUZZY_EVAL_OVERLAP, ["contamination_report", "eval_registry"], context)
        try:
            got = lib.read_fuzzy_report(st, s)
        except lib.AuditInputError as e:
            raise dg.Failure(description=str(e), allow_retries=False) from None
        ev = context.instance.get_latest_materialization_event(CONTAMINATION_REPORT_KEY)
        secs = ev.asset_materialization.metadata.get(FUZZY_SECONDS) if ev and ev.asset_materialization else None
        metadata = md.fuzzy_contamination(st, layout.FUZZY_REPORT, layout.FUZZY_DOCS, got, secs.value if secs else 0.0)
        leaks = _own_leaks(st, got.files, metadata, s.audit.scrub_words)
        n = got.report["fuzzy_only_docs"]
        return dg.AssetCheckResult(
            passed=not n and not leaks, severity=dg.AssetCheckSeverity.WARN, metadata={**metadata, "leaks": len(leaks)},
            description=(f"{s.audit.scrub_words}+ consecutive item words in {', '.join(leaks)}" if leaks else
                         f"{n:,} document(s) hold a near copy of an eval item the 13-gram audit did not flag (not "
                         f"masked; ids in {layout.FUZZY_DOCS}): read them, then mask or drop their source" if n else
                         f"{got.report['docs_matched']:,} near-copy document(s), all flagged by the 13-gram audit"),
        )

    return no_fuzzy_eval_overlap


def _own_leaks(storage, files: list[str], metadata: dict, k: int) -> list[str]:
    """The advisory's files and metadata values holding k+ consecutive item words (none by construction)."""
    scrub = lib.load_npy(storage, layout.EVAL_SCRUB_NGRAMS)
    leaks = [key for key in files if ct.leaking_strings(ct.file_strings(storage.local_path(key)), scrub, k)]
    pairs = md.metadata_strings(metadata)
    return leaks + [f"metadata [{pairs[i][0]}]" for i in ct.leaking_strings([v for _, v in pairs], scrub, k)]
