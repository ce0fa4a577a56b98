"""raw/<source>: one asset per configured source, normalised to Parquet documents."""

import itertools
import json

import dagster as dg
import numpy as np

from mix_assets.assets.common import code_version, md_table, raw_key, raw_name, recorded, with_lineage, write_parquet
from mix_assets.config import MixSpec, SourceSpec
from mix_assets.lib import charts, demo_corpus, layout
from mix_assets.lib import sources as lib
from mix_assets.lib.progress import Progress
from mix_assets.resources import MixResource

HAS_DOCUMENTS = "has_documents"
BUDGET_MET = "budget_met"
_LENGTH_BINS = [0, 256, 1024, 4096, 16384, 65536, np.inf]

def length_histogram(n_chars: np.ndarray) -> list[list[object]]:
    counts, _ = np.histogram(n_chars, bins=_LENGTH_BINS)
    labels = ["< 256", "256 - 1K", "1K - 4K", "4K - 16K", "16K - 64K", ">= 64K"]
    return [[lab, int(c)] for lab, c in zip(labels, counts)]

def build_source_assets(spec: MixSpec) -> list:
    return [_raw_asset(spec, src) for src in spec.sources]

def _raw_asset(spec: MixSpec, src: SourceSpec) -> dg.AssetsDefinition:
    key = raw_key(src.name)
    minimum = int(np.ceil(spec.unique_budget(src.name) / (1 - spec.split.val_fraction)))
    target = spec.raw_budget(src.name)

    @dg.asset(
        key=key,
        group_name="sources",
        description=src.rationale,
        kinds={"parquet", src.loader.kind},
        owners=spec.owners,
        code_version=code_version(lib, src.model_dump_json(), spec.seed, target, spec.tokenizer.model_dump_json()),
        metadata={"license": src.license, "loader": src.loader.kind, "share": src.share, "epochs": src.epochs},
        check_specs=[
            dg.AssetCheckSpec(HAS_DOCUMENTS, asset=key, blocking=True,
                              description="At least one document survived reading and the row filters."),
            dg.AssetCheckSpec(BUDGET_MET, asset=key, blocking=True,
                              description="Estimated tokens cover the source's budget (ERROR) and headroom (WARN)."),
        ],
    )
    def _asset(context: dg.AssetExecutionContext, mix: MixResource) -> dg.MaterializeResult:
        spec_now = mix.spec
        storage = mix.storage
        demo_corpus.ensure_for_spec(spec_now)
        src_now = spec_now.source(src.name)
        # A tokenizer trained later cannot measure anything yet: read a sample head only for one that exists.
        head = ([] if spec_now.tokenizer.kind == "train" else
                [r.text for r in itertools.islice(lib.iter_rows(spec_now, src_now), 500) if r.text])
        bpt, how = lib.bytes_per_token(spec_now, head)
        prog = Progress(context.log, f"raw/{src.name}", interval=10.0, item="rows")  # rows read, before filters
        seen = [0, 0]

        def progress(rows: int, nbytes: int) -> None:
            prog.update(docs=rows - seen[0], bytes=nbytes - seen[1])
            seen[:] = [rows, nbytes]

        got = lib.sample_source(spec_now, src_now, bpt, target, progress)
        progress(got.rows_read, got.bytes_read)
        table = got.table
        prog.done(f"kept {table.num_rows:,} documents ({got.rows_read - table.num_rows:,} dropped or sampled out)")
        write_parquet(storage, layout.RAW_DOCS.format(source=src.name), table)
        est = int(np.sum(table.column("est_tokens"))) if table.num_rows else 0
        nbytes = int(np.sum(table.column("n_bytes"))) if table.num_rows else 0
        stats = {
            "source": src.name, "rows_read": got.rows_read, "documents": table.num_rows,
            "dropped": got.dropped, "bytes": nbytes, "bytes_read": got.bytes_read, "est_tokens": est,
            "bytes_per_token": round(bpt, 4), "token_estimate": how, "budget_tokens": target,
            "minimum_tokens": minimum, "exhausted": got.exhausted,
            "undecodable_origins": got.undecodable_origins,
            "drop_notes": got.drop_notes,
            "fallback_decoded": len(got.fallback_decoded),
        }
        storage.write_text(layout.RAW_STATS.format(source=src.name), json.dumps(stats, indent=1, sort_keys=True))
        lin = recorded(storage, raw_name(src.name),
                       [layout.RAW_DOCS.format(source=src.name), layout.RAW_STATS.format(source=src.name)], {})
        hist = length_histogram(np.asarray(table.column("n_chars"))) if table.num_rows else []
        unreadable = {k: got.dropped[k] for k in ("undecodable", "binary", "control_chars") if got.dropped[k]}
        if unreadable:
            context.log.warning(f"{src.name}: unreadable rows dropped {unreadable}, e.g. {got.drop_notes[:3]}")

        checks = [
            dg.AssetCheckResult(
                check_name=HAS_DOCUMENTS, passed=table.num_rows > 0,
                metadata={"documents": table.num_rows, "rows_read": got.rows_read,
                          **{f"dropped_{k}": v for k, v in got.dropped.items()}},
            ),
            dg.AssetCheckResult(
                check_name=BUDGET_MET,
                passed=est >= target,
                severity=dg.AssetCheckSeverity.ERROR if est < minimum else dg.AssetCheckSeverity.WARN,
                metadata={"est_tokens": est, "budget_tokens": target, "minimum_tokens": minimum,
                          "token_estimate": how},
                description=(
                    f"{est:,} estimated tokens against a budget of {target:,} (budget x headroom) and a "
                    f"minimum of {minimum:,} (unique budget before the validation split)"
                ),
            ),
        ]
        return with_lineage(
            {
                "dagster/row_count": table.num_rows,
                "path": dg.MetadataValue.path(storage.uri(layout.RAW_DOCS.format(source=src.name))),
                "rows_read": got.rows_read,
                "documents": table.num_rows,
                **{f"dropped_{k}": v for k, v in got.dropped.items()},
                "bytes": nbytes,
                "est_tokens": est,
                "budget_tokens": target,
                "budget_fill": round(est / target, 4) if target else 0.0,
                "bytes_per_token": round(bpt, 4),
                "token_estimate": how,
                "exhausted_source": got.exhausted,
                "fallback_decoded": len(got.fallback_decoded),
                "drop_notes": dg.MetadataValue.json(got.drop_notes),
                "length_histogram": dg.MetadataValue.md(
                    md_table(["chars", "documents"], hist)
                    + ("\n\n" + charts.histogram_md(np.asarray(table.column("n_chars")), f"{src.name}: document length",
                                                      "characters", log_x=True) if table.num_rows else "")
                ),
            },
            lin,
            check_results=checks,
        )

    return _asset
