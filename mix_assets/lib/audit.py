"""The eval registry on disk and the scans against it: one hashing pass per task, shared by the
in-graph audit (`eval_registry`, `contamination_report`, `zero_eval_overlap`) and the audit of a
published revision (`lib/published_audit.load_reference`). Counts and hashes only, never item text.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.config import HubDataset, MixSpec
from mix_assets.lib import contamination as ct
from mix_assets.lib import evals, layout

SCAN_BATCH_ROWS = 1024


@dataclass
class TaskReference:
    """One eval task's hashed reference and the counts that make a zero meaningful."""

    name: str
    ngrams: ct.TaskNgrams
    scrub: np.ndarray  # hashed scrub_words-word runs of its items
    denominators: dict  # rows, items, n-grams, min_rows ... (what a report prints beside its counts)
    details: dict  # dataset id, fields and the remaining counts the registry file records


def dataset_id(ds) -> str:
    if isinstance(ds, HubDataset):
        return f"hub:{ds.repo_id}@{ds.revision}" + (f"/{ds.config_name}" if ds.config_name else "")
    return f"local:{ds.path}"


def task_references(spec: MixSpec) -> Iterator[TaskReference]:
    """Each task's audit splits hashed (test splits refused by lib/evals); item text dropped after."""
    audit = spec.audit
    for task in audit.tasks:
        items = evals.load_task_items(task, spec.base_dir)
        tn = ct.task_ngrams(items.items, audit.ngram, audit.short_item_min_words)
        denominators = {
            "audit_splits": list(task.audit_splits),
            "scored_split": task.scored_split,
            "rows": items.rows,
            "rows_per_split": dict(items.rows_per_split),
            # absent when 0, so registries without such rows keep the bytes they had before the count
            **({"empty_rows": items.empty_rows} if items.empty_rows else {}),
            "min_rows": task.min_rows,
            "strings": items.strings,
            "items": tn.items,
            "ngrams": tn.ngrams,
            "short_items": tn.short_items,
            "short_items_unmatched": tn.short_items_unmatched,
        }
        details = {"dataset": dataset_id(task.dataset), "fields": list(task.fields),
                   "empty_fields": items.empty_fields, "empty_items": tn.empty_items}
        yield TaskReference(task.name, tn, ct.scrub_ngrams(items.items, audit.scrub_words), denominators, details)


def merged_scrub(scrub: list[np.ndarray]) -> np.ndarray:
    return ct.sorted_unique(np.concatenate(scrub)) if scrub else np.zeros(0, np.uint64)


def npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def load_npy(storage, key: str) -> np.ndarray:
    return np.load(storage.local_path(key), allow_pickle=False)


@dataclass
class RegistryWritten:
    tasks: dict[str, dict]  # task -> the registry file's entry (denominators + details + sha256)
    files: list[str]  # storage keys written, registry JSON first

    def denominator_rows(self) -> list[dict]:
        """One row per task for the UI: the counts a zero is judged by."""
        cols = ("rows", "empty_rows", "min_rows", "strings", "items", "ngrams", "short_items",
                "short_items_unmatched")
        return [{"task": t, **{c: m.get(c, 0) for c in cols}} for t, m in self.tasks.items()]


def write_registry(storage, spec: MixSpec, log=None) -> RegistryWritten:
    """Hash every task and write its n-grams, short items, the merged scrub set and eval_registry.json."""
    audit = spec.audit
    tasks, scrub = {}, []
    for ref in task_references(spec):
        blob = npy_bytes(ref.ngrams.hashes)
        storage.write_bytes(layout.EVAL_NGRAMS.format(task=ref.name), blob)
        storage.write_bytes(layout.EVAL_SHORT_ITEMS.format(task=ref.name), npy_bytes(ref.ngrams.short))
        scrub.append(ref.scrub)
        tasks[ref.name] = {**ref.denominators, **ref.details, "ngrams_sha256": hashlib.sha256(blob).hexdigest()}
        if log:
            d, tn = ref.denominators, ref.ngrams
            log(f"eval task {ref.name}: {d['rows']} rows (+{d.get('empty_rows', 0)} without audited text), "
                f"{d['strings']} strings, {tn.items} items, {tn.ngrams} n-grams, {tn.short_items} short items "
                f"(+{tn.short_items_unmatched} too short)")
    storage.write_bytes(layout.EVAL_SCRUB_NGRAMS, npy_bytes(merged_scrub(scrub)))
    registry = {
        "format": ct.REGISTRY_FORMAT,
        "ngram": audit.ngram,
        "short_item_min_words": audit.short_item_min_words,
        "scrub_words": audit.scrub_words,
        "short_item_rule": (
            f"an item with {audit.short_item_min_words}..{audit.ngram - 1} words is one n-gram over all "
            f"its words; fewer words: counted in short_items_unmatched, not matched"
        ),
        "tasks": tasks,
    }
    storage.write_text(layout.EVAL_REGISTRY, json.dumps(registry, indent=1, sort_keys=True))
    files = [layout.EVAL_REGISTRY, layout.EVAL_SCRUB_NGRAMS]
    for name in tasks:
        files += [layout.EVAL_NGRAMS.format(task=name), layout.EVAL_SHORT_ITEMS.format(task=name)]
    return RegistryWritten(tasks, files)


def load_registry(storage) -> tuple[ct.Registry, dict]:
    """The registry written by `write_registry` (hashes + the registry JSON)."""
    meta = json.loads(storage.read_text(layout.EVAL_REGISTRY))
    per = {}
    for task in meta["tasks"]:
        per[task] = ct.TaskNgrams(
            hashes=load_npy(storage, layout.EVAL_NGRAMS.format(task=task)),
            short=load_npy(storage, layout.EVAL_SHORT_ITEMS.format(task=task)).reshape(-1, 3),
            items=0, ngrams=0, short_items=0, short_items_unmatched=0, empty_items=0,
        )
    reg = ct.Registry.build(per, n=meta["ngram"], short_min=meta["short_item_min_words"])
    return reg, meta


def doc_batches(storage, source: str, skip: set[str] | None = None) -> Iterator[tuple[list, pa.Array]]:
    """(doc ids, texts) of a raw source in batches, minus the `skip` ids."""
    pf = pq.ParquetFile(storage.source(layout.RAW_DOCS.format(source=source)))
    for b in pf.iter_batches(batch_size=SCAN_BATCH_ROWS, columns=["doc_id", "text"]):
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
            for ids, text in doc_batches(storage, s, masked):
                pending.append(ids)
                yield text

        for counts in reg.scan_batches(texts(), threads=threads):
            tally.add(s, pending.popleft(), counts)
    return tally


# -- contamination_report and zero_eval_overlap ---------------------------------------------------


@dataclass
class Scan:
    """A scan of the sources against the registry: counts per source x task, no text."""

    tally: ct.Tally
    registry_ngrams: dict[str, int]  # per task: the denominator printed beside each count
    registry_bytes: int
    masked_docs: int = 0  # documents left out of the scan (the exclusion masks)
    contaminated: pa.Table | None = None  # the contaminated doc ids written (contamination_report only)

    def rows(self) -> list[dict]:
        return [{**r, "registry_ngrams": self.registry_ngrams[r["task"]]} for r in self.tally.rows()]

    def overlapping_sources(self) -> list[str]:
        return [s for s, v in self.tally.overlap_ngrams.items() if v.sum()]


REPORT_DENOMINATORS = ("rows", "empty_rows", "strings", "items", "ngrams", "short_items", "short_items_unmatched")


def write_contamination_report(storage, spec: MixSpec) -> tuple[Scan, dict]:
    """Scan every source, write the report JSON and the contaminated doc ids; (scan, report)."""
    reg, meta = load_registry(storage)
    tally = scan_sources(storage, reg, [s.name for s in spec.sources], spec.audit.threads)
    denominators = {t: {k: m[k] for k in REPORT_DENOMINATORS if k in m} for t, m in meta["tasks"].items()}
    report = tally.report(spec.audit.ngram, denominators)
    storage.write_text(layout.CONTAMINATION_REPORT, json.dumps(report, indent=1, sort_keys=True))
    hits = sorted(tally.hits, key=lambda h: (h[1], h[0]))
    table = pa.table({
        "doc_id": pa.array([h[0] for h in hits], pa.string()),
        "source": pa.array([h[1] for h in hits], pa.string()),
        "tasks": pa.array([h[2] for h in hits], pa.list_(pa.string())),
        "overlap_ngrams": pa.array([h[3] for h in hits], pa.int64()),
    })
    with storage.writing(layout.CONTAMINATED_DOCS) as tmp:
        pq.write_table(table, tmp)
    ngrams = {t: d["ngrams"] for t, d in denominators.items()}
    return Scan(tally, ngrams, reg.nbytes, contaminated=table), report


def scan_kept(storage, spec: MixSpec) -> Scan:
    """Re-scan the documents the exclusion masks keep (raw minus masked) against the registry."""
    reg, meta = load_registry(storage)
    masks = pq.read_table(storage.source(layout.EXCLUSION_MASKS), columns=["doc_id"])
    masked = set(masks.column("doc_id").to_pylist())
    tally = scan_sources(storage, reg, [s.name for s in spec.sources], spec.audit.threads, masked=masked)
    ngrams = {t: m["ngrams"] for t, m in meta["tasks"].items()}
    return Scan(tally, ngrams, reg.nbytes, len(masked))

