"""Contamination audit: eval registry -> contamination report -> zero overlap after the masks.

Counts and ids only: no item text, matched n-gram or document text goes into any file, metadata
value, log line or exception raised here; `audit_artifact_scrubbed` proves it for files and
metadata. The logic is in `lib/evals.py` and `lib/contamination.py`.
"""


import hashlib
import io
import json
from collections import deque
from typing import Iterable, Iterator

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.assets.common import code_version, raw_name, recorded, verified_inputs, with_lineage
from mix_assets.config import HubDataset, MixSpec
from mix_assets.lib import contamination as ct
from mix_assets.lib import charts, demo_corpus, evals, layout
from mix_assets.lib.evals import load_task_items

GROUP = "audit"
RESOURCE_KEY = "mix"  # MixResource: .spec, .storage
DENOMINATORS_NONEMPTY = "denominators_nonempty"
AUDIT_ARTIFACT_SCRUBBED = "audit_artifact_scrubbed"
ZERO_EVAL_OVERLAP = "zero_eval_overlap"
EVAL_REGISTRY_KEY = dg.AssetKey("eval_registry")
CONTAMINATION_REPORT_KEY = dg.AssetKey("contamination_report")
EXCLUSION_MASKS_KEY = dg.AssetKey("exclusion_masks")
_SCAN_BATCH_ROWS = 1024


def source_rate_check_name(source: str) -> str:
    return f"contamination_rate_ok_{source}"


def _storage(context):
    st = getattr(context.resources, RESOURCE_KEY).storage
    return st() if callable(st) else st


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _load_npy(storage, key: str) -> np.ndarray:
    return np.load(storage.local_path(key), allow_pickle=False)


def _dataset_id(ds) -> str:
    if isinstance(ds, HubDataset):
        return f"hub:{ds.repo_id}@{ds.revision}" + (f"/{ds.config_name}" if ds.config_name else "")
    return f"local:{ds.path}"


def _empty_rows(n: int) -> dict:
    """{"empty_rows": n} when rows without audited text were read; absent otherwise, so the files of
    a registry without such rows stay byte-identical to those written before the count existed."""
    return {"empty_rows": n} if n else {}


def load_registry(storage) -> tuple[ct.Registry, dict]:
    """The registry written by `eval_registry` (hashes + denominators)."""
    meta = json.loads(storage.read_text(layout.EVAL_REGISTRY))
    per = {}
    for task in meta["tasks"]:
        per[task] = ct.TaskNgrams(
            hashes=_load_npy(storage, layout.EVAL_NGRAMS.format(task=task)),
            short=_load_npy(storage, layout.EVAL_SHORT_ITEMS.format(task=task)).reshape(-1, 3),
            items=0, ngrams=0, short_items=0, short_items_unmatched=0, empty_items=0,
        )
    reg = ct.Registry.build(per, n=meta["ngram"], short_min=meta["short_item_min_words"])
    return reg, meta


def _doc_batches(storage, source: str, skip: set[str] | None = None) -> Iterator[tuple[list, pa.Array]]:
    pf = pq.ParquetFile(storage.local_path(layout.RAW_DOCS.format(source=source)))
    for b in pf.iter_batches(batch_size=_SCAN_BATCH_ROWS, columns=["doc_id", "text"]):
        ids = b.column(0).to_pylist()
        text = b.column(1)
        if skip:
            keep = [i for i, d in enumerate(ids) if d not in skip]
            if len(keep) < len(ids):
                ids = [ids[i] for i in keep]
                text = text.take(pa.array(keep, pa.int64()))
        if ids:
            yield ids, text


def scan_sources(storage, reg: ct.Registry, sources: Iterable[str], threads: int, masked=None) -> ct.Tally:
    """Scan every source's documents (minus `masked` doc ids) against the registry."""
    tally = ct.Tally(tasks=reg.tasks)
    for s in sources:
        tally.add(s, [], np.zeros((0, len(reg.tasks)), np.int64))  # a source with no docs still reports
        pending: deque = deque()  # ids of the batches in flight, in order

        def texts(s=s, pending=pending):
            for ids, text in _doc_batches(storage, s, masked):
                pending.append(ids)
                yield text

        for counts in reg.scan_batches(texts(), threads=threads):
            tally.add(s, pending.popleft(), counts)
    return tally


def _table(rows: list[dict]) -> dg.MetadataValue:
    cols = list(rows[0]) if rows else ["source", "task"]
    types = {c: ("int" if rows and isinstance(rows[0][c], int) else "string") for c in cols}
    return dg.MetadataValue.table(
        records=[dg.TableRecord(r) for r in rows],
        schema=dg.TableSchema(columns=[dg.TableColumn(c, types[c]) for c in cols]),
    )


def metadata_strings(md: dict) -> list[tuple[str, str]]:
    """(key, text) for every string a metadata dict could show, table cells included."""
    out = []
    for k, v in md.items():
        out.append((k, str(k)))
        raw = getattr(v, "value", v)
        if isinstance(v, dg.TableMetadataValue):
            raw = [r.data for r in v.records]
        elif isinstance(v, dg.TableSchemaMetadataValue):
            raw = [c.name for c in v.schema.columns]
        try:
            strings = list(ct.json_strings(json.loads(json.dumps(raw, default=str))))
        except (TypeError, ValueError):
            strings = [str(raw)]
        out.extend((k, s) for s in strings)
    return out


def build_audit_assets(spec: MixSpec) -> list:
    """eval_registry, contamination_report (+ their checks) and zero_eval_overlap on exclusion_masks."""
    audit = spec.audit
    raw_keys = [dg.AssetKey(["raw", s.name]) for s in spec.sources]
    sources = [s.name for s in spec.sources]
    version = code_version(ct, evals, audit.model_dump_json())

    @dg.asset(
        key=EVAL_REGISTRY_KEY,
        group_name=GROUP,
        kinds={"json", "numpy"},
        owners=spec.owners,
        code_version=version,
        required_resource_keys={RESOURCE_KEY},
        check_specs=[
            dg.AssetCheckSpec(
                DENOMINATORS_NONEMPTY,
                asset=EVAL_REGISTRY_KEY,
                blocking=True,
                description="Every eval task read at least its min_rows rows and yielded n-grams.",
            )
        ],
    )
    def eval_registry(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        """Hashed 13-gram reference of every eval task's non-test splits, with its denominators."""
        storage = _storage(context)
        demo_corpus.ensure_for_spec(spec)  # the embedded demo's eval task is generated with its corpus
        tasks_meta, scrub = {}, []
        for task in audit.tasks:
            items = load_task_items(task, spec.base_dir)
            tn = ct.task_ngrams(items.items, audit.ngram, audit.short_item_min_words)
            scrub.append(ct.scrub_ngrams(items.items, audit.scrub_words))
            blob = _npy(tn.hashes)
            storage.write_bytes(layout.EVAL_NGRAMS.format(task=task.name), blob)
            storage.write_bytes(layout.EVAL_SHORT_ITEMS.format(task=task.name), _npy(tn.short))
            tasks_meta[task.name] = {
                "dataset": _dataset_id(task.dataset),
                "scored_split": task.scored_split,
                "audit_splits": list(task.audit_splits),
                "fields": list(task.fields),
                "min_rows": task.min_rows,
                "rows": items.rows,
                "rows_per_split": items.rows_per_split,
                **_empty_rows(items.empty_rows),
                "strings": items.strings,
                "empty_fields": items.empty_fields,
                "items": tn.items,
                "ngrams": tn.ngrams,
                "short_items": tn.short_items,
                "short_items_unmatched": tn.short_items_unmatched,
                "empty_items": tn.empty_items,
                "ngrams_sha256": hashlib.sha256(blob).hexdigest(),
            }
            context.log.info(
                f"eval task {task.name}: {items.rows} rows (+{items.empty_rows} without audited text), "
                f"{items.strings} strings, {tn.items} items, "
                f"{tn.ngrams} n-grams, {tn.short_items} short items (+{tn.short_items_unmatched} too short)"
            )
        scrub_all = ct._sorted_unique(np.concatenate(scrub)) if scrub else np.zeros(0, np.uint64)
        storage.write_bytes(layout.EVAL_SCRUB_NGRAMS, _npy(scrub_all))
        registry = {
            "format": ct.REGISTRY_FORMAT,
            "ngram": audit.ngram,
            "short_item_min_words": audit.short_item_min_words,
            "scrub_words": audit.scrub_words,
            "short_item_rule": (
                f"an item with {audit.short_item_min_words}..{audit.ngram - 1} words is one n-gram over all "
                f"its words; fewer words: counted in short_items_unmatched, not matched"
            ),
            "tasks": tasks_meta,
        }
        storage.write_text(layout.EVAL_REGISTRY, json.dumps(registry, indent=1, sort_keys=True))
        written = [layout.EVAL_REGISTRY, layout.EVAL_SCRUB_NGRAMS]
        for name in tasks_meta:
            written += [layout.EVAL_NGRAMS.format(task=name), layout.EVAL_SHORT_ITEMS.format(task=name)]
        lin = recorded(storage, "eval_registry", written, {})

        rows = [
            {
                "task": name,
                "rows": m["rows"],
                "empty_rows": m.get("empty_rows", 0),
                "min_rows": m["min_rows"],
                "strings": m["strings"],
                "items": m["items"],
                "ngrams": m["ngrams"],
                "short_items": m["short_items"],
                "short_items_unmatched": m["short_items_unmatched"],
            }
            for name, m in tasks_meta.items()
        ]
        bad = [r["task"] for r in rows if r["rows"] < r["min_rows"] or r["ngrams"] == 0]
        passed = bool(rows) and not bad
        check_md = {"denominators": _table(rows), "tasks": len(rows)}
        for r in rows:
            check_md[f"rows/{r['task']}"] = r["rows"]
            check_md[f"min_rows/{r['task']}"] = r["min_rows"]
            check_md[f"ngrams/{r['task']}"] = r["ngrams"]
        if not rows:
            desc = "the eval registry is empty: an audit against no tasks proves nothing"
        elif bad:
            desc = f"tasks below their minimum rows or without n-grams: {', '.join(bad)}"
        else:
            desc = f"all {len(rows)} tasks have rows >= min_rows and n-grams"
        return with_lineage(
            {
                "tasks": len(rows),
                "rows_total": sum(r["rows"] for r in rows),
                "ngrams_total": sum(r["ngrams"] for r in rows),
                "denominators": _table(rows),
                "registry_path": dg.MetadataValue.path(storage.uri(layout.EVAL_REGISTRY)),
            },
            lin,
            check_results=[
                dg.AssetCheckResult(
                    check_name=DENOMINATORS_NONEMPTY, passed=passed, metadata=check_md, description=desc
                )
            ],
        )

    rate_checks = [
        dg.AssetCheckSpec(
            source_rate_check_name(s),
            asset=CONTAMINATION_REPORT_KEY,
            description=f"Source {s}: share of contaminated documents <= {audit.source_rate_warn:.0%} (WARN).",
        )
        for s in sources
    ]

    @dg.asset(
        key=CONTAMINATION_REPORT_KEY,
        group_name=GROUP,
        kinds={"json", "parquet"},
        owners=spec.owners,
        code_version=version,
        deps=[*raw_keys, EVAL_REGISTRY_KEY],
        required_resource_keys={RESOURCE_KEY},
        check_specs=[
            dg.AssetCheckSpec(
                AUDIT_ARTIFACT_SCRUBBED,
                asset=CONTAMINATION_REPORT_KEY,
                blocking=True,
                description=f"No audit file or metadata value holds {audit.scrub_words}+ consecutive words "
                "of any reference item.",
            ),
            *rate_checks,
        ],
    )
    def contamination_report(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        """Overlap counts per source x task before masks, and the ids of contaminated documents."""
        storage = _storage(context)
        inputs = verified_inputs(storage, "contamination_report", ["eval_registry", *map(raw_name, sources)])
        reg, meta = load_registry(storage)
        tally = scan_sources(storage, reg, sources, audit.threads)
        denominators = {
            t: {k: m[k] for k in ("rows", "empty_rows", "strings", "items", "ngrams", "short_items",
                                  "short_items_unmatched") if k in m}
            for t, m in meta["tasks"].items()
        }
        report = tally.report(audit.ngram, denominators)
        storage.write_text(layout.CONTAMINATION_REPORT, json.dumps(report, indent=1, sort_keys=True))
        hits = sorted(tally.hits, key=lambda h: (h[1], h[0]))
        table = pa.table(
            {
                "doc_id": pa.array([h[0] for h in hits], pa.string()),
                "source": pa.array([h[1] for h in hits], pa.string()),
                "tasks": pa.array([h[2] for h in hits], pa.list_(pa.string())),
                "overlap_ngrams": pa.array([h[3] for h in hits], pa.int64()),
            }
        )
        with storage.writing(layout.CONTAMINATED_DOCS) as tmp:
            pq.write_table(table, tmp)
        lin = recorded(storage, "contamination_report", [layout.CONTAMINATION_REPORT, layout.CONTAMINATED_DOCS],
                       inputs)

        rows = tally.rows()
        for r in rows:
            r["registry_ngrams"] = denominators[r["task"]]["ngrams"]
        metadata = {
            "overlap_total": tally.overlap_total,
            "contaminated_docs": report["contaminated_docs"],
            "docs_scanned": report["docs_scanned"],
            "registry_bytes": reg.nbytes,
            "report": _table(rows),
            "overlap_chart": dg.MetadataValue.md(charts.contamination_md(rows)),
            "report_path": dg.MetadataValue.path(storage.uri(layout.CONTAMINATION_REPORT)),
        }
        for s in sources:
            metadata[f"contaminated_docs/{s}"] = tally.contaminated[s]
        context.log.info(
            f"scanned {report['docs_scanned']} docs: {report['contaminated_docs']} contaminated, "
            f"overlap_total {tally.overlap_total}"
        )

        checks = [_scrub_result(context, storage, metadata, audit.scrub_words)]
        for s in sources:
            share = tally.share(s)
            ok = share <= audit.source_rate_warn
            checks.append(
                dg.AssetCheckResult(
                    check_name=source_rate_check_name(s),
                    passed=ok,
                    severity=dg.AssetCheckSeverity.WARN,
                    description=None if ok else (
                        f"source {s}: {share:.2%} of its documents are contaminated "
                        f"(limit {audit.source_rate_warn:.0%}); look at the source, not only the items"
                    ),
                    metadata={
                        "docs_scanned": tally.docs_scanned[s],
                        "contaminated_docs": tally.contaminated[s],
                        "contaminated_share": float(share),
                        "limit": float(audit.source_rate_warn),
                    },
                )
            )
        return with_lineage(metadata, lin, check_results=checks)

    @dg.asset_check(
        asset=EXCLUSION_MASKS_KEY,
        name=ZERO_EVAL_OVERLAP,
        blocking=True,
        additional_deps=[EVAL_REGISTRY_KEY, *raw_keys],
        required_resource_keys={RESOURCE_KEY},
        description="Re-scan of the KEPT documents (raw minus masked) against the eval registry finds 0 overlap.",
    )
    def zero_eval_overlap(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        storage = _storage(context)
        verified_inputs(storage, ZERO_EVAL_OVERLAP, ["exclusion_masks", "eval_registry", *map(raw_name, sources)])
        reg, meta = load_registry(storage)
        masks = pq.read_table(storage.local_path(layout.EXCLUSION_MASKS), columns=["doc_id"])
        masked = set(masks.column("doc_id").to_pylist())
        tally = scan_sources(storage, reg, sources, audit.threads, masked=masked)
        rows = tally.rows()
        for r in rows:
            r["registry_ngrams"] = meta["tasks"][r["task"]]["ngrams"]
        metadata = {
            "overlap_total_after_masks": tally.overlap_total,
            "contaminated_docs_after_masks": sum(tally.contaminated.values()),
            "kept_docs_scanned": sum(tally.docs_scanned.values()),
            "masked_docs": len(masked),
            "after_masks": _table(rows),
        }
        for s in sources:
            metadata[f"kept_docs/{s}"] = tally.docs_scanned[s]
            metadata[f"overlap_after_masks/{s}"] = int(tally.overlap_ngrams[s].sum())
        bad = [s for s in sources if tally.overlap_ngrams[s].sum()]
        return dg.AssetCheckResult(
            passed=not bad,
            metadata=metadata,
            description=(
                f"kept documents still overlap the eval registry in sources: {', '.join(bad)} "
                f"({tally.overlap_total} n-grams); mask them (audit.mask_contaminated) or drop the source"
                if bad
                else f"0 overlapping n-grams in {sum(tally.docs_scanned.values())} kept documents"
            ),
        )

    return [eval_registry, contamination_report, zero_eval_overlap]


def _scrub_result(context, storage, own_metadata: dict, k: int) -> dg.AssetCheckResult:
    """audit_artifact_scrubbed: every audit file and metadata value, scanned for k-word item runs."""
    scrub = _load_npy(storage, layout.EVAL_SCRUB_NGRAMS)
    leaks: list[str] = []
    files = storage.list("audit/")
    for key in files:
        if ct.leaking_strings(ct.file_strings(storage.local_path(key)), scrub, k):
            leaks.append(key)
    mds = {"contamination_report": own_metadata}
    ev = context.instance.get_latest_materialization_event(EVAL_REGISTRY_KEY)
    if ev is not None and ev.asset_materialization is not None:
        mds["eval_registry"] = dict(ev.asset_materialization.metadata)
    check = dg.AssetCheckKey(EVAL_REGISTRY_KEY, DENOMINATORS_NONEMPTY)
    rec = context.instance.event_log_storage.get_latest_asset_check_execution_by_key([check]).get(check)
    evaluation = getattr(getattr(rec, "event", None), "asset_check_evaluation", None) if rec else None
    if evaluation is not None:
        mds[f"eval_registry:{DENOMINATORS_NONEMPTY}"] = dict(evaluation.metadata)
    n_values = 0
    for where, md in mds.items():
        pairs = metadata_strings(md)
        n_values += len(pairs)
        for i in ct.leaking_strings([s for _, s in pairs], scrub, k):
            leaks.append(f"metadata {where}[{pairs[i][0]}]")
    leaks = sorted(set(leaks))
    return dg.AssetCheckResult(
        check_name=AUDIT_ARTIFACT_SCRUBBED,
        passed=not leaks,
        metadata={"files_scanned": len(files), "metadata_values_scanned": n_values, "leaks": len(leaks)},
        description=(f"{k}+ consecutive item words found in: {', '.join(leaks)}" if leaks else None),
    )
