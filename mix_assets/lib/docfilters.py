"""document_filters: the filter cascade as a map stage, its decisions per source, and what the UI reads.

Map (`decide_sources`): each source's documents parquet in row-range chunks on the engine
(lib/engine.py); per chunk `decide_chunk` runs the source's lib/filters.py configuration
(`apply_filters`) and language ID (lib/langid.py) on EVERY document, so language and score are
recorded for the composition table whether or not a document survives. Output per source:
`filters/decisions/<source>.parquet` (layout.FILTER_DECISIONS, DECISIONS_SCHEMA, raw row order,
row groups of GROUP_ROWS whatever the chunk size, so the bytes are the same on every engine),
reused while raw/<source>'s data version, the source's filter parameters and this code are
unchanged (the file's schema metadata records them, as dedup's signature files do).

`reason` is the first failing rule in cascade order (lib/filters.py's open vocabulary,
`gopher_quality:min_doc_words`, then `language:fr` / `language_score`); `rules` holds the first
failing rule of EVERY filter that fails, so a filter's kill rate on its own is read from it.
`summarise` turns the decisions into the UI's tables (kill rates per filter x source, the
composition before/after by source x language x length bucket) and the gates' findings.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import itertools
import json
from dataclasses import asdict, dataclass, field
from typing import Mapping, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.lib import engine, filters, langid, layout, tables
from mix_assets.lib import signatures as sig
from mix_assets.lib.progress import Progress

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
CASCADE = (*filters.FILTER_ORDER, "language")
# Rules that judge a document by its length: the "brevity killed" WARN watches them.
LENGTH_RULES = ("gopher_quality:min_doc_words", "c4:too_few_sentences", "sanity:empty")


def filter_of(rule: str) -> str:
    """The filter a rule belongs to: `gopher_quality:min_doc_words` -> gopher_quality, `language_score` -> language."""
    return "language" if rule == "language_score" else rule.split(":", 1)[0]


class FilterInputError(ValueError):
    """Raw documents the filters cannot read; the message names file, row and field."""


@dataclass(frozen=True)
class FilterParams:
    """What decides a source's documents (plain values: travels to Ray workers, hashed for reuse)."""

    config: filters.FilterConfig
    languages: Optional[tuple] = ("en",)  # None: any identified language
    min_score: float = langid.DEFAULT_MIN_SCORE
    max_chars: Optional[int] = None  # identify on the first characters only
    language_filter: bool = False  # False: language recorded, never a reason to drop

    def describe(self) -> dict:
        return json.loads(json.dumps(asdict(self), default=list))


def filter_params(fspec) -> FilterParams:
    """A source's parameters from its merged `FiltersSpec` (config.MixSpec.filters_for)."""
    lang = fspec.language
    on = lang is not None and lang.enabled
    return FilterParams(fspec.filter_config(), tuple(lang.languages) if on and lang.languages else None,
                        lang.min_score if on else langid.DEFAULT_MIN_SCORE, lang.max_chars if lang else langid.DEFAULT_MAX_CHARS, on)


@functools.cache
def _code() -> str:
    """The code that decides: lib/filters.py, lib/langid.py, this module and the language model's package."""
    src = "".join(inspect.getsource(m) for m in (filters, langid, inspect.getmodule(_code)))
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
    t = engine.read_rows(chunk.rows, ["doc_id", "text", "n_chars", "n_bytes"])
    for name in ("doc_id", "text"):
        if t.column(name).null_count:
            bad = chunk.rows.start + int(np.flatnonzero(np.asarray(t.column(name).is_null()))[0])
            raise FilterInputError(f"{chunk.rows.path}: row {bad}: field {name!r} is null (source {chunk.source})")
    p, text = chunk.params, t.column("text")
    res = filters.apply_filters(text, p.config)
    lang = langid.LanguageFilter(p.languages, p.min_score, p.max_chars).apply(text)
    per_filter = [res.filter_reason[n] for n in filters.FILTER_ORDER if n in res.filter_reason]
    if p.language_filter:
        per_filter.append(lang.column("reason").to_pylist())
    rules = [[r for r in rs if r is not None] for rs in zip(*per_filter)] if per_filter else [[]] * t.num_rows
    reason = [rs[0] if rs else None for rs in rules]
    return pa.table({"doc_id": t.column("doc_id").cast(pa.string()), "keep": [r is None for r in reason],
                     "reason": reason, "rules": rules, "language": lang.column("language"),
                     "language_score": lang.column("language_score"),
                     "n_chars": t.column("n_chars").fill_null(0), "n_bytes": t.column("n_bytes").fill_null(0)},
                    schema=DECISIONS_SCHEMA)


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


def decide_sources(storage, sources: Mapping, raw_versions: Mapping[str, str], params: Mapping[str, FilterParams],
                   eng: engine.Engine, log=None) -> list[str]:
    """Write each source's decisions unless the stored file matches; returns the reused sources."""
    reused = stored_decisions(storage, sources, raw_versions, params)
    todo = [n for n in sorted(sources) if n not in reused]
    if log and reused:
        log.info(f"document_filters: reusing the stored decisions of {', '.join(reused)} (unchanged)")
    chunks = [FilterChunk(n, rng, params[n]) for n in todo for rng in engine.row_ranges(sources[n], eng.chunk_rows)]
    results = engine.map_chunks(decide_chunk, chunks, eng)
    prog = Progress(log, "document_filters", total_docs=sum(c.rows.stop - c.rows.start for c in chunks)) if log else None
    for name in todo:
        schema = DECISIONS_SCHEMA.with_metadata(
            {META_KEY: json.dumps(describe(raw_versions.get(name), params[name]), sort_keys=True).encode()})

        def parts(k: int = sum(c.source == name for c in chunks)):
            for t in itertools.islice(results, k):
                if prog:
                    prog.update(docs=t.num_rows, bytes=int(pc.sum(t.column("n_bytes")).as_py() or 0))
                yield t.cast(schema)

        tables.write_parquet_groups(storage, decisions_key(name), schema, sig.regroup(parts(), sig.GROUP_ROWS, schema))
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


def rejections(storage, sources):
    """dedup.Rejections of every document the filters rejected (ids and rules only), None when no source
    has decisions (no filters: the masks are the ones from before filters existed)."""
    from mix_assets.lib.dedup import Rejections

    dec = read_decisions(storage, sources, ["doc_id", "keep", "reason"])
    if not dec:
        return None
    t = pa.concat_tables(dec.values())
    t = t.filter(pc.invert(t.column("keep")))
    return Rejections.of(t.column("doc_id").combine_chunks(), t.column("reason").combine_chunks())


def rejected_array(storage, sources) -> Optional[pa.Array]:
    """The doc ids the filters rejected (dedup_keys' `rejected`), None when no source has decisions."""
    dec = read_decisions(storage, sources, ["doc_id", "keep"])
    if not dec:
        return None
    t = pa.concat_tables(dec.values())
    return t.filter(pc.invert(t.column("keep"))).column("doc_id").combine_chunks()


# -- what the UI shows and the gates judge ------------------------------------------------------------
def length_bucket_labels(edges: list[int]) -> list[str]:
    e = sorted(edges)
    return [f"< {e[0]}"] + [f"{a} - {b}" for a, b in zip(e, e[1:])] + [f">= {e[-1]}"] if e else ["all"]


def length_buckets(n_chars: np.ndarray, edges: list[int]) -> np.ndarray:
    """The bucket index of every length (labels: `length_bucket_labels(edges)`)."""
    return np.searchsorted(np.asarray(sorted(edges), np.int64), np.asarray(n_chars, np.int64), side="right")


@dataclass
class Guard:
    """The gates' settings (config.DomainGuardSpec and per source FilterExpectation, as plain values)."""

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


def summarise(decisions: Mapping[str, pa.Table], guard: Guard) -> Summary:
    """The tables and findings of `decisions` ({source: DECISIONS_SCHEMA table})."""
    labels = length_bucket_labels(guard.length_buckets)
    kills, comp, brevity, rows = [], {}, [], []
    for src, t in sorted(decisions.items()):
        keep = t.column("keep").to_numpy(zero_copy_only=False)
        nch, nb = (t.column(c).to_numpy() for c in ("n_chars", "n_bytes"))
        rules = t.column("rules").to_pylist()
        reason = t.column("reason").to_pylist()
        n, total_bytes = len(keep), int(nb.sum())
        for f in guard.active.get(src, []):
            own = np.array([any(filter_of(r) == f for r in rs) for rs in rules], bool)
            first = np.array([r is not None and filter_of(r) == f for r in reason], bool)
            kills.append({"source": src, "filter": f, "docs": n, "failed_docs": int(own.sum()),
                          "kill_share": own.sum() / max(n, 1), "killed_bytes_share": nb[own].sum() / max(total_bytes, 1),
                          "first_failure_docs": int(first.sum()),
                          "max_kill_share": guard.max_kill_rate.get((src, f), 0.5)})
        short = nch < guard.brevity_chars.get(src, 200)
        for rule in LENGTH_RULES:
            hit = np.array([rule in rs for rs in rules], bool) & short & ~keep
            if hit.any():
                brevity.append({"source": src, "rule": rule, "short_docs": int(short.sum()), "removed_docs": int(hit.sum()),
                                "removed_share": hit.sum() / max(int(short.sum()), 1),
                                "warn_share": guard.brevity_warn.get(src, 0.5)})
        bucket = length_buckets(nch, guard.length_buckets)
        for lang, b, k, size in zip(t.column("language").to_pylist(), bucket.tolist(), keep.tolist(), nb.tolist()):
            a = comp.setdefault((src, lang, b), [0, 0, 0, 0])
            a[0] += 1
            a[1] += size
            if k:
                a[2] += 1
                a[3] += size
        rows.append((src, keep, t.column("language").to_pylist(), bucket))
    composition = [{"source": s, "language": lang, "length_bucket": labels[b], "docs_before": a[0], "docs_after": a[2],
                    "bytes_before": a[1], "bytes_after": a[3], "kept_share": a[2] / max(a[0], 1)}
                   for (s, lang, b), a in sorted(comp.items())]
    domains = _domains(rows, labels)
    total = sum(d["docs_before"] for d in domains if d["kind"] == "source")
    vanished = [d for d in domains if d["docs_before"] >= guard.min_share * total and d["kept_share"] < guard.min_kept]
    return Summary(kills, composition, domains, vanished, [k for k in kills if k["kill_share"] > k["max_kill_share"]],
                   brevity, [b for b in brevity if b["removed_share"] > b["warn_share"]], total,
                   sum(d["docs_after"] for d in domains if d["kind"] == "source"))


def _domains(rows, labels: list[str]) -> list[dict]:
    """Before / kept documents per source, per language and per length bucket over the whole pool."""
    acc: dict = {}
    for src, keep, langs, bucket in rows:
        for kind, values in (("source", [src] * len(keep)), ("language", langs),
                             ("length_bucket", [labels[b] for b in bucket.tolist()])):
            for v, k in zip(values, keep.tolist()):
                a = acc.setdefault((kind, v), [0, 0])
                a[0] += 1
                a[1] += k
    return [{"kind": kind, "domain": v, "docs_before": a[0], "docs_after": a[1], "kept_share": a[1] / max(a[0], 1)}
            for (kind, v), a in sorted(acc.items())]


# -- samples: rejected documents beside kept ones of the same source ------------------------------------
def _rank(doc_id: str) -> str:
    # a stable pseudo-random order: the samples do not depend on chunking, workers or input order
    return hashlib.sha256(doc_id.encode()).hexdigest()


def pick_samples(decisions: Mapping[str, pa.Table], per_filter: int, never: set[str]) -> list[tuple[str, str, str, str]]:
    """(source, filter or "kept", doc_id, reason) rows: per source and filter up to `per_filter` documents
    whose first failing rule is that filter's, then up to `per_filter` kept documents of the source; ids in `never`
    (contaminated documents) are left out."""
    out = []
    for src, t in sorted(decisions.items()):
        ids, reason = t.column("doc_id").to_pylist(), t.column("reason").to_pylist()
        by: dict[str, list] = {}
        for d, r in zip(ids, reason):
            if d not in never:
                by.setdefault("kept" if r is None else filter_of(r), []).append((d, r))
        for f in sorted(by, key=lambda f: (f == "kept", CASCADE.index(f) if f in CASCADE else len(CASCADE), f)):
            out += [(src, f, d, r or "") for d, r in sorted(by[f], key=lambda x: _rank(x[0]))[:per_filter]]
    return out


def sample_rows(picked, texts: Mapping[str, str], scrub: np.ndarray, k: int) -> tuple[list[dict], int]:
    """Sample rows with text scrubbed as every audit artifact is (runs of `k` eval-item words masked; a text
    still leaking is withheld whole); returns the rows and how many were withheld."""
    from mix_assets.lib import contamination as ct
    from mix_assets.lib.samples import scrub_text

    rows, withheld = [], 0
    for src, f, d, r in picked:
        text, _ = scrub_text(texts.get(d, ""), scrub, k)
        if ct.leaking_strings([text], scrub, k):
            text, withheld = "(withheld: eval text)", withheld + 1
        rows.append({"source": src, "filter": f, "doc_id": d, "reason": r, "text": text})
    return rows, withheld


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
