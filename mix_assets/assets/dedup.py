"""dedup_keys and exclusion_masks: duplicate clusters over the merged pool, then every exclusion.

Thin asset functions over `lib/dedup.py` (streams the raw parquet), `lib/minhash.py` and
`lib/lsh.py`. The `zero_eval_overlap` gate on exclusion_masks lives in the audit module.
"""


import json
import time

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.assets.common import (
    code_version, md_table, raw_key, raw_name, read_parquet, recorded, verified_inputs, with_lineage, write_parquet,
)
from mix_assets.config import MixSpec
from mix_assets.lib import charts, layout, lsh, minhash
from mix_assets.lib import dedup as lib
from mix_assets.resources import MixResource

GROUP = "dedup"
DEDUP_KEYS = dg.AssetKey("dedup_keys")
EXCLUSION_MASKS = dg.AssetKey("exclusion_masks")
CONTAMINATION_REPORT = dg.AssetKey("contamination_report")
CLUSTERS_CONSISTENT = "clusters_consistent"
NO_SOURCE_VANISHED = "no_source_vanished"
SOURCE_BUDGETS_MET = "source_budgets_met"
SOURCE_LOSS_WITHIN_LIMIT = "source_loss_within_limit"
S_CURVE_POINTS = (0.5, 0.7, 0.8, 0.9)


def build_dedup_assets(spec: MixSpec) -> list:
    """The dedup_keys and exclusion_masks assets (their checks are declared on them)."""
    return [_dedup_keys(spec), _exclusion_masks(spec)]


def params_for(spec: MixSpec) -> lib.DedupParams:
    d = spec.dedup
    return lib.DedupParams(
        shingle=d.shingle_words, num_perm=d.num_perm, threshold=d.threshold,
        fp_weight=d.lsh_fp_weight, fn_weight=d.lsh_fn_weight, threads=d.threads,
    )


def raw_paths(spec: MixSpec, storage) -> dict[str, str]:
    return {s.name: storage.local_path(layout.RAW_DOCS.format(source=s.name)) for s in spec.sources}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- dedup_keys ----------------------------------------------------------------------------------
def _dedup_keys(spec: MixSpec) -> dg.AssetsDefinition:
    dedup_fields = spec.dedup.model_dump(exclude={"threads", "samples_per_reason", "max_loss_share_warn"})

    @dg.asset(
        key=DEDUP_KEYS,
        group_name=GROUP,
        deps=[raw_key(s.name) for s in spec.sources],
        kinds={"parquet", "numpy"},
        owners=spec.owners,
        code_version=code_version(lib, lsh, minhash, json.dumps(dedup_fields, sort_keys=True),
                                  {s.name: s.priority for s in spec.sources}),
        check_specs=[
            dg.AssetCheckSpec(
                CLUSTERS_CONSISTENT, asset=DEDUP_KEYS, blocking=True,
                description="Every cluster has exactly one kept member whose doc_id is the cluster id; "
                "sizes and reasons agree; equal exact keys never span two clusters.",
            )
        ],
    )
    def dedup_keys(context: dg.AssetExecutionContext, mix: MixResource) -> dg.MaterializeResult:
        """Per document: exact key, MinHash/LSH near-duplicate cluster, keep flag and reason."""
        spec_now, storage = mix.spec, mix.storage
        inputs = verified_inputs(storage, "dedup_keys", [raw_name(s.name) for s in spec_now.sources])
        params = params_for(spec_now)
        started = time.monotonic()
        table, st = lib.dedup_keys_table(
            raw_paths(spec_now, storage), {s.name: s.priority for s in spec_now.sources}, params
        )
        seconds = time.monotonic() - started
        write_parquet(storage, layout.DEDUP_KEYS, table)
        lin = recorded(storage, "dedup_keys", [layout.DEDUP_KEYS], inputs)
        context.log.info(f"dedup_keys: {st['documents']:,} documents in {seconds:.1f} s")

        b, r = st["bands"], st["rows"]
        curve = [[f"{j:.1f}", f"{float(lsh.s_curve(b, r, j)):.4f}"] for j in S_CURVE_POINTS]
        n = max(st["documents"], 1)
        sizes = np.asarray(table.column("cluster_size"))[np.asarray(table.column("keep"))]
        bins = [(1, 1), (2, 2), (3, 5), (6, 20), (21, 10**12)]
        size_rows = [[f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi < 10**12 else f">= {lo}"),
                      int(np.count_nonzero((sizes >= lo) & (sizes <= hi)))] for lo, hi in bins]
        per_source = [
            [s, v["documents"], v["exact_dup"], v["near_dup"],
             f"{(v['exact_dup'] + v['near_dup']) / max(v['documents'], 1):.2%}"]
            for s, v in st["per_source"].items()
        ]
        problems = lib.check_clusters(table)
        return with_lineage(
            {
                "dagster/row_count": st["documents"],
                "path": dg.MetadataValue.path(storage.uri(layout.DEDUP_KEYS)),
                "bands": b,
                "rows": r,
                "num_perm": st["num_perm"],
                "threshold": st["threshold"],
                **{f"s_curve_{j:.1f}": float(lsh.s_curve(b, r, j)) for j in S_CURVE_POINTS},
                "s_curve": dg.MetadataValue.md(
                    f"P(pair shares a band) = 1 - (1 - J^{r})^{b}; candidates are then verified by "
                    f"exact shingle Jaccard >= {st['threshold']}\n\n" + md_table(["Jaccard", "P(candidate)"], curve)
                    + "\n\n" + charts.s_curve_md(b, r, st["threshold"])
                ),
                "documents": st["documents"],
                "kept": st["kept"],
                "excluded_exact_dup": st["excluded_exact_dup"],
                "excluded_near_dup": st["excluded_near_dup"],
                "kill_rate_exact_dup": st["excluded_exact_dup"] / n,
                "kill_rate_near_dup": st["excluded_near_dup"] / n,
                "no_shingle_documents": st["no_shingle_documents"],
                "candidate_pairs": st["candidate_pairs"],
                "confirmed_pairs": st["confirmed_pairs"],
                "rejected_pairs": st["rejected_pairs"],
                "confirmed_jaccard_min": st["confirmed_jaccard_min"] if st["confirmed_jaccard_min"] is not None else -1.0,
                "rejected_jaccard_max": st["rejected_jaccard_max"] if st["rejected_jaccard_max"] is not None else -1.0,
                "clusters": st["clusters"],
                "multi_member_clusters": st["multi_member_clusters"],
                "largest_cluster": st["largest_cluster"],
                "cluster_sizes": dg.MetadataValue.md(md_table(["cluster size", "clusters"], size_rows)),
                "kills_per_source": dg.MetadataValue.md(
                    md_table(["source", "documents", "exact_dup", "near_dup", "kill rate"], per_source)
                ),
                "seconds": round(seconds, 3),
                "documents_per_second": round(st["documents"] / max(seconds, 1e-9), 1),
            },
            lin,
            check_results=[
                dg.AssetCheckResult(
                    check_name=CLUSTERS_CONSISTENT, passed=not problems,
                    metadata={"problems": len(problems), "clusters": st["clusters"],
                              "first_problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems) or "none")},
                )
            ],
        )

    return dedup_keys


# -- exclusion_masks -----------------------------------------------------------------------------
def _read_contaminated(storage) -> "pa.Table | None":
    if not storage.exists(layout.CONTAMINATED_DOCS):
        return None
    t = read_parquet(storage, layout.CONTAMINATED_DOCS)
    if "doc_id" not in t.column_names:
        raise lib.DedupInputError(f"{storage.uri(layout.CONTAMINATED_DOCS)}: missing column 'doc_id'")
    return t


def _docs_meta(paths: dict[str, str]) -> pa.Table:
    cols = ["doc_id", "source", "n_bytes", "est_tokens"]
    parts = []
    for name in sorted(paths):
        t = pq.read_table(paths[name], columns=cols)
        for c in ("n_bytes", "est_tokens"):
            if t.column(c).null_count:
                raise lib.DedupInputError(f"{paths[name]}: field {c!r} has nulls (source {name})")
        parts.append(t.cast(pa.schema([("doc_id", pa.string()), ("source", pa.string()),
                                       ("n_bytes", pa.int64()), ("est_tokens", pa.int64())])))
    return pa.concat_tables(parts)


def minimum_tokens(spec: MixSpec, source: str) -> int:
    """Kept tokens a source needs: its unique budget on the train side after the validation share.

    The split reserves val_fraction of the kept documents, so kept x (1 - val_fraction) must cover
    the unique budget: kept >= ceil(unique_budget / (1 - val_fraction)) (the raw stage's minimum).
    """
    return int(np.ceil(spec.unique_budget(source) / (1 - spec.split.val_fraction)))


def _exclusion_masks(spec: MixSpec) -> dg.AssetsDefinition:
    @dg.asset(
        key=EXCLUSION_MASKS,
        group_name=GROUP,
        deps=[DEDUP_KEYS, CONTAMINATION_REPORT],
        kinds={"parquet"},
        owners=spec.owners,
        code_version=code_version(lib, spec.audit.mask_contaminated, spec.split.val_fraction,
                                  {s.name: s.share for s in spec.sources}, spec.target_tokens),
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
    def exclusion_masks(context: dg.AssetExecutionContext, mix: MixResource) -> dg.MaterializeResult:
        """One row per excluded document with its reasons (exact_dup, near_dup, contaminated, ...)."""
        spec_now, storage = mix.spec, mix.storage
        # contamination_report is an input whenever it exists, and required when contaminated docs are masked
        upstream = ["dedup_keys", *(raw_name(s.name) for s in spec_now.sources)]
        if spec_now.audit.mask_contaminated or storage.exists(layout.CONTAMINATED_DOCS):
            upstream.append("contamination_report")
        inputs = verified_inputs(storage, "exclusion_masks", upstream)
        keys = read_parquet(storage, layout.DEDUP_KEYS)
        contaminated = _read_contaminated(storage)
        if spec_now.audit.mask_contaminated and contaminated is None:
            raise FileNotFoundError(
                f"{storage.uri(layout.CONTAMINATED_DOCS)}: not found; audit.mask_contaminated is on, so "
                "contamination_report must be materialised first"
            )
        contaminated_ids = set(contaminated.column("doc_id").to_pylist()) if contaminated is not None else set()
        table = lib.exclusion_table(keys, contaminated if spec_now.audit.mask_contaminated else None)
        write_parquet(storage, layout.EXCLUSION_MASKS, table)

        paths = raw_paths(spec_now, storage)
        meta = _docs_meta(paths)
        names = [s.name for s in spec_now.sources]
        comp = lib.composition(meta, set(table.column("doc_id").to_pylist()), names)
        storage.write_text(layout.COMPOSITION, json.dumps(comp, indent=1, sort_keys=True))
        lin = recorded(storage, "exclusion_masks", [layout.EXCLUSION_MASKS, layout.COMPOSITION], inputs)

        # Read the rejects: kill rates per stage, samples beside their kept member, contaminated ids only.
        n = max(keys.num_rows, 1)
        reasons = table.column("reasons").to_pylist()
        per_stage = {r: sum(1 for rs in reasons if r in rs) for r in ("exact_dup", "near_dup", "contaminated")}
        samples = lib.reject_samples(keys, contaminated_ids, spec_now.dedup.samples_per_reason)
        wanted = {x for pairs in samples.values() for p in pairs for x in p[:2]}
        assert not wanted & contaminated_ids  # contaminated text is never read into metadata
        snip = lib.snippets(paths, wanted)
        sample_md = []
        for reason, pairs in samples.items():
            rows = [[p[0], p[1], f"{p[2]:.3f}", _cell(snip.get(p[0], "")), _cell(snip.get(p[1], ""))] for p in pairs]
            sample_md.append(f"**{reason}** ({per_stage[reason]:,} excluded)\n\n"
                             + md_table(["excluded", "kept", "Jaccard", "excluded text", "kept text"], rows))
        cont_ids = sorted(contaminated_ids)
        cont_md = (f"**contaminated** ({len(cont_ids):,} documents; ids only, text is never shown)\n\n"
                   + (", ".join(cont_ids[:50]) + (" ..." if len(cont_ids) > 50 else "") if cont_ids else "none"))

        comp_cols = ["source", "docs_before", "docs_after", "bytes_before", "bytes_after",
                     "tokens_before", "tokens_after", "share_before", "share_after", "lost_token_share"]
        comp_table = dg.MetadataValue.table(
            records=[dg.TableRecord({c: (round(a[c], 4) if isinstance(a[c], float) else a[c]) for c in comp_cols})
                     for a in comp],
            schema=dg.TableSchema(columns=[
                dg.TableColumn(c, "string" if c == "source" else ("float" if "share" in c else "int"))
                for c in comp_cols
            ]),
        )
        vanished = [a["source"] for a in comp if a["docs_after"] == 0]
        short = {a["source"]: (a["tokens_after"], minimum_tokens(spec_now, a["source"]))
                 for a in comp if a["source"] in names and a["tokens_after"] < minimum_tokens(spec_now, a["source"])}
        lossy = {a["source"]: a["lost_token_share"] for a in comp if a["lost_token_share"] > spec_now.dedup.max_loss_share_warn}
        checks = [
            dg.AssetCheckResult(
                check_name=NO_SOURCE_VANISHED, passed=not vanished,
                metadata={"vanished": ", ".join(vanished) or "none",
                          **{f"docs_after_{a['source']}": a["docs_after"] for a in comp}},
                description=f"sources with no document left: {vanished}" if vanished else "every source kept documents",
            ),
            dg.AssetCheckResult(
                check_name=SOURCE_BUDGETS_MET, passed=not short,
                metadata={**{f"tokens_after_{a['source']}": a["tokens_after"] for a in comp},
                          **{f"minimum_tokens_{s}": minimum_tokens(spec_now, s) for s in names}},
                description=("below budget: " + ", ".join(f"{s} keeps {k:,} < {m:,}" for s, (k, m) in short.items()))
                if short else "every source meets ceil(unique_budget / (1 - val_fraction))",
            ),
            dg.AssetCheckResult(
                check_name=SOURCE_LOSS_WITHIN_LIMIT, passed=not lossy, severity=dg.AssetCheckSeverity.WARN,
                metadata={"limit": spec_now.dedup.max_loss_share_warn,
                          **{f"lost_token_share_{a['source']}": round(a["lost_token_share"], 4) for a in comp}},
                description=("over the limit: " + ", ".join(f"{s} {v:.1%}" for s, v in lossy.items()))
                if lossy else "no source lost more than the limit",
            ),
        ]
        return with_lineage(
            {
                "dagster/row_count": table.num_rows,
                "path": dg.MetadataValue.path(storage.uri(layout.EXCLUSION_MASKS)),
                "documents_before": keys.num_rows,
                "excluded": table.num_rows,
                **{f"excluded_{r}": c for r, c in per_stage.items()},
                **{f"kill_rate_{r}": c / n for r, c in per_stage.items()},
                "kill_rate_total": table.num_rows / n,
                "mask_contaminated": spec_now.audit.mask_contaminated,
                "composition": comp_table,
                "composition_chart": dg.MetadataValue.md(charts.composition_md(
                    {a["source"]: a["tokens_before"] for a in comp}, {a["source"]: a["tokens_after"] for a in comp},
                    "estimated tokens per source, before and after the masks")),
                "composition_md": dg.MetadataValue.md(md_table(
                    comp_cols, [[f"{a[c]:.2%}" if "share" in c else (f"{a[c]:,}" if isinstance(a[c], int) else a[c])
                                 for c in comp_cols] for a in comp])),
                "rejects": dg.MetadataValue.md("\n\n".join(sample_md + [cont_md])),
            },
            lin,
            check_results=checks,
        )

    return exclusion_masks
