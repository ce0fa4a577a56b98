"""The eval registry on disk and the scans against it: one hashing pass per task, shared by the
in-graph audit (`eval_registry`, `contamination_report`, `zero_eval_overlap`) and the audit of a
published revision (`stages/audit/published.load_reference`). Counts and hashes only, never item text.
`spec` is the mix spec (`mix_assets/config.py`), read here (its `audit` section, sources, base_dir), never
imported: a stage imports only its own config section (`stages/audit/config.py`).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import io
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mix_assets.stages.audit import contamination as ct
from mix_assets.stages.dedup import dedup
from mix_assets.core import chunks, engine, imports, layout, lineage, tables
from mix_assets.stages.audit import evals, fuzzy
from mix_assets.stages.dedup import minhash as mh
from mix_assets.stages.dedup import signatures
from mix_assets.core import textkeys as tk
from mix_assets.core.progress import Progress, reused_line
from mix_assets.core.storage import Storage

SCAN_BATCH_ROWS = 1024
# Rows per map task when a source is rescanned in part (the rows its last scan does not hold): a refreshed
# source's new rows are mostly one run at its tail, which at `chunk_rows` rows would be one task on one core.
# Fixed (never from the worker count); the hits and signature files do not depend on how rows are cut.
RESCAN_ROWS = 256


@dataclass
class TaskReference:
    """One eval task's hashed reference and the counts that make a zero meaningful."""

    name: str
    ngrams: ct.TaskNgrams
    scrub: np.ndarray  # hashed scrub_words-word runs of its items
    denominators: dict  # rows, items, n-grams, min_rows ... (what a report prints beside its counts)
    details: dict  # dataset id, fields and the remaining counts the registry file records
    words: tuple | None = None  # the items' word hashes and offsets, when asked for (the fuzzy index's input)


def dataset_id(ds) -> str:
    if ds.kind == "hub":
        return f"hub:{ds.repo_id}@{ds.revision}" + (f"/{ds.config_name}" if ds.config_name else "")
    return f"local:{ds.path}"


def task_references(spec, keep_words: bool = False) -> Iterator[TaskReference]:
    """Each task's audit splits hashed (test splits refused by stages/audit/evals); item text dropped after."""
    for task in spec.audit.tasks:
        yield _reference(spec, task, evals.load_task_items(task, spec.base_dir), keep_words)


def _reference(spec, task, items: evals.TaskItems, keep_words: bool = False,
               words: list | None = None, threads: int | None = None) -> TaskReference:
    """A task's reference from its items (or their `contamination.item_words`, when already computed),
    hashed on `threads` (default audit.threads)."""
    audit = spec.audit
    tn = ct.task_ngrams(items.items, audit.ngram, audit.short_item_min_words, scrub_k=audit.scrub_words,
                        keep_words=keep_words, threads=threads or audit.threads, words=words)
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
    return TaskReference(task.name, tn, tn.scrub, denominators, details, tn.words)


def merged_scrub(scrub: list[np.ndarray]) -> np.ndarray:
    return ct.merged_unique(scrub)  # each task's scrub set is sorted


def scrub_hashes(spec) -> np.ndarray:
    """The scrub set alone (every task's `scrub_words`-word runs, hashed): what a rendering of text is masked with."""
    k = spec.audit.scrub_words
    return merged_scrub([ct.scrub_ngrams(evals.load_task_items(t, spec.base_dir).items, k) for t in spec.audit.tasks])


def scrub_set(storage, spec) -> np.ndarray:
    """`scrub_hashes(spec)`, read from eval_registry's scrub-ngrams.npy when that file is the one its lineage
    record lists and the registry was built for these tasks and `scrub_words` (re-hashing every eval item
    costs a second or more per call, whatever the corpus size); else computed."""
    rec = lineage.read_record(storage, "eval_registry")
    key = layout.EVAL_SCRUB_NGRAMS
    if rec is None or key not in rec["outputs"] or not storage.exists(layout.EVAL_REGISTRY):
        return scrub_hashes(spec)
    meta = json.loads(storage.read_text(layout.EVAL_REGISTRY))
    built_for = {name: (t.get("dataset"), t.get("fields"), t.get("audit_splits")) for name, t in meta["tasks"].items()}
    want = {t.name: (dataset_id(t.dataset), list(t.fields), list(t.audit_splits)) for t in spec.audit.tasks}
    if meta.get("scrub_words") != spec.audit.scrub_words or built_for != want or storage.sha256(key) != rec["outputs"][key]:
        return scrub_hashes(spec)
    return load_npy(storage, key)


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


def fuzzy_enabled(spec) -> bool:
    """The fuzzy advisory runs (and eval_registry writes its index) when enabled and there are tasks."""
    return spec.audit.fuzzy.enabled and bool(spec.audit.tasks)


def write_registry(storage, spec, log=None) -> RegistryWritten:
    """Hash every task and write its n-grams, short items, the merged scrub set and eval_registry.json;
    with the fuzzy advisory on, its item index too (built here, from the items read once, for every
    contamination_report map task to load). This thread parses each task's rows (JSON parsing holds the
    GIL) while a pool thread normalises the previous task's items into word hashes (Arrow and the kernels
    release it); once every task has its words, the index (the largest single job) and each task's
    n-grams are built at the same time on the pool, and this thread writes each task's files as they come."""
    audit = spec.audit
    tasks, scrub, lines = {}, [], []
    with ThreadPoolExecutor(max_workers=audit.threads) as pool:  # the scan-threads knob (default 2)
        loaded = []
        for t in audit.tasks:
            items = evals.load_task_items(t, spec.base_dir)
            # a large task's chunks on `threads` threads too (hellaswag: 40k items)
            loaded.append((t, items, pool.submit(ct.item_words, items.items, threads=audit.threads)))
        words = [(t, items, w.result()) for t, items, w in loaded]
        for _, items, _ in words:
            items.items.clear()  # the text is dropped once hashed
        index = pool.submit(fuzzy.build_index_from_words, {t.name: ct.joined_words(w) for t, _, w in words},
                            fuzzy_params(spec)) if fuzzy_enabled(spec) else None
        refs = [pool.submit(_reference, spec, t, items, words=w, threads=audit.threads) for t, items, w in words]
        for job in refs:
            ref = job.result()
            tasks[ref.name] = _write_task(storage, ref, lines.append)
            scrub.append(ref.scrub)
        index = index.result() if index is not None else None
    if log and lines:  # one message: each Dagster log line is an event-log write (a SQLite commit)
        log("\n".join(lines))
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
    if index is not None:
        files += write_fuzzy_index(storage, index)
    return RegistryWritten(tasks, files)


def _write_task(storage, ref: TaskReference, log=None) -> dict:
    """Write one task's n-grams and short items; its registry entry (denominators, details, sha256)."""
    blob = npy_bytes(ref.ngrams.hashes)
    storage.write_bytes(layout.EVAL_NGRAMS.format(task=ref.name), blob)
    storage.write_bytes(layout.EVAL_SHORT_ITEMS.format(task=ref.name), npy_bytes(ref.ngrams.short))
    if log:
        d, tn = ref.denominators, ref.ngrams
        log(f"eval task {ref.name}: {d['rows']} rows (+{d.get('empty_rows', 0)} without audited text), "
            f"{d['strings']} strings, {tn.items} items, {tn.ngrams} n-grams, {tn.short_items} short items "
            f"(+{tn.short_items_unmatched} too short)")
    return {**ref.denominators, **ref.details, "ngrams_sha256": hashlib.sha256(blob).hexdigest()}


# the fields of a task's eval_registry.json entry that are not its denominators (`_reference`'s details and
# `_write_task`'s ngrams_sha256)
ENTRY_DETAILS = ("dataset", "fields", "empty_fields", "empty_items", "ngrams_sha256")


def entry_denominators(entry: dict) -> dict:
    """A task's `TaskReference.denominators`, read back from its eval_registry.json entry."""
    return {k: v for k, v in entry.items() if k not in ENTRY_DETAILS}


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


# -- the scan as a map stage (core/engine.py) -------------------------------------------------------
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
    """Per-document overlap counts of one row range and, with a fuzzy index, its verified fuzzy matches
    (no text); when asked, the range's dedup signatures from the same normalised words."""

    doc_ids: list
    counts: np.ndarray  # int64 (n_docs, n_tasks)
    text_bytes: int
    fuzzy: fuzzy.Matches | None = None  # doc = row in the range
    fuzzy_seconds: float = 0.0  # spent matching against the fuzzy index (past the shared normalisation)
    signed: dedup.SignedChunk | None = None  # with `sign` (None too when a doc_id or text is null)
    text_keys: list | None = None  # with `keys`: each row's `text_keys` (the per-document reuse file's)


@dataclass(frozen=True)
class Signing:
    """dedup_keys' signature parameters, for a scan that signs its rows too (`dedup.signing_plan`)."""

    num_perm: int
    shingle: int
    seed: int


def _scan_batch(reg: ct.Registry, index: fuzzy.Index | None, perms: tuple | None, texts) -> tuple:
    """(13-gram counts, fuzzy matches or None, seconds of the fuzzy match, dedup signatures or None) of a
    batch, normalised once; `perms`: (a, b, shingle) to sign it too."""
    keys = tk.word_keys(texts)
    h, off = keys.hashes, keys.offsets
    counts = reg.scan_word_hashes(h, off)
    signed = None if perms is None else mh.sign_words(keys, *perms)
    if index is None:
        return counts, None, 0.0, signed
    t0 = time.perf_counter()
    return counts, fuzzy.scan_word_hashes(index, h, off), time.perf_counter() - t0, signed


def scan_chunk(rows: engine.RowRange, registry: RegistryLocation, threads: int = 1,
               fuzzy_index: RegistryLocation | None = None, sign: Signing | None = None,
               keys: bool = False) -> ScannedChunk:
    """The map work of the scan: read the rows, normalise each batch once, count each document's n-grams
    in the registry and, with `fuzzy_index`, match it against the fuzzy advisory's index; with `sign`,
    sign the same words for dedup_keys (`minhash.sign_words`); with `keys`, each text's key (`text_keys`)
    from the same read (pure)."""
    reg = registry_at(registry)
    index = _loaded(fuzzy_index, load_fuzzy_index) if fuzzy_index is not None else None
    t = engine.read_rows(rows, ["doc_id", "text", "n_chars"] if sign else ["doc_id", "text"])
    if sign and dedup.null_field(t, rows):
        sign = None  # dedup_keys signs this source itself and names the bad row
    perms = (*mh.permutations(sign.num_perm, sign.seed), sign.shingle) if sign else None
    text = t.column("text").combine_chunks() if t.num_rows else pa.array([], pa.string())
    starts = range(0, len(text), SCAN_BATCH_ROWS)
    got = list(ct.ordered_map(functools.partial(_scan_batch, reg, index, perms),
                              [text.slice(i, SCAN_BATCH_ROWS) for i in starts], threads))
    counts = [g[0] for g in got]
    out = ScannedChunk(t.column("doc_id").to_pylist(),
                       np.concatenate(counts) if counts else np.zeros((0, len(reg.tasks)), np.int64),
                       int(pc.sum(pc.binary_length(text)).as_py() or 0))
    if sign:
        out.signed = dedup.signed_chunk(t, [g[3] for g in got], sign.num_perm)
    if keys:
        out.text_keys = text_keys(text)
    if index is not None:
        parts = [fuzzy.Matches(m.doc + i, m.item, m.jaccard) for i, (_, m, _, _) in zip(starts, got)]
        out.fuzzy = fuzzy.Matches(*(np.concatenate([getattr(p, f) for p in parts])
                                    for f in ("doc", "item", "jaccard"))) if parts else fuzzy.Matches.empty()
        out.fuzzy_seconds = sum(g[2] for g in got)
    return out


def _scan_task(task: tuple, **kwargs) -> ScannedChunk:
    """`scan_chunk` of a (row range, `Signing` or None, chunk index, text keys wanted) map task."""
    return scan_chunk(task[0], sign=task[1], keys=task[3], **kwargs)


@dataclass
class SourcesScanned:
    tally: ct.Tally
    fuzzy: fuzzy.Tally | None = None  # with a fuzzy index: its verified matches per source
    fuzzy_seconds: float = 0.0  # summed over the map tasks
    signed_sources: list = field(default_factory=list)  # whose dedup signatures this pass wrote
    reused_sources: list = field(default_factory=list)  # whose stored hits were reused (not rescanned)
    resumed_chunks: dict = field(default_factory=dict)  # source -> chunks loaded from a killed run's parts


class _Unsigned(Exception):
    """A chunk of a source being signed came back without signatures (a null doc_id or text)."""


# -- a source's hits: the scan's map output per chunk (a part, core/chunks.py) and per source --------------
HITS_FORMAT = "mix_assets.contamination_hits/1"
HITS_META_KEY = b"mix_assets.contamination_hits"
HITS_DOCS_KEY = b"mix_assets.contamination_hits.docs"  # documents scanned (the file holds only those with a hit)
PARTS_STAGE = "contamination"  # parts/contamination/
HITS_SCHEMA = pa.schema([("doc_id", pa.string()), ("counts", pa.list_(pa.int64())),
                         ("fuzzy_item", pa.list_(pa.int64())), ("fuzzy_jaccard", pa.list_(pa.float64()))])


def hits_key(source: str) -> str:
    return layout.CONTAMINATION_HITS.format(source=source)


def hits_meta(raw_version: str | None, registry: RegistryLocation,
              fuzzy_index: RegistryLocation | None) -> dict:
    """What a source's hits are computed from: its raw data version, the eval registry's files (and the fuzzy
    index's) by sha256 (the n-gram length, short-item rule and fuzzy parameters are in them) and the scan
    code (this module and every project module it reaches)."""
    files = [*registry.files, *(fuzzy_index.files if fuzzy_index is not None else ())]
    return {"format": HITS_FORMAT, "raw": raw_version, "fuzzy": fuzzy_index is not None,
            "registry": hashlib.sha256(json.dumps(files).encode()).hexdigest(),
            "code": imports.source_version(__name__)[:16]}


def hits_table(got: ScannedChunk) -> pa.Table:
    """The documents of a scanned chunk with an exact or fuzzy hit (HITS_SCHEMA, row order); the chunk's
    document count in the schema metadata."""
    m = got.fuzzy if got.fuzzy is not None else fuzzy.Matches.empty()
    order = np.argsort(m.doc, kind="stable")
    fdoc, fitem, fjac = m.doc[order], m.item[order], m.jaccard[order]
    rows = np.flatnonzero(got.counts.any(axis=1) | np.isin(np.arange(len(got.doc_ids)), fdoc))
    lo, hi = np.searchsorted(fdoc, rows), np.searchsorted(fdoc, rows, side="right")
    t = pa.table({"doc_id": pa.array([str(got.doc_ids[i]) for i in rows], pa.string()),
                  "counts": pa.array([got.counts[i].tolist() for i in rows], pa.list_(pa.int64())),
                  "fuzzy_item": pa.array([fitem[a:b].tolist() for a, b in zip(lo, hi)], pa.list_(pa.int64())),
                  "fuzzy_jaccard": pa.array([fjac[a:b].tolist() for a, b in zip(lo, hi)], pa.list_(pa.float64()))},
                 schema=HITS_SCHEMA)
    return t.replace_schema_metadata({HITS_DOCS_KEY: str(len(got.doc_ids)).encode()})


def _hits_docs(t: pa.Table) -> int:
    return int((t.schema.metadata or {})[HITS_DOCS_KEY])


def add_hits(out: SourcesScanned, source: str, t: pa.Table, item_task: np.ndarray | None) -> None:
    """Tally a chunk's or a source's hits (`hits_table`) as the full chunk would have been tallied: the
    documents without a hit add nothing but their count."""
    n, ids = _hits_docs(t), t.column("doc_id").to_pylist()
    k = len(out.tally.tasks)
    counts = np.array(t.column("counts").to_pylist(), np.int64).reshape(len(ids), k)
    out.tally.add(source, ids, counts)
    out.tally.docs_scanned[source] += n - len(ids)
    if out.fuzzy is not None:
        items, jacs = (t.column(c).combine_chunks() for c in ("fuzzy_item", "fuzzy_jaccard"))
        doc = pc.list_parent_indices(items).to_numpy() if len(ids) else np.zeros(0, np.int64)
        flat = pc.list_flatten(items).to_numpy() if len(ids) else np.zeros(0, np.int64)
        jac = pc.list_flatten(jacs).to_numpy() if len(ids) else np.zeros(0)
        out.fuzzy.add(source, ids, fuzzy.Matches(doc.astype(np.int64), flat.astype(np.int64), jac), item_task)
        out.fuzzy.docs_scanned[source] += n - len(ids)


def stored_hits(storage, sources: list[str], meta: dict[str, dict]) -> list[str]:
    """The sources whose stored hits were computed from `meta` (raw version known) over every raw row."""
    out = []
    for s in sources:
        if meta[s]["raw"] is None or not storage.exists(hits_key(s)):
            continue
        md = pq.read_schema(storage.source(hits_key(s))).metadata or {}
        if HITS_META_KEY in md and json.loads(md[HITS_META_KEY]) == meta[s] and HITS_DOCS_KEY in md:
            with engine.open_parquet(tables.file_at(storage, layout.RAW_DOCS.format(source=s))) as f:
                if int(md[HITS_DOCS_KEY]) == f.metadata.num_rows:
                    out.append(s)
    return out


def write_hits(storage, source: str, meta: dict, parts: list[pa.Table]) -> None:
    """A source's hits file: its chunks' hits in row order, with `meta` and the documents scanned."""
    docs = sum(_hits_docs(t) for t in parts)
    schema = HITS_SCHEMA.with_metadata({HITS_META_KEY: json.dumps(meta, sort_keys=True).encode(),
                                        HITS_DOCS_KEY: str(docs).encode()})
    t = pa.concat_tables([p.replace_schema_metadata(None) for p in parts]) if parts else HITS_SCHEMA.empty_table()
    tables.write_parquet(storage, hits_key(source), t.replace_schema_metadata(schema.metadata))


# -- per-document reuse: a changed source rescans only the texts its last scan did not hold ------------------
TEXT_KEYS_SCHEMA = pa.schema([("text_key", pa.binary(16)), ("hit", pa.int32())])


def text_keys_key(source: str) -> str:
    return layout.CONTAMINATION_TEXT_KEYS.format(source=source)


def text_keys(texts: pa.ChunkedArray | pa.Array) -> list:
    """blake2b-128 of each text's UTF-8 bytes (None for a null text: never reused); the bytes read as binary,
    never decoded to str."""
    binary = pa.large_binary() if pa.types.is_large_string(texts.type) else pa.binary()
    return [None if v is None else hashlib.blake2b(v, digest_size=16).digest()
            for v in texts.cast(binary).to_pylist()]


def _without_raw(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k != "raw"}


@dataclass
class Prior:
    """A source's last scan, reusable per document: each text's row in it, each row's hit, the hits, and (when
    this scan signs the source) the signature rows the same scan wrote."""

    rows: dict  # text key -> its first row in the last scan
    hit: np.ndarray  # row of the last scan -> its row in `hits`, -1 without a hit
    hits: pa.Table
    signatures: pa.Table | None


def prior_scan(storage, source: str, meta: dict, sign_meta: dict | None) -> Prior | None:
    """The last scan of `source` when everything but its raw data is what `meta` (hits_meta) and `sign_meta`
    (the signature file this scan writes, None: none) name: the same registry files, fuzzy index, parameters and
    code; its text keys, hits and signature file written by that one scan (the same raw version in each)."""
    kk, hk = text_keys_key(source), hits_key(source)
    if meta["raw"] is None or not storage.exists(kk) or not storage.exists(hk):
        return None
    kmd = pq.read_schema(storage.source(kk)).metadata or {}
    hmd = pq.read_schema(storage.source(hk)).metadata or {}
    if HITS_META_KEY not in kmd or kmd.get(HITS_META_KEY) != hmd.get(HITS_META_KEY) or HITS_DOCS_KEY not in hmd:
        return None
    last = json.loads(kmd[HITS_META_KEY])
    if last.get("raw") is None or _without_raw(last) != _without_raw(meta):
        return None
    keys = tables.read_parquet(storage, kk)
    if keys.num_rows != int(hmd[HITS_DOCS_KEY]):
        return None
    sigs = None
    if sign_meta is not None:
        sk = dedup.signatures_key(source)
        smeta = signatures.stored_meta(storage.source(sk)) if storage.exists(sk) else None
        if not smeta or smeta.get("raw") != last["raw"] or _without_raw(smeta) != _without_raw(sign_meta):
            return None
        sigs = tables.read_parquet(storage, sk)
        if sigs.num_rows != keys.num_rows:
            return None
    rows: dict = {}
    for i, k in enumerate(keys.column("text_key").to_pylist()):
        if k is not None:
            rows.setdefault(k, i)
    return Prior(rows, keys.column("hit").to_numpy(), tables.read_parquet(storage, hk), sigs)


def _todo_ranges(src_rows: np.ndarray, path, chunk_rows: int, endpoint_url=None) -> list[engine.RowRange]:
    """Row ranges (at most `chunk_rows` rows) covering exactly the rows no earlier scan holds (-1)."""
    out = []
    miss = np.flatnonzero(src_rows < 0)
    if not len(miss):
        return out
    cuts = np.flatnonzero(np.diff(miss) != 1) + 1
    for run in np.split(miss, cuts):
        a, b = int(run[0]), int(run[-1]) + 1
        out += [engine.RowRange(path, x, min(x + chunk_rows, b), endpoint_url) for x in range(a, b, chunk_rows)]
    return out


def _cached_hits(prior: Prior, src_rows: np.ndarray, doc_ids: list) -> pa.Table:
    """The hits of rows reused from `prior` (`src_rows`: their rows in it), under the documents' current ids."""
    h = prior.hit[src_rows]
    at = np.flatnonzero(h >= 0)
    t = prior.hits.take(pa.array(h[at], pa.int64())).replace_schema_metadata(None)
    t = t.set_column(0, "doc_id", pa.array([doc_ids[i] for i in at], pa.string()))
    return t.replace_schema_metadata({HITS_DOCS_KEY: str(len(src_rows)).encode()})


def _cached_signatures(prior: Prior, src_rows: np.ndarray, doc_ids: pa.Array, schema: pa.Schema) -> pa.Table:
    t = prior.signatures.take(pa.array(src_rows, pa.int64())).replace_schema_metadata(None)
    return t.set_column(0, "doc_id", doc_ids).cast(schema)


def write_text_keys(storage, source: str, meta: dict, keys: list, hits: list[pa.Table], doc_ids: list) -> None:
    """The per-document keys of a scan of `source` (rows in raw order), each row's hit row, and the scan's meta."""
    at = {}
    for t in hits:
        for d in t.column("doc_id").to_pylist():
            at[d] = len(at)
    hit = np.fromiter((at.get(d, -1) for d in doc_ids), np.int32, len(doc_ids))
    t = pa.table({"text_key": pa.array(keys, pa.binary(16)), "hit": hit}, schema=TEXT_KEYS_SCHEMA)
    tables.write_parquet(storage, text_keys_key(source), t.replace_schema_metadata(
        {HITS_META_KEY: json.dumps(meta, sort_keys=True).encode()}))


def scan_sources(storage, sources: Iterable[str], eng: engine.Engine = engine.Engine(), threads: int = 2,
                 log=None, label: str = "contamination scan", fuzzy_index: RegistryLocation | None = None,
                 sign: tuple[dedup.DedupParams, dict[str, dict]] | None = None,
                 raw_versions: dict[str, str] | None = None) -> SourcesScanned:
    """Scan every source's documents against the registry (and the fuzzy index at `fuzzy_index`).

    Map: `scan_chunk` over `eng.chunk_rows` row ranges on `eng` (in process or Ray tasks); gathered in
    chunk order into one Tally, so the counts and hits do not depend on the engine or the chunk size.
    `sign`: (dedup params, `dedup.signing_plan`): the planned sources' chunks are signed from the same
    words and each such source's signature file written as dedup_keys writes it, streamed.
    `raw_versions` ({source: raw data version}): a source whose stored hits (layout.CONTAMINATION_HITS)
    were computed from its raw version, this registry and this code is not rescanned; the others' chunks
    are kept as parts (core/chunks.py) until their hits file is written, so a killed scan resumes at the
    first chunk it had not finished (a signed chunk's signatures too, as dedup_keys' parts)."""
    loc = RegistryLocation.of(storage)
    reg = registry_at(loc)  # loaded here once: the in-process engine's tasks reuse it
    index = _loaded(fuzzy_index, load_fuzzy_index) if fuzzy_index is not None else None
    item_task = index.item_task if index is not None else None
    inner = 1 if eng.kind == "ray" or eng.num_cpus > 1 else threads
    out = SourcesScanned(ct.Tally(tasks=reg.tasks), fuzzy.Tally(index.tasks) if index is not None else None)
    sources = list(sources)
    for s in sources:
        out.tally.add(s, [], np.zeros((0, len(reg.tasks)), np.int64))  # a source with no docs still reports
        if index is not None:
            out.fuzzy.add(s, [], fuzzy.Matches.empty(), index.item_task)
    meta = {s: hits_meta((raw_versions or {}).get(s), loc, fuzzy_index) for s in sources}
    out.reused_sources = stored_hits(storage, sources, meta)
    for s in out.reused_sources:
        add_hits(out, s, tables.read_parquet(storage, hits_key(s)), item_task)
    if log and out.reused_sources:
        log.info(reused_line(label, "hits", {s: out.tally.docs_scanned[s] for s in out.reused_sources},
                             "raw data, eval registry, audit parameters and scan code unchanged"))
    todo = [s for s in sources if s not in out.reused_sources]
    params, plan = sign or (None, {})
    plan = {s: m for s, m in plan.items() if s in todo}
    signing = {s: Signing(params.num_perm, params.shingle, params.seed) for s in plan}
    # per source still to scan: its documents' text keys and, when its last scan can answer per document, which
    # rows it holds (src_rows: the row in that scan, -1: scanned now)
    current: dict[str, tuple] = {}
    priors: dict[str, tuple] = {}
    work = []
    for s in todo:
        raw = tables.file_at(storage, layout.RAW_DOCS.format(source=s))
        if meta[s]["raw"] is not None:
            prior = prior_scan(storage, s, meta[s], plan.get(s))
            # without a last scan to answer per document, the map tasks key the texts they read (None here)
            t = tables.read_parquet(storage, layout.RAW_DOCS.format(source=s),
                                    columns=["doc_id", "text"] if prior is not None else ["doc_id"])
            current[s] = (text_keys(t.column("text")) if prior is not None else None,
                          t.column("doc_id").combine_chunks().cast(pa.string()))
            if prior is not None:
                src_rows = np.fromiter((-1 if k is None else prior.rows.get(k, -1) for k in current[s][0]),
                                       np.int64, len(current[s][0]))
                priors[s] = (prior, src_rows)
                path = raw.path if isinstance(raw, engine.FileAt) else raw
                url = raw.endpoint_url if isinstance(raw, engine.FileAt) else None
                work += [(s, rng) for rng in _todo_ranges(src_rows, path, min(eng.chunk_rows, RESCAN_ROWS), url)]
                continue
        work += [(s, rng) for rng in tables.row_ranges(storage, layout.RAW_DOCS.format(source=s), eng.chunk_rows)]
    if log and priors:
        log.info(f"{label}: reused per document (same text, eval registry, audit parameters and scan code) "
                 + ", ".join(f"{s} {int((r >= 0).sum()):,} of {len(r):,} documents" for s, (_, r) in sorted(priors.items()))
                 + "; the others scanned")
    store, sig_store = chunks.Parts(storage, PARTS_STAGE), dedup.signature_parts(storage)
    keys, have, resumed = store.keyed(label, work, meta, log)
    out.resumed_chunks.update({s: resumed.get(s, 0) for s in todo})
    sig_keys = [sig_store.key(s, plan[s], rng) if s in plan else None for s, rng in work]
    sig_schema = signatures.schema(params.num_perm, {}).remove_metadata() if plan else None

    def encode(task, got: ScannedChunk) -> pa.Table:
        k = sig_keys[task[2]]
        if k is not None and got.signed is not None:  # before the scan's part: a scan part implies its signatures'
            sig_store.put(k, dedup.signed_table(got.signed, sig_schema))
        return hits_table(got)

    fn = functools.partial(_scan_task, registry=loc, threads=inner, fuzzy_index=fuzzy_index)
    tasks = [(rng, signing.get(s), i, s in current and current[s][0] is None) for i, (s, rng) in enumerate(work)]
    total = sum(r.stop - r.start for (_, r), k in zip(work, keys) if k not in have)
    # a progress line for work done (as before reuse existed when nothing is reused or resumed)
    prog = Progress(log, label, total_docs=total) if log and (total or not (out.reused_sources or have)) else None
    results = zip(tasks, chunks.resume(fn, tasks, keys, eng, store, encode=encode, have=have))
    chunk_keys: dict[str, list] = {}  # per source keyed by its map tasks: each chunk's text keys, in row order

    def tallied(s: str, k: int, got_parts: list) -> Iterator[tuple]:
        for task, (t, got) in itertools.islice(results, k):
            add_hits(out, s, t, item_task)
            got_parts.append(t)
            if task[3]:  # a chunk loaded from a killed run's part: its texts keyed here
                chunk_keys.setdefault(s, []).append(
                    got.text_keys if got is not None else text_keys(engine.read_rows(task[0], ["text"]).column("text")))
            if got is not None:
                out.fuzzy_seconds += got.fuzzy_seconds
                if prog:
                    prog.update(docs=len(got.doc_ids), bytes=got.text_bytes)
            yield got

    for s in todo:
        mine = [i for i, (x, _) in enumerate(work) if x == s]
        got_parts: list = []
        if s in priors:
            _assemble(storage, s, priors[s], current[s], [work[i][1] for i in mine], tallied(s, len(mine), got_parts),
                      got_parts, out, item_task, plan.get(s), params, sig_schema, [sig_keys[i] for i in mine],
                      sig_store, meta[s])
            write_text_keys(storage, s, meta[s], current[s][0], got_parts, current[s][1].to_pylist())
            store.drop(keys[i] for i in mine)
            continue
        group = tallied(s, len(mine), got_parts)
        if s in plan:
            try:
                dedup.write_signature_tables(storage, s, plan[s], params.num_perm,
                                             _signed(group, [sig_keys[i] for i in mine], sig_store, sig_schema))
                out.signed_sources.append(s)
                sig_store.drop(sig_keys[i] for i in mine)
            except _Unsigned:
                pass  # left to dedup_keys (with the parts signed so far); the rest of the source is still scanned
        for _ in group:
            pass
        if meta[s]["raw"] is not None:
            write_hits(storage, s, meta[s], got_parts)
            tkeys = current[s][0] if current[s][0] is not None else list(itertools.chain(*chunk_keys.pop(s, [])))
            write_text_keys(storage, s, meta[s], tkeys, got_parts, current[s][1].to_pylist())
        store.drop(keys[i] for i in mine)
    if prog:
        near = f"; {len(out.fuzzy.hits):,} near an eval item" if index is not None else ""
        prog.done(f"{sum(out.tally.contaminated.values()):,} contaminated{near} of {total:,}")
    return out


def _assemble(storage, s: str, prior: tuple, current: tuple, ranges: list, group, got_parts: list,
              out: SourcesScanned, item_task, sign_meta: dict | None, params, sig_schema, sig_keys: list,
              sig_store: chunks.Parts, meta: dict) -> None:
    """A source scanned in part: its hits (and, when this pass signs it, its signature file) in raw row order from
    the rows its last scan holds (`prior`) and the ranges scanned now (`group`: their results, in order)."""
    prior, src_rows = prior
    ids = current[1]
    n = len(src_rows)
    # the source's rows in order: (start, stop, index of the range scanned now, or None for a reused run)
    pieces, pos = [], 0
    for i, rng in enumerate(ranges):
        if rng.start > pos:
            pieces.append((pos, rng.start, None))
        pieces.append((rng.start, rng.stop, i))
        pos = rng.stop
    if pos < n:
        pieces.append((pos, n, None))
    sigs: list[pa.Table] = []
    signing = sign_meta is not None
    for a, b, i in pieces:
        if i is None:
            t = _cached_hits(prior, src_rows[a:b], ids.slice(a, b - a).to_pylist())
            add_hits(out, s, t, item_task)
            got_parts.append(t)
            if signing:
                sigs.append(_cached_signatures(prior, src_rows[a:b], ids.slice(a, b - a), sig_schema))
            continue
        got = next(group)
        if not signing:
            continue
        if got is not None and got.signed is not None:
            sigs.append(dedup.signed_table(got.signed, sig_schema))
            continue
        t = sig_store.get(sig_keys[i]) if sig_keys[i] is not None and got is None else None
        if t is None:
            signing = False  # left to dedup_keys, as when a chunk comes back unsigned
            continue
        sigs.append(t)
    for _ in group:
        pass
    write_hits(storage, s, meta, got_parts)
    if signing:
        dedup.write_signature_tables(storage, s, sign_meta, params.num_perm, iter(sigs))
        out.signed_sources.append(s)
        sig_store.drop(sig_keys)


def _signed(group, sig_keys: list, sig_store: chunks.Parts, schema: pa.Schema) -> Iterator[pa.Table]:
    """The signature tables of a source's chunks (each chunk tallied as it passes): a computed chunk's
    own, a resumed chunk's from its signature part; _Unsigned when a chunk has none."""
    for k, got in zip(sig_keys, group):
        if got is not None:
            if got.signed is None:
                raise _Unsigned()
            yield dedup.signed_table(got.signed, schema)
            continue
        t = sig_store.get(k) if k is not None else None
        if t is None:
            raise _Unsigned()
        yield t


# -- contamination_report and zero_eval_overlap ---------------------------------------------------


@dataclass
class Scan:
    """A scan of the sources against the registry: counts per source x task, no text."""

    tally: ct.Tally
    registry_ngrams: dict[str, int]  # per task: the denominator printed beside each count
    registry_bytes: int
    masked_docs: int = 0  # documents left out of the scan (the exclusion masks)
    contaminated: pa.Table | None = None  # the contaminated doc ids written (contamination_report only)
    fuzzy: "FuzzyWritten | None" = None  # the fuzzy advisory's outputs (contamination_report, fuzzy on)
    signed_sources: list = field(default_factory=list)  # whose dedup signatures the pass wrote (a cache)
    reused_sources: list = field(default_factory=list)  # whose stored hits were reused, not rescanned
    resumed_chunks: dict = field(default_factory=dict)  # source -> chunks loaded from a killed run's parts

    def rows(self) -> list[dict]:
        return [{**r, "registry_ngrams": self.registry_ngrams[r["task"]]} for r in self.tally.rows()]

    def overlapping_sources(self) -> list[str]:
        return [s for s, v in self.tally.overlap_ngrams.items() if v.sum()]


REPORT_DENOMINATORS = ("rows", "empty_rows", "strings", "items", "ngrams", "short_items", "short_items_unmatched")


def write_contamination_report(storage, spec, eng: engine.Engine = engine.Engine(),
                               log=None, raw_versions: dict[str, str] | None = None) -> tuple[Scan, dict]:
    """Scan every source on `eng`, write the report JSON and the contaminated doc ids; (scan, report).

    With the fuzzy advisory on, the same map pass matches eval_registry's fuzzy index too, and the
    advisory's report and matched doc ids are written here for no_fuzzy_eval_overlap to read. With
    `raw_versions` ({source: raw data version}), the pass also signs the sources `dedup.signing_plan`
    names and writes their dedup signature files (a cache dedup_keys reuses; not an output here)."""
    meta = json.loads(storage.read_text(layout.EVAL_REGISTRY))
    reg = registry_at(RegistryLocation.of(storage))  # built once: scan_sources' tasks reuse it
    floc = RegistryLocation.at(storage, fuzzy_index_keys()) if fuzzy_enabled(spec) else None
    names, params = [s.name for s in spec.sources], dedup.dedup_params(spec)
    files = tables.raw_files(storage, names)
    plan = dedup.signing_plan(storage, files, raw_versions, params) if raw_versions else {}
    scanned = scan_sources(storage, names, eng, spec.audit.threads, log=log, label="contamination_report",
                           fuzzy_index=floc, sign=(params, plan), raw_versions=raw_versions)
    tally = scanned.tally
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
    fz = None if floc is None else _write_fuzzy(storage, scanned, set(table.column("doc_id").to_pylist()),
                                                  _loaded(floc, load_fuzzy_index))
    signed = scanned.signed_sources
    return Scan(tally, ngrams, reg.nbytes, contaminated=table, fuzzy=fz, signed_sources=signed,
                reused_sources=scanned.reused_sources, resumed_chunks=scanned.resumed_chunks), report


class AuditInputError(ValueError):
    """contamination_report's outputs cannot answer for the current mix (the message names file and field)."""


def kept_overlap(storage, spec) -> Scan:
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


# -- the fuzzy advisory (stages/audit/fuzzy.py) --------------------------------------------------------------


def fuzzy_params(spec) -> fuzzy.Params:
    f = spec.audit.fuzzy
    return fuzzy.Params(shingle=f.shingle, num_perm=f.num_perm, threshold=f.threshold,
                        min_words=spec.audit.short_item_min_words)


def fuzzy_index_keys() -> list[str]:
    return [layout.FUZZY_INDEX_META, *(layout.FUZZY_INDEX.format(name=n) for n in fuzzy.INDEX_ARRAYS)]


def write_fuzzy_index(storage, index: fuzzy.Index) -> list[str]:
    """Write the index of every task's items (`fuzzy.build_index_from_words` of the registry's word
    hashes); the storage keys written."""
    for name, a in index.arrays().items():
        storage.write_bytes(layout.FUZZY_INDEX.format(name=name), npy_bytes(a))
    storage.write_text(layout.FUZZY_INDEX_META, fuzzy.dumps(index.meta()))
    return fuzzy_index_keys()


def load_fuzzy_index(storage) -> fuzzy.Index:
    meta = json.loads(storage.read_text(layout.FUZZY_INDEX_META))
    return fuzzy.Index.from_files(meta, {n: load_npy(storage, layout.FUZZY_INDEX.format(name=n))
                                         for n in fuzzy.INDEX_ARRAYS})


@dataclass
class FuzzyWritten:
    report: dict
    docs: pa.Table
    files: list[str]  # the index files, the report, the matched doc ids
    seconds: float = 0.0  # the fuzzy match's share of contamination_report's map pass

    @property
    def outputs(self) -> list[str]:
        """What contamination_report writes for the advisory (the index is eval_registry's)."""
        return [layout.FUZZY_REPORT, layout.FUZZY_DOCS]


def _write_fuzzy(storage, scanned: SourcesScanned, exact: set[str], index: fuzzy.Index) -> FuzzyWritten:
    """The advisory's report JSON and matched doc ids; `exact_hit` / `fuzzy_only_docs` against `exact`
    (contamination_report's contaminated doc ids)."""
    report, docs = scanned.fuzzy.report(exact, index.denominators, index.params), scanned.fuzzy.table(exact)
    storage.write_text(layout.FUZZY_REPORT, fuzzy.dumps(report))
    with storage.writing(layout.FUZZY_DOCS) as tmp:
        pq.write_table(docs, tmp)
    return FuzzyWritten(report, docs, [*fuzzy_index_keys(), layout.FUZZY_REPORT, layout.FUZZY_DOCS],
                        scanned.fuzzy_seconds)


def read_fuzzy_report(storage, spec) -> FuzzyWritten:
    """The advisory's outputs contamination_report wrote; AuditInputError when they are absent or were
    computed with other fuzzy settings than `spec`'s (the message names the file and field)."""
    if not storage.exists(layout.FUZZY_REPORT):
        raise AuditInputError(f"{storage.uri(layout.FUZZY_REPORT)}: missing; re-materialise eval_registry and "
                              "contamination_report with audit.fuzzy enabled")
    report = json.loads(storage.read_text(layout.FUZZY_REPORT))
    if report.get("params") != fuzzy_params(spec).__dict__:
        raise AuditInputError(f"{storage.uri(layout.FUZZY_REPORT)}: params {report.get('params')} differ from the "
                              f"config's audit.fuzzy; re-materialise eval_registry and contamination_report")
    docs = tables.read_parquet(storage, layout.FUZZY_DOCS)
    return FuzzyWritten(report, docs, [*fuzzy_index_keys(), layout.FUZZY_REPORT, layout.FUZZY_DOCS])
