"""The eval registry on disk and the scans against it: one hashing pass per task, shared by the
in-graph audit (`eval_registry`, `contamination_report`, `zero_eval_overlap`) and the audit of a
published revision (`lib/published_audit.load_reference`). Counts and hashes only, never item text.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import threading
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mix_assets.config import HubDataset, MixSpec
from mix_assets.lib import contamination as ct
from mix_assets.lib import engine, evals, fuzzy, layout, tables
from mix_assets.lib.progress import Progress
from mix_assets.lib.storage import Storage

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


def scrub_hashes(spec: MixSpec) -> np.ndarray:
    """The scrub set alone (every task's `scrub_words`-word runs, hashed): what a rendering of text is masked with."""
    k = spec.audit.scrub_words
    return merged_scrub([ct.scrub_ngrams(evals.load_task_items(t, spec.base_dir).items, k) for t in spec.audit.tasks])


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


# -- the scan as a map stage (lib/engine.py) -------------------------------------------------------
@dataclass(frozen=True)
class RegistryLocation:
    """Where a map task loads the registry from: the storage root and eval_registry's files, each with
    its sha256 (the key of the per-process cache). Small and picklable; the arrays are never shipped."""

    root: str
    s3_endpoint_url: str | None
    cache_dir: str | None
    files: tuple[tuple[str, str], ...]  # (storage key, sha256), registry JSON first

    @classmethod
    def of(cls, storage) -> "RegistryLocation":
        meta = json.loads(storage.read_text(layout.EVAL_REGISTRY))
        keys = [layout.EVAL_REGISTRY]
        for task in meta["tasks"]:
            keys += [layout.EVAL_NGRAMS.format(task=task), layout.EVAL_SHORT_ITEMS.format(task=task)]
        return cls.at(storage, keys)

    @classmethod
    def at(cls, storage, keys: Iterable[str]) -> "RegistryLocation":
        return cls(storage.root, storage.s3_endpoint_url, storage.cache_dir,
                   tuple((k, storage.sha256(k)) for k in keys))


_REGISTRY_LOCK = threading.Lock()
_REGISTRY_CACHE: dict[tuple, object] = {}  # per loader, the last location's value (a Ray worker's too)


def _loaded(loc: RegistryLocation, load):
    """`load(storage)` of the files at `loc`, once per process and loader, reused by every later task."""
    with _REGISTRY_LOCK:
        got = _REGISTRY_CACHE.get((load, loc))
        if got is None:
            for key in [k for k in _REGISTRY_CACHE if k[0] is load]:
                del _REGISTRY_CACHE[key]
            storage = Storage(root=loc.root, s3_endpoint_url=loc.s3_endpoint_url, cache_dir=loc.cache_dir)
            got = _REGISTRY_CACHE[(load, loc)] = load(storage)
        return got


def _registry_only(storage) -> ct.Registry:
    return load_registry(storage)[0]


def registry_at(loc: RegistryLocation) -> ct.Registry:
    """The registry at `loc`, loaded once per process and reused by every later task."""
    return _loaded(loc, _registry_only)


@dataclass
class ScannedChunk:
    """Per-document overlap counts of one row range (no text)."""

    doc_ids: list
    counts: np.ndarray  # int64 (n_docs, n_tasks)
    text_bytes: int


def scan_chunk(rows: engine.RowRange, registry: RegistryLocation, threads: int = 1) -> ScannedChunk:
    """The map work of the scan: read the rows, count each document's n-grams in the registry (pure)."""
    reg = registry_at(registry)
    t = engine.read_rows(rows, ["doc_id", "text"])
    text = t.column("text").combine_chunks() if t.num_rows else pa.array([], pa.string())
    batches = [text.slice(i, SCAN_BATCH_ROWS) for i in range(0, len(text), SCAN_BATCH_ROWS)]
    counts = list(reg.scan_batches(batches, threads=threads))
    return ScannedChunk(t.column("doc_id").to_pylist(),
                        np.concatenate(counts) if counts else np.zeros((0, len(reg.tasks)), np.int64),
                        int(pc.sum(pc.binary_length(text)).as_py() or 0))


def scan_sources(storage, sources: Iterable[str], eng: engine.Engine = engine.Engine(), threads: int = 2,
                 log=None, label: str = "contamination scan") -> ct.Tally:
    """Scan every source's documents against the registry.

    Map: `scan_chunk` over `eng.chunk_rows` row ranges on `eng` (in process or Ray tasks); gathered in
    chunk order into one Tally, so the counts and hits do not depend on the engine or the chunk size."""
    loc = RegistryLocation.of(storage)
    reg = registry_at(loc)  # loaded here once: the in-process engine's tasks reuse it
    inner = 1 if eng.kind == "ray" or eng.num_cpus > 1 else threads
    tally = ct.Tally(tasks=reg.tasks)
    sources = list(sources)
    for s in sources:
        tally.add(s, [], np.zeros((0, len(reg.tasks)), np.int64))  # a source with no docs still reports
    fn = functools.partial(scan_chunk, registry=loc, threads=inner)
    for s, got in _map_sources(storage, sources, eng, fn, log, label,
                               lambda: f"{sum(tally.contaminated.values()):,} contaminated"):
        tally.add(s, got.doc_ids, got.counts)
    return tally


def _map_sources(storage, sources: list[str], eng: engine.Engine, fn, log, label: str, summary) -> Iterator:
    """(source, fn(chunk)) for every `eng.chunk_rows` row range of every source's raw documents, in order,
    on `eng`; progress lines count the results' doc_ids and text_bytes, the last line adds `summary()`."""
    chunks = [(s, rng) for s in sources
              for rng in tables.row_ranges(storage, layout.RAW_DOCS.format(source=s), eng.chunk_rows)]
    total = sum(r.stop - r.start for _, r in chunks)
    prog = Progress(log, label, total_docs=total) if log else None
    for (s, _), got in zip(chunks, engine.map_chunks(fn, [r for _, r in chunks], eng)):
        if prog:
            prog.update(docs=len(got.doc_ids), bytes=got.text_bytes)
        yield s, got
    if prog:
        prog.done(f"{summary()} of {total:,}")


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


def write_contamination_report(storage, spec: MixSpec, eng: engine.Engine = engine.Engine(),
                               log=None) -> tuple[Scan, dict]:
    """Scan every source on `eng`, write the report JSON and the contaminated doc ids; (scan, report)."""
    reg, meta = load_registry(storage)
    tally = scan_sources(storage, [s.name for s in spec.sources], eng, spec.audit.threads, log=log,
                         label="contamination_report")
    denominators = {t: {k: m[k] for k in REPORT_DENOMINATORS if k in m} for t, m in meta["tasks"].items()}
    report = tally.report(spec.audit.ngram, denominators)
    storage.write_text(layout.CONTAMINATION_REPORT, json.dumps(report, indent=1, sort_keys=True))
    hits = sorted(tally.hits, key=lambda h: (h[1], h[0]))
    table = pa.table({
        "doc_id": pa.array([h[0] for h in hits], pa.string()),
        "source": pa.array([h[1] for h in hits], pa.string()),
        "tasks": pa.array([h[2] for h in hits], pa.list_(pa.string())),
        "overlap_ngrams": pa.array([h[3] for h in hits], pa.int64()),
        "task_overlap_ngrams": pa.array([h[4] for h in hits], pa.list_(pa.int64())),  # aligned with tasks
    })
    with storage.writing(layout.CONTAMINATED_DOCS) as tmp:
        pq.write_table(table, tmp)
    ngrams = {t: d["ngrams"] for t, d in denominators.items()}
    return Scan(tally, ngrams, reg.nbytes, contaminated=table), report


class AuditInputError(ValueError):
    """contamination_report's outputs cannot answer for the current mix (the message names file and field)."""


def kept_overlap(storage, spec: MixSpec) -> Scan:
    """The overlap the exclusion masks keep, from contamination_report's outputs (no re-scan).

    The report lists every document with >= 1 hit, with its per-task counts (`contaminated_docs`);
    lineage (checked by the caller) proves it was computed from the current raw sources and eval
    registry. A kept document overlaps iff it is in that list and its doc_id is not masked."""
    meta = json.loads(storage.read_text(layout.EVAL_REGISTRY))
    report = json.loads(storage.read_text(layout.CONTAMINATION_REPORT))
    names = [s.name for s in spec.sources]
    missing = [s for s in names if s not in report["sources"]]
    if missing:
        raise AuditInputError(f"{storage.uri(layout.CONTAMINATION_REPORT)}: sources {missing} were not scanned; "
                              "re-materialise contamination_report")
    masks = tables.read_parquet(storage, layout.EXCLUSION_MASKS)
    for col in ("doc_id", "source"):
        if col not in masks.column_names:
            raise AuditInputError(f"{storage.uri(layout.EXCLUSION_MASKS)}: missing column {col!r}")
    masked = dict(zip(masks.column("doc_id").to_pylist(), masks.column("source").to_pylist()))
    hits = tables.read_parquet(storage, layout.CONTAMINATED_DOCS)
    if "task_overlap_ngrams" not in hits.column_names:
        raise AuditInputError(f"{storage.uri(layout.CONTAMINATED_DOCS)}: missing column 'task_overlap_ngrams' "
                              "(written before the per-task counts); re-materialise contamination_report")
    tasks = list(meta["tasks"])
    col = {t: i for i, t in enumerate(tasks)}
    tally = ct.Tally(tasks=tasks)
    kept: dict[str, tuple[list, list]] = {s: ([], []) for s in names}
    for r in hits.to_pylist():
        if r["doc_id"] not in masked and r["source"] in kept:
            row = np.zeros(len(tasks), np.int64)
            row[[col[t] for t in r["tasks"]]] = r["task_overlap_ngrams"]
            kept[r["source"]][0].append(r["doc_id"])
            kept[r["source"]][1].append(row)
    n_masked = {s: 0 for s in names}
    for s in masked.values():
        n_masked[s] = n_masked.get(s, 0) + 1
    for s, (ids, rows) in kept.items():
        tally.add(s, ids, np.array(rows, np.int64).reshape(len(ids), len(tasks)))
        tally.docs_scanned[s] = report["sources"][s]["docs_scanned"] - n_masked[s]  # every kept doc, not only hits
    return Scan(tally, {t: m["ngrams"] for t, m in meta["tasks"].items()}, 0, len(masked))


# -- the fuzzy advisory (lib/fuzzy.py) --------------------------------------------------------------


def fuzzy_params(spec: MixSpec) -> fuzzy.Params:
    f = spec.audit.fuzzy
    return fuzzy.Params(shingle=f.shingle, num_perm=f.num_perm, threshold=f.threshold,
                        min_words=spec.audit.short_item_min_words)


def write_fuzzy_index(storage, spec: MixSpec) -> list[str]:
    """Index every task's items (the registry's loader: test splits refused); the storage keys written."""
    items = {t.name: evals.load_task_items(t, spec.base_dir).items for t in spec.audit.tasks}
    index = fuzzy.build_index(items, fuzzy_params(spec))
    keys = []
    for name, a in index.arrays().items():
        keys.append(layout.FUZZY_INDEX.format(name=name))
        storage.write_bytes(keys[-1], npy_bytes(a))
    storage.write_text(layout.FUZZY_INDEX_META, fuzzy.dumps(index.meta()))
    return [layout.FUZZY_INDEX_META, *keys]


def load_fuzzy_index(storage) -> fuzzy.Index:
    meta = json.loads(storage.read_text(layout.FUZZY_INDEX_META))
    return fuzzy.Index.from_files(meta, {n: load_npy(storage, layout.FUZZY_INDEX.format(name=n))
                                         for n in fuzzy.INDEX_ARRAYS})


@dataclass
class FuzzyChunk:
    """Verified fuzzy matches of one row range (no text)."""

    doc_ids: list
    matches: fuzzy.Matches
    text_bytes: int


def fuzzy_chunk(rows: engine.RowRange, index: RegistryLocation) -> FuzzyChunk:
    """The map work of the fuzzy scan: read the rows, match each batch against the index (pure)."""
    idx = _loaded(index, load_fuzzy_index)
    t = engine.read_rows(rows, ["doc_id", "text"])
    text = t.column("text").combine_chunks() if t.num_rows else pa.array([], pa.string())
    parts = []
    for i in range(0, len(text), SCAN_BATCH_ROWS):
        m = fuzzy.scan_texts(idx, text.slice(i, SCAN_BATCH_ROWS))
        parts.append(fuzzy.Matches(m.doc + i, m.item, m.jaccard))
    m = fuzzy.Matches(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("doc", "item", "jaccard"))) \
        if parts else fuzzy.Matches.empty()
    return FuzzyChunk(t.column("doc_id").to_pylist(), m, int(pc.sum(pc.binary_length(text)).as_py() or 0))


@dataclass
class FuzzyWritten:
    report: dict
    docs: pa.Table
    files: list[str]  # the index files, the report, the matched doc ids


def write_fuzzy_report(storage, spec: MixSpec, eng: engine.Engine = engine.Engine(), log=None) -> FuzzyWritten:
    """Index the items, scan every source on `eng`, write the report JSON and the matched doc ids.

    `exact_hit` / `fuzzy_only_docs` compare with contamination_report's contaminated doc ids."""
    files = write_fuzzy_index(storage, spec)
    loc = RegistryLocation.at(storage, files)
    index = _loaded(loc, load_fuzzy_index)
    exact = set(tables.read_parquet(storage, layout.CONTAMINATED_DOCS).column("doc_id").to_pylist())
    tally = fuzzy.Tally(index.tasks)
    sources = [s.name for s in spec.sources]
    for s in sources:
        tally.add(s, [], fuzzy.Matches.empty(), index.item_task)
    fn = functools.partial(fuzzy_chunk, index=loc)
    for s, got in _map_sources(storage, sources, eng, fn, log, "fuzzy contamination",
                               lambda: f"{len(tally.hits):,} near an eval item"):
        tally.add(s, got.doc_ids, got.matches, index.item_task)
    report, docs = tally.report(exact, index.denominators, index.params), tally.table(exact)
    storage.write_text(layout.FUZZY_REPORT, fuzzy.dumps(report))
    with storage.writing(layout.FUZZY_DOCS) as tmp:
        pq.write_table(docs, tmp)
    return FuzzyWritten(report, docs, [*files, layout.FUZZY_REPORT, layout.FUZZY_DOCS])
