"""document_filters: the filter cascade as a map stage, its decisions per source, and what the UI reads.

Map (`decide_sources`): each source's documents parquet in row-range chunks on the engine
(core/engine.py); per chunk `decide_chunk` runs the source's stages/filters/cascade.py configuration
(`apply_filters`) and language ID (stages/filters/langid.py) on EVERY document, so language and score are
recorded for the composition table whether or not a document survives. Output per source:
`filters/decisions/<source>.parquet` (layout.FILTER_DECISIONS, DECISIONS_SCHEMA, raw row order,
row groups of GROUP_ROWS whatever the chunk size, so the bytes are the same on every engine),
reused while raw/<source>'s data version, the source's filter parameters and this code are
unchanged (the file's schema metadata records them, as dedup's signature files do). Each chunk's
decisions are also kept as a keyed part until the source's file is written (core/chunks.py), so a
killed run resumes at the first chunk it had not finished.

`reason` is the first failing rule in cascade order (stages/filters/cascade.py's open vocabulary,
`gopher_quality:min_doc_words`, then `language:fr` / `language_score`); `rules` holds the first
failing rule of EVERY filter that fails, so a filter's kill rate on its own is read from it.
`summarise_stored` turns the decisions into the UI's tables (kill rates per filter x source, the
composition before/after by source x language x length bucket) and the gates' findings, and
`pick_stored` picks the samples: both read a decisions file a row group at a time with vectorised
group-bys and keep only small aggregates (memory: one row group, whatever the number of documents).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import itertools
import json
import operator
from dataclasses import dataclass, field, fields
from typing import Iterable, Iterator, Mapping, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mix_assets.core import chunks, engine, imports, layout, tables
from mix_assets.stages.filters import cascade, langid, registry, urls
from mix_assets.stages.dedup import signatures as sig
from mix_assets.core.progress import Progress, reused_line

FORMAT = "mix_assets.filter_decisions/1"
META_KEY = b"mix_assets.filter_decisions"
DECISIONS_SCHEMA = pa.schema([
    ("doc_id", pa.string()),
    ("keep", pa.bool_()),
    ("reason", pa.string()),  # first failing rule (cascade order), null when kept
    ("rules", pa.list_(pa.string())),  # first failing rule of every failing filter, cascade order
    ("language", pa.string()),
    ("language_score", pa.float64()),
    ("n_chars", pa.int64()),
    ("n_bytes", pa.int64()),
])


def filter_order() -> tuple[str, ...]:
    """The filters in the order they decide: the URL filter, the registered ones (registry.py), language ID,
    the classifier."""
    return ("url", *registry.names(), "language", "quality")


def filter_of(rule: str) -> str:
    """The filter a rule belongs to: `gopher_quality:min_doc_words` -> gopher_quality, `language_score` -> language."""
    return "language" if rule == "language_score" else rule.split(":", 1)[0]


class FilterInputError(ValueError):
    """Raw documents the filters cannot read; the message names file, row and field."""


@dataclass(frozen=True)
class FilterParams:
    """What decides a source's documents (plain values: travels to Ray workers, hashed for reuse)."""

    config: cascade.FilterConfig
    languages: Optional[tuple] = ("en",)  # None: any identified language
    min_score: float = langid.DEFAULT_MIN_SCORE
    max_chars: Optional[int] = None  # identify on the first characters only
    language_filter: bool = False  # False: language recorded, never a reason to drop
    url: Optional[urls.UrlParams] = None  # the URL / domain filter (stages/filters/urls.py), first; None: off
    # stages/quality: (model name, cutoff, scores file, its sha256): keep score >= cutoff, else `quality:<model>`
    quality: Optional[tuple] = None

    def describe(self) -> dict:
        # an absent url / quality leaves the keys of decisions from before they existed (their bytes kept)
        plain = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("url", "quality")}
        extra = {"url": self.url.describe()} if self.url is not None else {}
        if self.quality is not None:
            extra["quality"] = {"model": self.quality[0], "cutoff": self.quality[1], "scores_sha256": self.quality[3]}
        return json.loads(json.dumps({**plain, "config": self.config.describe(), **extra}, default=list))


def filter_params(fspec, base_dir: Optional[str] = None) -> FilterParams:
    """A source's parameters from its merged `FiltersSpec` (config.MixSpec.filters_for); `base_dir`: where the
    URL filter's blocklist paths are relative to (the config file's folder)."""
    lang = fspec.language
    on = lang is not None and lang.enabled
    u = fspec.url
    url = urls.UrlParams(u.field, urls.resolve([x.model_dump() for x in u.lists], base_dir), u.reject_unparseable) \
        if u is not None and u.enabled else None
    return FilterParams(fspec.filter_config(), tuple(lang.languages) if on and lang.languages else None,
                        lang.min_score if on else langid.DEFAULT_MIN_SCORE, lang.max_chars if lang else langid.DEFAULT_MAX_CHARS, on,
                        url)


def _code() -> str:
    """The code that decides: this module and every project module it reaches (the cascade, the registry and
    its rules, langid, ...), any registered filter's module from outside the package (a test's), and the
    language model's package."""
    return _code_of(registry.filters())


@functools.cache
def _code_of(registered: tuple) -> str:
    outside = [inspect.getmodule(f.rule) for f in registered]
    src = imports.source_version(__name__) + "".join(inspect.getsource(m) for m in outside
                                                     if not m.__name__.startswith(imports.PACKAGE + "."))
    return hashlib.sha256((src + importlib.metadata.version(langid.MODEL_DIST)).encode()).hexdigest()[:16]


def describe(raw_version: Optional[str], params: FilterParams) -> dict:
    """What a decisions file is computed from (its schema metadata; compared before reuse)."""
    return {"format": FORMAT, "raw": raw_version, "params": params.describe(), "code": _code()}


def decisions_key(source: str) -> str:
    return layout.FILTER_DECISIONS.format(source=source)


@dataclass(frozen=True)
class FilterChunk:
    """One map task: rows of one source's documents parquet and that source's parameters."""

    source: str
    rows: engine.RowRange
    params: FilterParams


def decide_chunk(chunk: FilterChunk) -> pa.Table:
    """The per-document map work: every filter and language ID on the rows (pure), DECISIONS_SCHEMA."""
    p = chunk.params
    if p.url is not None:
        with engine.open_parquet(chunk.rows.path if chunk.rows.endpoint_url is None
                                 else engine.FileAt(chunk.rows.path, chunk.rows.endpoint_url)) as f:
            if p.url.field not in f.schema_arrow.names:
                raise FilterInputError(f"{chunk.rows.path}: no column {p.url.field!r} (filters.url.field) in source "
                                       f"{chunk.source}'s documents; give the source a url_field (a text folder: "
                                       "loader.url_template or loader.urls) or switch filters.url off for it")
    t = engine.read_rows(chunk.rows, ["doc_id", "text", "n_chars", "n_bytes"] + ([p.url.field] if p.url else []))
    for name in ("doc_id", "text"):
        if t.column(name).null_count:
            bad = chunk.rows.start + int(np.flatnonzero(np.asarray(t.column(name).is_null()))[0])
            raise FilterInputError(f"{chunk.rows.path}: row {bad}: field {name!r} is null (source {chunk.source})")
    text = t.column("text")
    res = cascade.apply_filters(text, p.config)
    lang = langid.LanguageFilter(p.languages, p.min_score, p.max_chars).apply(text)
    per_filter = list(res.filter_reason.values())  # cascade order
    if p.url is not None:  # first, as datatrove's URLFilter comes first in FineWeb's pipeline
        per_filter.insert(0, urls.judge(t.column(p.url.field).cast(pa.string()).to_pylist(), p.url).reason)
    if p.language_filter:
        per_filter.append(lang.column("reason").to_pylist())
    if p.quality is not None:
        per_filter.append(_quality_reasons(chunk, t.column("doc_id")))
    rules = [[r for r in rs if r is not None] for rs in zip(*per_filter)] if per_filter else [[]] * t.num_rows
    reason = [rs[0] if rs else None for rs in rules]
    return pa.table({"doc_id": t.column("doc_id").cast(pa.string()), "keep": [r is None for r in reason],
                     "reason": reason, "rules": rules, "language": lang.column("language"),
                     "language_score": lang.column("language_score"),
                     "n_chars": t.column("n_chars").fill_null(0), "n_bytes": t.column("n_bytes").fill_null(0)},
                    schema=DECISIONS_SCHEMA)


def _quality_reasons(chunk: FilterChunk, doc_ids: pa.ChunkedArray) -> list:
    """`quality:<model>` where the stored score (stages/quality, raw row order) is below the cutoff, else None."""
    name, cutoff, scores, _ = chunk.params.quality
    s = engine.read_rows(engine.RowRange(scores.path, chunk.rows.start, chunk.rows.stop, scores.endpoint_url),
                         ["doc_id", "score"])
    if not s.column("doc_id").equals(doc_ids.cast(s.column("doc_id").type)):
        raise FilterInputError(f"{scores}: rows {chunk.rows.start}-{chunk.rows.stop} are not raw/{chunk.source}'s "
                               "documents (quality_scores is stale: rematerialise it)")
    low = s.column("score").to_numpy() < cutoff
    return [f"quality:{name}" if x else None for x in low]


def _quality_score(quality: tuple, doc_id: str) -> float:
    """One document's stored quality score (a rejected sample's figure beside the cutoff)."""
    with engine.open_parquet(quality[2]) as f:
        t = f.read(columns=["doc_id", "score"])
    return float(t.filter(pc.equal(t.column("doc_id"), doc_id)).column("score")[0].as_py())


def _rows(source) -> int:
    with engine.open_parquet(source) as f:
        return f.metadata.num_rows


def stored_decisions(storage, sources: Mapping, raw_versions: Mapping[str, str],
                     params: Mapping[str, FilterParams]) -> list[str]:
    """The sources whose stored decisions were computed from their current raw version, parameters and
    code, with a row per raw row."""
    out = []
    for n in sorted(sources):
        with engine.open_parquet(sources[n]) as f:
            rows = f.metadata.num_rows
        key = decisions_key(n)
        if storage.exists(key) and sig.matches(storage.source(key), describe(raw_versions.get(n), params[n]),
                                               rows, META_KEY):
            out.append(n)
    return out


PARTS_STAGE = "filters"  # core/chunks.py: the chunk parts of a killed run live under parts/filters/


def decide_sources(storage, sources: Mapping, raw_versions: Mapping[str, str], params: Mapping[str, FilterParams],
                   eng: engine.Engine, log=None) -> list[str]:
    """Write each source's decisions unless the stored file matches; returns the reused sources.

    Each chunk's decisions are stored as a part (core/chunks.py) as they arrive, keyed by the source's
    `describe` and the row range: a rerun after a kill loads those and decides only the missing chunks;
    the file is assembled from both in row order (the same bytes), then the source's parts are deleted."""
    reused = stored_decisions(storage, sources, raw_versions, params)
    todo = [n for n in sorted(sources) if n not in reused]
    if log and reused:
        log.info(reused_line("document_filters", "decisions", {n: _rows(sources[n]) for n in reused},
                             "raw data, filter parameters and code unchanged"))
    store = chunks.Parts(storage, PARTS_STAGE)
    meta = {n: describe(raw_versions.get(n), params[n]) for n in todo}
    work = [FilterChunk(n, rng, params[n]) for n in todo for rng in engine.row_ranges(sources[n], eng.chunk_rows)]
    keys, have, _ = store.keyed("document_filters", [(c.source, c.rows) for c in work], meta, log)
    results = chunks.resume(decide_chunk, work, keys, eng, store, have=have)
    # a progress line only for work done: with everything reused it would read "0 docs, 0B | 0 docs/s"
    computed = [c for c, k in zip(work, keys) if k not in have]
    prog = Progress(log, "document_filters", total_docs=sum(c.rows.stop - c.rows.start for c in computed)) \
        if log and computed else None
    for name in todo:
        schema = DECISIONS_SCHEMA.with_metadata({META_KEY: json.dumps(meta[name], sort_keys=True).encode()})
        mine = [k for c, k in zip(work, keys) if c.source == name]

        def parts(k: int = len(mine)):
            for t, got in itertools.islice(results, k):
                if prog and got is not None:
                    prog.update(docs=t.num_rows, bytes=int(pc.sum(t.column("n_bytes")).as_py() or 0))
                yield t.cast(schema)

        tables.write_parquet_groups(storage, decisions_key(name), schema, sig.regroup(parts(), sig.GROUP_ROWS, schema))
        store.drop(mine)
    if prog:
        prog.done()
    return reused


def read_decisions(storage, sources, columns: Optional[list[str]] = None) -> dict[str, pa.Table]:
    """{source: its decisions table} for the sources that have a decisions file."""
    return {s: tables.read_parquet(storage, decisions_key(s), columns) for s in sorted(sources)
            if storage.exists(decisions_key(s))}


def rejected_ids(storage, sources) -> dict[str, str]:
    """{doc_id: reason} of every document the filters rejected (empty without decisions)."""
    out: dict[str, str] = {}
    for t in read_decisions(storage, sources, ["doc_id", "keep", "reason"]).values():
        r = t.filter(pc.invert(t.column("keep")))
        out.update(zip(r.column("doc_id").to_pylist(), r.column("reason").to_pylist()))
    return out


def rejected_reasons(storage, sources) -> Optional[tuple[pa.Array, pa.Array]]:
    """(doc ids, first failing rule) of every document the filters rejected (exclusion_masks' `Rejections`),
    None when no source has decisions (no filters: the masks are the ones from before filters existed)."""
    dec = read_decisions(storage, sources, ["doc_id", "keep", "reason"])
    if not dec:
        return None
    t = pa.concat_tables(dec.values())
    t = t.filter(pc.invert(t.column("keep")))
    return t.column("doc_id").combine_chunks(), t.column("reason").combine_chunks()


def rejected_array(storage, sources) -> Optional[pa.Array]:
    """The doc ids the filters rejected (dedup_keys' `rejected`), None when no source has decisions."""
    dec = read_decisions(storage, sources, ["doc_id", "keep"])
    if not dec:
        return None
    t = pa.concat_tables(dec.values())
    return t.filter(pc.invert(t.column("keep"))).column("doc_id").combine_chunks()


# -- what the UI shows and the gates judge ------------------------------------------------------------
def length_bucket_labels(edges: list[int]) -> list[str]:
    """Labels in characters, "< 200 chars", "200 - 1000 chars", ">= 5000 chars" (report, UI tables, gates)."""
    e = sorted(edges)
    return [f"< {e[0]} chars"] + [f"{a} - {b} chars" for a, b in zip(e, e[1:])] + [f">= {e[-1]} chars"] if e else ["all"]


def length_buckets(n_chars: np.ndarray, edges: list[int]) -> np.ndarray:
    """The bucket index of every length (labels: `length_bucket_labels(edges)`)."""
    return np.searchsorted(np.asarray(sorted(edges), np.int64), np.asarray(n_chars, np.int64), side="right")


@dataclass
class Guard:
    """The gates' settings (stages/filters/config.py DomainGuardSpec and per source FilterExpectation, as plain values)."""

    min_share: float = 0.05
    min_kept: float = 0.2
    length_buckets: list = field(default_factory=lambda: [200, 1000, 5000])
    brevity_chars: dict = field(default_factory=dict)  # source -> chars
    brevity_warn: dict = field(default_factory=dict)  # source -> share
    max_kill_rate: dict = field(default_factory=dict)  # (source, filter) -> share
    active: dict = field(default_factory=dict)  # source -> active filter names


@dataclass
class Summary:
    """Kill rates, composition and the gates' findings over every source's decisions."""

    kills: list[dict]  # per source x active filter
    composition: list[dict]  # per source x language x length bucket, before / after
    domains: list[dict]  # per source, language and length bucket over the pool: before / kept
    vanished: list[dict]  # domains that held >= min_share and kept < min_kept of their own count
    over_expected: list[dict]  # kills rows above their max_kill_rate
    brevity: list[dict]  # per source x length rule: short docs and how many it removed
    brevity_killed: list[dict]  # brevity rows above brevity_warn
    documents: int
    kept: int


SUMMARY_COLUMNS = ["keep", "reason", "rules", "language", "n_chars", "n_bytes"]
SAMPLE_COLUMNS = ["doc_id", "reason"]


def stored_groups(storage, sources, columns: list[str]) -> Iterator[tuple[str, pa.Table]]:
    """(source, one row group of its decisions) for the sources that have a decisions file, a row group
    at a time (memory: one row group)."""
    for s in sorted(sources):
        if storage.exists(decisions_key(s)):
            f = pq.ParquetFile(storage.source(decisions_key(s)))
            if not f.num_row_groups:
                yield s, f.schema_arrow.empty_table().select(columns)
            for i in range(f.num_row_groups):
                yield s, f.read_row_group(i, columns=columns)


def _filter_codes(values: pa.Array) -> tuple[np.ndarray, list]:
    """(per value: an index into the names, -1 when null; the names): the filter of each rule, computed
    once per distinct rule (a handful) instead of once per document."""
    enc = pc.dictionary_encode(values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values)
    names = sorted({filter_of(r) for r in enc.dictionary.to_pylist()})
    of_rule = np.array([names.index(filter_of(r)) for r in enc.dictionary.to_pylist()] + [-1], np.int64)
    return of_rule[enc.indices.fill_null(len(of_rule) - 1).to_numpy()], names


class SummaryBuilder:
    """`Summary` from decisions fed a row group at a time (vectorised per group); holds only the small
    aggregate tables, so memory is one row group whatever the number of documents."""

    def __init__(self, guard: Guard):
        self.guard = guard
        self.kills: dict = {}  # (source, filter) -> [failed docs, failed bytes, first-failure docs]
        self.totals: dict = {}  # source -> [docs, bytes, short docs]
        self.brevity: dict = {}  # (source, rule) -> removed short docs
        self.comp: dict = {}  # (source, language, bucket) -> [docs, bytes, kept docs, kept bytes]

    def add(self, src: str, t: pa.Table) -> None:
        g, n = self.guard, t.num_rows
        keep = t.column("keep").to_numpy().astype(bool)
        nch, nb = (t.column(c).to_numpy().astype(np.int64) for c in ("n_chars", "n_bytes"))
        rules = t.column("rules").combine_chunks()
        flat, parent = pc.list_flatten(rules), pc.list_parent_indices(rules).to_numpy()
        rule_filter, names = _filter_codes(flat)
        first_filter, first_names = _filter_codes(t.column("reason"))
        short = nch < g.brevity_chars.get(src, 200)
        tot = self.totals.setdefault(src, [0, 0, 0])
        tot[0], tot[1], tot[2] = tot[0] + n, tot[1] + int(nb.sum()), tot[2] + int(short.sum())
        for f in g.active.get(src, []):
            own = np.zeros(n, bool)
            own[parent[rule_filter == names.index(f)] if f in names else []] = True
            first = first_filter == first_names.index(f) if f in first_names else np.zeros(n, bool)
            a = self.kills.setdefault((src, f), [0, 0, 0])
            a[0], a[1], a[2] = a[0] + int(own.sum()), a[1] + int(nb[own].sum()), a[2] + int(first.sum())
        for rule in registry.length_rules():
            hit = np.zeros(n, bool)
            hit[parent[pc.equal(flat, rule).fill_null(False).to_numpy(zero_copy_only=False)]] = True
            removed = int((hit & short & ~keep).sum())
            self.brevity[(src, rule)] = self.brevity.get((src, rule), 0) + removed
        bucket = length_buckets(nch, g.length_buckets)
        grouped = pa.table({"language": t.column("language"), "bucket": bucket, "n_bytes": nb,
                            "kept": keep.astype(np.int64), "kept_bytes": np.where(keep, nb, 0)}).group_by(
            ["language", "bucket"]).aggregate([("n_bytes", "count"), ("n_bytes", "sum"), ("kept", "sum"),
                                               ("kept_bytes", "sum")])
        for r in grouped.to_pylist():
            a = self.comp.setdefault((src, r["language"], r["bucket"]), [0, 0, 0, 0])
            for i, c in enumerate(("n_bytes_count", "n_bytes_sum", "kept_sum", "kept_bytes_sum")):
                a[i] += r[c]

    def summary(self) -> Summary:
        g, labels = self.guard, length_bucket_labels(self.guard.length_buckets)
        kills = [{"source": src, "filter": f, "docs": self.totals[src][0], "failed_docs": a[0],
                  "kill_share": a[0] / max(self.totals[src][0], 1), "killed_bytes_share": a[1] / max(self.totals[src][1], 1),
                  "first_failure_docs": a[2], "max_kill_share": g.max_kill_rate.get((src, f), 0.5)}
                 for src in sorted(self.totals) for f in g.active.get(src, []) for a in [self.kills[(src, f)]]]
        brevity = [{"source": src, "rule": rule, "short_docs": self.totals[src][2], "removed_docs": removed,
                    "removed_share": removed / max(self.totals[src][2], 1), "warn_share": g.brevity_warn.get(src, 0.5)}
                   for src in sorted(self.totals) for rule in registry.length_rules()
                   for removed in [self.brevity.get((src, rule), 0)] if removed]
        composition = [{"source": s, "language": lang, "length_bucket": labels[b], "docs_before": a[0],
                        "docs_after": a[2], "bytes_before": a[1], "bytes_after": a[3], "kept_share": a[2] / max(a[0], 1)}
                       for (s, lang, b), a in sorted(self.comp.items())]
        domains = _domains(self.comp, labels)
        total = sum(d["docs_before"] for d in domains if d["kind"] == "source")
        vanished = [d for d in domains if d["docs_before"] >= g.min_share * total and d["kept_share"] < g.min_kept]
        return Summary(kills, composition, domains, vanished, [k for k in kills if k["kill_share"] > k["max_kill_share"]],
                       brevity, [b for b in brevity if b["removed_share"] > b["warn_share"]], total,
                       sum(d["docs_after"] for d in domains if d["kind"] == "source"))


def below_keep_share(s: Summary, keep_share: Mapping[str, float]) -> tuple[list[dict], list[dict]]:
    """(per source: the share of its bytes the filters kept beside the `keep_share` its raw sample was
    sized for; the sources below a keep_share that was set, i.e. < 1: the default assumes nothing and
    leaves small drops to the headroom). Bytes stand for tokens: raw budgets are estimated from bytes."""
    acc: dict = {}
    for c in s.composition:
        a = acc.setdefault(c["source"], [0, 0])
        a[0], a[1] = a[0] + c["bytes_before"], a[1] + c["bytes_after"]
    rows = [{"source": src, "bytes_before": a[0], "bytes_after": a[1], "kept_bytes_share": a[1] / max(a[0], 1),
             "keep_share": keep_share.get(src, 1.0)} for src, a in sorted(acc.items())]
    return rows, [r for r in rows if r["kept_bytes_share"] < r["keep_share"] < 1.0]


def _domains(comp: Mapping, labels: list[str]) -> list[dict]:
    """Before / kept documents per source, per language and per length bucket over the whole pool (sums of
    the composition cells)."""
    acc: dict = {}
    for (src, lang, b), a in comp.items():
        for key in (("source", src), ("language", lang), ("length_bucket", labels[b])):
            d = acc.setdefault(key, [0, 0])
            d[0], d[1] = d[0] + a[0], d[1] + a[2]
    return [{"kind": kind, "domain": v, "docs_before": a[0], "docs_after": a[1], "kept_share": a[1] / max(a[0], 1)}
            for (kind, v), a in sorted(acc.items())]


def summarise(decisions: Mapping[str, pa.Table], guard: Guard) -> Summary:
    """The tables and findings of `decisions` ({source: DECISIONS_SCHEMA table})."""
    return summarise_groups(sorted(decisions.items()), guard)


def summarise_stored(storage, sources, guard: Guard) -> Summary:
    """`summarise` over the stored decisions files, a row group at a time."""
    return summarise_groups(stored_groups(storage, sources, SUMMARY_COLUMNS), guard)


def summarise_groups(groups: Iterable[tuple[str, pa.Table]], guard: Guard) -> Summary:
    b = SummaryBuilder(guard)
    for src, t in groups:
        b.add(src, t)
    return b.summary()


# -- samples: rejected documents beside kept ones of the same source ------------------------------------
def _ranks(ids: pa.Array) -> np.ndarray:
    """sha256 digests of the doc ids ('S32'): a stable pseudo-random order, so the samples depend on neither
    chunking, workers nor input order (hashlib's C loop via map: no Python bytecode per id)."""
    digests = map(operator.methodcaller("digest"), map(hashlib.sha256, ids.cast(pa.binary()).to_pylist()))
    return np.fromiter(digests, dtype="S32", count=len(ids))


def pick_samples(decisions: Mapping[str, pa.Table], per_filter: int, never: set[str]) -> list[tuple[str, str, str, str]]:
    """(source, filter or "kept", doc_id, reason) rows: per source and filter up to `per_filter` documents
    whose first failing rule is that filter's (lowest sha256 of the doc id first), then up to `per_filter`
    kept documents of the source; ids in `never` (contaminated documents) are left out."""
    return pick_groups(sorted(decisions.items()), per_filter, never)


def pick_stored(storage, sources, per_filter: int, never: set[str]) -> list[tuple[str, str, str, str]]:
    """`pick_samples` over the stored decisions files, a row group at a time."""
    return pick_groups(stored_groups(storage, sources, SAMPLE_COLUMNS), per_filter, never)


def pick_groups(groups: Iterable[tuple[str, pa.Table]], per_filter: int, never: set[str]) -> list[tuple]:
    best: dict = {}  # (source, filter) -> (ranks, row order, ids, reasons) of the best `per_filter` so far
    never_ids, seen = pa.array(sorted(never), pa.string()), {}
    for src, t in groups:
        base = seen.get(src, 0)
        seen[src] = base + t.num_rows
        ok = pc.invert(pc.is_in(t.column("doc_id").cast(pa.string()), value_set=never_ids)).combine_chunks()
        ids, reason = t.column("doc_id").cast(pa.string()).filter(ok), t.column("reason").filter(ok)
        code, names = _filter_codes(reason)
        rank, order = _ranks(ids.combine_chunks()), base + np.flatnonzero(ok.to_numpy(zero_copy_only=False))
        for i, f in [(-1, "kept"), *enumerate(names)]:
            sel = np.flatnonzero(code == i)
            if len(sel):
                sel = sel[np.lexsort((order[sel], rank[sel]))[:per_filter]]  # this group's best, then merged
                prev = best.get((src, f), (np.array([], "S32"), np.array([], np.int64), [], []))
                r, o = np.concatenate([prev[0], rank[sel]]), np.concatenate([prev[1], order[sel]])
                d, why = prev[2] + ids.take(sel).to_pylist(), prev[3] + reason.take(sel).to_pylist()
                top = np.lexsort((o, r))[:per_filter]
                best[(src, f)] = (r[top], o[top], [d[j] for j in top], [why[j] for j in top])
    out = []
    for src in sorted({s for s, _ in best}):
        mine = [f for s, f in best if s == src]
        order = filter_order()
        for f in sorted(mine, key=lambda f: (f == "kept", order.index(f) if f in order else len(order), f)):
            out += [(src, f, d, r or "") for d, r in zip(*best[(src, f)][2:])]
    return out


def explain(picked, texts: Mapping[str, str], params: Mapping[str, FilterParams]) -> dict[str, str]:
    """{doc_id: its reason with the measured figure beside the threshold} of the picked rejected documents,
    `gopher_quality:alpha_words 0.78 < 0.80` (stages/filters/cascade.py `measure`; language ID re-run on those texts
    with the source's parameters): what the UI shows beside a rejected sample. `texts`: the documents' raw
    texts (whole: the figures are those of the whole document)."""
    out: dict[str, str] = {}
    for src in sorted({p[0] for p in picked}):
        mine = [(d, r) for s, f, d, r in picked if s == src and f != "kept" and r and d in texts]
        if not mine or src not in params:
            continue
        p, docs = params[src], [texts[d] for d, _ in mine]
        measured = cascade.measure(docs, p.config) if any(not r.startswith("language") for _, r in mine) else None
        lang = (langid.LanguageFilter(p.languages, p.min_score, p.max_chars).apply(docs)
                if any(r.startswith("language") for _, r in mine) else None)
        for i, (d, r) in enumerate(mine):
            if r == "language_score":
                out[d] = f"language_score {cascade.compared(lang.column('language_score')[i].as_py(), p.min_score, '≤')}"
            elif r.startswith("language:"):
                wanted = ", ".join(p.languages or ()) or "any"
                out[d] = f"{r} (score {lang.column('language_score')[i].as_py():.2f}; wanted: {wanted})"
            elif r.startswith("quality:") and p.quality is not None:
                out[d] = f"{r} score {cascade.compared(_quality_score(p.quality, d), p.quality[1], '<')}"
            else:
                m = measured[i].get(r)
                out[d] = str(m) if m is not None else r
    return out


def filtered_sources(spec) -> list[str]:
    """The sources that run a document filter (the mix's `filters:` or their own override, with at least one
    filter or language ID active; PII alone is a modifier of raw/<source>), in config order."""
    return [s.name for s in spec.sources if (f := spec.filters_for(s.name)) is not None and f.active()]


def guard_for(spec) -> Guard:
    """The gates' settings from the mix spec: the pool-wide guard of `filters:` (else the first filtered
    source's), brevity and expectations per source from each source's merged filters."""
    names = filtered_sources(spec)
    per = {n: spec.filters_for(n) for n in names}
    g = spec.filters.guard if spec.filters is not None else per[names[0]].guard
    return Guard(g.min_share, g.min_kept, list(g.length_buckets),
                 {n: f.guard.brevity_chars for n, f in per.items()}, {n: f.guard.brevity_warn for n, f in per.items()},
                 {(n, a): f.max_kill_rate(a) for n, f in per.items() for a in f.active()},
                 {n: f.active() for n, f in per.items()})


def report_json(s: Summary) -> str:
    """filters/report.json: the summary's tables (ids-free; deterministic bytes)."""
    return json.dumps({"documents": s.documents, "kept": s.kept, "kills": s.kills, "composition": s.composition,
                       "domains": s.domains, "brevity": s.brevity}, indent=1, sort_keys=True)


# -- the URL filter's counts ---------------------------------------------------------------------------
def url_roots(params: Mapping[str, FilterParams]) -> dict[str, str]:
    """{`url_list:<name>`: the sha256 of its content} of every blocklist a source's URL filter reads (what keys
    document_filters beside its inputs: an edited list re-runs it)."""
    return {f"url_list:{u.name}": u.sha256 for p in params.values() if p.url is not None for u in p.url.lists}


def url_counts(storage, sources, params: Mapping[str, FilterParams]) -> list[dict]:
    """Per source with a URL filter and per list: the documents it rejected (first failing rule `url:<list>`);
    then the documents without a URL and those whose URL has no usable host (read from the documents' URL
    column, a row group at a time)."""
    out = []
    for src in sorted(s for s in sources if params.get(s) is not None and params[s].url is not None):
        u = params[src].url
        got: dict[str, int] = {}
        for _, t in stored_groups(storage, [src], ["rules"]):
            for r in pc.list_flatten(t.column("rules").combine_chunks()).to_pylist():
                if r.startswith("url:"):
                    got[r[4:]] = got.get(r[4:], 0) + 1
        missing = bad = 0
        docs = tables.file_at(storage, layout.RAW_DOCS.format(source=src))
        with engine.open_parquet(docs) as f:
            if u.field in f.schema_arrow.names:
                for i in range(f.num_row_groups):
                    for v in f.read_row_group(i, columns=[u.field]).column(0).to_pylist():
                        if not v or not str(v).strip():
                            missing += 1
                        elif urls.host_of(v) is None:
                            bad += 1
        out += [{"source": src, "list": x.name, "kind": x.kind, "rejected_docs": got.get(x.name, 0),
                 "unparseable_urls": None, "missing_urls": None} for x in u.lists]
        out.append({"source": src, "list": urls.UNPARSEABLE, "kind": "rejected" if u.reject_unparseable else "kept",
                    "rejected_docs": got.get(urls.UNPARSEABLE, 0), "unparseable_urls": bad, "missing_urls": missing})
    return out
