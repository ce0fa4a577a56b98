"""line_dedup: lines found in at least `min_docs` documents of the whole mix removed from every source's text.

It sits between raw/<source> and document_filters (DESIGN.md's graph: a stage over every raw source before any
document is judged): the counts need every source, and the filters, the tokenizer and token_shards must read
the text without the boilerplate (stages/lines/lines.text_files). Thin asset over stages/lines/lines.py (a map,
a reduce and a map on the engine). Without a `line_dedup:` section it does not exist and the graph is the one
before it, byte for byte.
"""

import dagster as dg

from mix_assets.config import MixSpec
from mix_assets.core import layout
from mix_assets.resources import EngineResource, MixResource
from mix_assets.stages.audit.eval_scan import scrub_hashes
from mix_assets.stages.common import (
    code_version, gate, gated, raw_key, raw_name, recorded, reused, verified_inputs, with_lineage,
)
from mix_assets.stages.lines import lines as lib
from mix_assets.stages.lines import metadata as md
from mix_assets.core import tables

GROUP = "filters"
LINE_DEDUP = dg.AssetKey("line_dedup")
LINES_LOST_WITHIN_SHARE = "lines_lost_within_share"


def build_line_assets(spec: MixSpec) -> list:
    """[line_dedup] when the mix has a `line_dedup:` section, else nothing."""
    return [_line_dedup(spec)] if spec.line_dedup is not None else []


def line_deps(spec: MixSpec) -> list[dg.AssetKey]:
    """What a reader of the documents' text adds to its deps: line_dedup when it exists."""
    return [LINE_DEDUP] if spec.line_dedup is not None else []


def line_inputs(spec: MixSpec) -> list[str]:
    """What a reader of the documents' text adds to its verified inputs: line_dedup when it exists."""
    return ["line_dedup"] if spec.line_dedup is not None else []


def _line_dedup(spec: MixSpec) -> dg.AssetsDefinition:
    names = [s.name for s in spec.sources]

    @dg.asset(
        key=LINE_DEDUP,
        group_name=GROUP,
        deps=[raw_key(n) for n in names],
        kinds={"parquet"},
        owners=spec.owners,
        resource_defs={"engine": EngineResource.from_spec(spec)},
        code_version=code_version(__name__, spec.line_dedup.model_dump_json()),
        check_specs=[dg.AssetCheckSpec(
            LINES_LOST_WITHIN_SHARE, asset=LINE_DEDUP, blocking=False,
            description="WARN when a source loses more than line_dedup.max_lost_share of its bytes "
                        "(removed lines and dropped documents): read the most frequent removed lines.")],
    )
    @gated
    def line_dedup(context: dg.AssetExecutionContext, mix: MixResource, engine: EngineResource) -> dg.MaterializeResult:
        """Per source: its documents without the lines found in >= min_docs documents of the mix; counts, top lines."""
        s, storage = mix.spec, mix.storage
        ld, srcs = s.line_dedup, [x.name for x in s.sources]
        inputs = verified_inputs(storage, "line_dedup", [raw_name(n) for n in srcs], context)
        if hit := reused(context, mix, "line_dedup", inputs):
            return hit
        res = lib.dedup_lines(storage, tables.raw_files(storage, srcs), {n: inputs[raw_name(n)] for n in srcs},
                              lib.LineParams.of(ld), ld.skip, engine.engine, ld.samples, log=context.log)
        top = md.scrubbed_lines(res.top, scrub_hashes(s), s.audit.scrub_words)
        outputs = [layout.LINE_FREQUENT, layout.LINE_REPORT,
                   *(layout.LINE_DOCS.format(source=n) for n in lib.modified_sources(s))]
        lin = recorded(storage, "line_dedup", outputs, inputs, context)
        over = lib.over_share(res.sources, ld.max_lost_share)
        check = dg.AssetCheckResult(
            check_name=LINES_LOST_WITHIN_SHARE, passed=not over, severity=dg.AssetCheckSeverity.WARN,
            metadata=md.lines_lost(res.sources, over, ld.max_lost_share),
            description=("lost more than max_lost_share: " + ", ".join(
                f"{r['source']} {r['lost_bytes_share']:.1%} > {ld.max_lost_share:.0%}" for r in over))
            if over else f"no source lost more than {ld.max_lost_share:.0%} of its bytes")
        return with_lineage(md.line_dedup(storage, res, top, ld.min_docs), lin,
                            check_results=[gate(context, LINE_DEDUP, check)])

    return line_dedup
