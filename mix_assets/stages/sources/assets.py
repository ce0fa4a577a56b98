"""raw/<source>: one asset per configured source, normalised to Parquet documents."""

import dagster as dg

from mix_assets.stages.common import code_version, demo_corpus_parts, gate, gated, raw_key, raw_name, recorded, reused, with_lineage
from mix_assets.config import MixSpec
from mix_assets.stages.sources.config import SourceSpec
from mix_assets.stages.sources import demo_corpus, modifiers
from mix_assets.core import layout
from mix_assets.stages.sources import sources as lib
from mix_assets.stages.sources import metadata as md
from mix_assets.core.engine import Engine
from mix_assets.core.progress import Progress
from mix_assets.console import charts
from mix_assets.resources import MixResource

HAS_DOCUMENTS = "has_documents"
BUDGET_MET = "budget_met"


def build_source_assets(spec: MixSpec) -> list:
    return [_raw_asset(spec, src) for src in spec.sources]


def _raw_asset(spec: MixSpec, src: SourceSpec) -> dg.AssetsDefinition:
    key = raw_key(src.name)
    target = spec.raw_budget(src.name)
    # What raw writes depends on its modifiers (PII, C4 lines in mode modify), not on the rest of the
    # source's `filters:` (thresholds document_filters judges by): only the former marks raw stale.
    mods = modifiers.Modifiers.for_source(spec, src.name)
    mod_parts = (mods.identity(),) if mods else ()

    @dg.asset(
        key=key,
        group_name="sources",
        description=src.rationale,
        kinds={"parquet", src.loader.kind},
        owners=spec.owners,
        code_version=code_version(__name__, lib.source_fields_read(src), spec.seed, target,
                                  lib.tokenizer_fields_read(spec.tokenizer), *mod_parts, *demo_corpus_parts(spec)),
        metadata={"license": src.license, "loader": src.loader.kind, "share": src.share, "epochs": src.epochs},
        check_specs=[
            dg.AssetCheckSpec(HAS_DOCUMENTS, asset=key, blocking=True,
                              description="At least one document survived reading and the row filters."),
            dg.AssetCheckSpec(BUDGET_MET, asset=key, blocking=True,
                              description="Estimated tokens cover the source's budget (ERROR) and headroom (WARN)."),
        ],
    )
    @gated
    def _asset(context: dg.AssetExecutionContext, mix: MixResource) -> dg.MaterializeResult:
        """The source read, filtered and sampled to its raw token budget, as Parquet documents."""
        spec_now, storage = mix.spec, mix.storage
        demo_corpus.ensure_for_spec(spec_now)
        if hit := reused(context, mix, raw_name(src.name), {}, roots=lambda: lib.root_keys(spec_now, src.name)):
            return hit
        charts.preload()  # its length histogram: matplotlib imported while the source is read
        prog = Progress(context.log, f"raw/{src.name}", interval=10.0, item="rows")  # rows read, before filters
        seen = [0, 0]

        def progress(rows: int, nbytes: int) -> None:
            prog.update(docs=rows - seen[0], bytes=nbytes - seen[1])
            seen[:] = [rows, nbytes]

        # JSONL in chunks on engine.num_cpus local threads, whatever engine.kind: the files are paths on
        # this machine, and a few seconds of reading would not pay for starting or joining Ray per source
        threads = Engine(num_cpus=spec_now.engine.num_cpus)
        raw = lib.read_raw_source(storage, spec_now, src.name, progress, threads)
        reused_chunks, chunks = raw.sample.chunks_reused
        prog.done(f"kept {raw.docs:,} documents ({raw.sample.rows_read - raw.docs:,} dropped or sampled out)"
                  + (f"; pass 1 of {reused_chunks} of {chunks} chunks reused from the object store (same bytes)"
                     if reused_chunks else ""))
        docs_key = layout.RAW_DOCS.format(source=src.name)
        lin = recorded(storage, raw_name(src.name), [docs_key, layout.RAW_STATS.format(source=src.name)], {}, context)
        if raw.unreadable:
            context.log.warning(f"{src.name}: unreadable rows dropped {raw.unreadable}, "
                                f"e.g. {raw.sample.drop_notes[:3]}")
        return with_lineage(md.raw_source(storage, docs_key, raw), lin, check_results=_checks(context, key, raw))

    return _asset


def _checks(context, key: dg.AssetKey, raw: lib.RawSource) -> list[dg.AssetCheckResult]:
    est, target, minimum = raw.est_tokens, raw.budget_tokens, raw.minimum_tokens
    budget = dg.AssetCheckResult(
        check_name=BUDGET_MET, passed=est >= target, metadata=md.budget_met(raw),
        severity=dg.AssetCheckSeverity.ERROR if est < minimum else dg.AssetCheckSeverity.WARN,
        description=(f"{est:,} estimated tokens against a budget of {target:,} (budget x headroom) and a "
                     f"minimum of {minimum:,} (unique budget before the validation split)"),
    )
    docs = dg.AssetCheckResult(check_name=HAS_DOCUMENTS, passed=raw.docs > 0, metadata=md.has_documents(raw),
                               description=None if raw.docs else f"source {raw.name}: no document kept")
    return [gate(context, key, docs), gate(context, key, budget)]
