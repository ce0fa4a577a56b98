"""The dedup stage over the merged pool, and the exclusion masks built from it (no Dagster here).

`dedup_keys_table` is a map and a reduce. Map (`sign_sources`): each source's documents parquet in
row-range chunks (doc_id, text, n_chars read; the text dropped after signing), written per source
to `dedup/signatures/<source>.parquet` (lib/signatures.py) and reused while the source's raw data
and the parameters are unchanged. Reduce (`reduce_signatures`): LSH band by band over those files
(one band's columns in memory at a time), then a pass reading the text of the documents in
candidate pairs only, whose shingle sets (8 B per distinct shingle of those documents) verify
every candidate by exact Jaccard; clusters and the keep rule. `exclusion_table` unions`exclusion_table` unions the dedup exclusions with the contaminated documents into
one row per excluded document with an open set of reasons; `composition` compares every source
before and after; `reject_samples` picks excluded documents to show beside their kept cluster
member. Text of a document flagged contaminated is never read into a sample.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tempfile
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mix_assets.lib import engine, layout, lsh, tables
from mix_assets.lib import signatures as sig
from mix_assets.lib import minhash as mh
from mix_assets.lib.progress import Progress
from mix_assets.lib.storage import Storage

DEDUP_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("exact_key", pa.string()),
        ("cluster_id", pa.string()),
        ("cluster_size", pa.int64()),
        ("keep", pa.bool_()),
        ("reason", pa.string()),
        ("jaccard_to_kept", pa.float32()),
        ("n_words", pa.int64()),
    ]
)
EXCLUSION_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("reasons", pa.list_(pa.string())),
        ("kept_doc_id", pa.string()),
    ]
)


READ_BATCH_ROWS = 8192  # raw rows per text batch when candidate documents' texts are read


class DedupInputError(ValueError):
    """Raw documents that cannot be deduplicated; the message names file, row and field."""


@dataclass
class DedupParams:
    """What the stage needs from the mix spec (kept separate so lib code takes no pydantic model)."""

    shingle: int = 5
    num_perm: int = 128
    threshold: float = 0.8
    fp_weight: float = 0.05
    fn_weight: float = 0.95
    seed: int = mh.DEFAULT_SEED
    threads: int = 2

    @property
    def bands_rows(self) -> tuple[int, int]:
        return lsh.recall_params(self.threshold, self.num_perm, self.fp_weight, self.fn_weight)


def _check_columns(path, source: str) -> None:
    with engine.open_parquet(path) as f:
        missing = {"doc_id", "text", "n_chars"} - set(f.schema_arrow.names)
    if missing:
        raise DedupInputError(f"{path}: missing column(s) {sorted(missing)} (source {source})")


@dataclass(frozen=True)
class SignChunk:
    """One map task of dedup_keys: rows of one source's documents parquet, and how to sign them."""

    source: str
    rows: engine.RowRange
    num_perm: int
    shingle: int
    seed: int
    threads: int  # signature threads inside the task (1 when the engine runs chunks in parallel)


@dataclass
class SignedChunk:
    doc_ids: pa.Array
    exact_keys: list
    signatures: np.ndarray
    n_words: np.ndarray
    n_shingles: np.ndarray
    n_chars: np.ndarray
    text_bytes: int = 0  # UTF-8 bytes of the chunk's texts (progress only)


def sign_chunk(chunk: SignChunk) -> SignedChunk:
    """The per-document map work: read the rows, normalise, exact key, MinHash signature (pure)."""
    t = engine.read_rows(chunk.rows, ["doc_id", "text", "n_chars"])
    for field in ("doc_id", "text"):
        col = t.column(field)
        if col.null_count:
            bad = chunk.rows.start + int(np.flatnonzero(np.asarray(col.is_null()))[0])
            raise DedupInputError(f"{chunk.rows.path}: row {bad}: field {field!r} is null (source {chunk.source})")
    signed = mh.sign_texts(t.column("text"), chunk.num_perm, chunk.shingle, chunk.seed, threads=chunk.threads)
    return SignedChunk(t.column("doc_id").combine_chunks().cast(pa.string()), signed.exact_keys,
                       signed.signatures, signed.n_words, signed.n_shingles,
                       np.asarray(t.column("n_chars").fill_null(0), dtype=np.int64),
                       int(pc.sum(pc.binary_length(t.column("text"))).as_py() or 0))


def sign_chunks(sources: Mapping[str, str | engine.FileAt], params: DedupParams,
                eng: engine.Engine) -> list[SignChunk]:
    """The map tasks, sources in sorted order (one map over all of them), each file cut into
    `eng.chunk_rows` row ranges; a `FileAt` (tables.raw_files) names where any worker reads it."""
    parallel = eng.kind == "ray" or eng.num_cpus > 1
    out = []
    for name in sorted(sources):
        _check_columns(sources[name], name)
        out += [SignChunk(name, rng, params.num_perm, params.shingle, params.seed, 1 if parallel else params.threads)
                for rng in engine.row_ranges(sources[name], eng.chunk_rows)]
    return out


def dedup_keys_table(
    sources: Mapping[str, str], priorities: Mapping[str, int], params: DedupParams,
    eng: engine.Engine = engine.Engine(), log=None, storage=None, raw_versions: Optional[Mapping[str, str]] = None,
    rejected: Optional[pa.Array] = None,
) -> tuple[pa.Table, dict]:
    """Dedup keys for every document of every source ({source: documents parquet path or `engine.FileAt`}).

    Map (`sign_sources`): `sign_chunk` over bounded row ranges on `eng` (in process or Ray tasks),
    written per source to `storage` (layout.DEDUP_SIGNATURES; a temporary folder without one);
    a source whose `raw_versions` entry and parameters match its stored file is not signed again.
    Reduce (`reduce_signatures`): LSH band by band from the stored files, exact verification and
    the keep rule in this process. Returns the table (DEDUP_SCHEMA, rows sorted by doc_id) and stage
    statistics. With `log` (an object with `info`), the map logs progress lines. `rejected`: doc ids
    the filters rejected (document_filters); they rank below every other member in the keep rule.
    """
    if storage is None:
        with tempfile.TemporaryDirectory(prefix="dedup-signatures-") as tmp:
            return dedup_keys_table(sources, priorities, params, eng, log, Storage(tmp), rejected=rejected)
    reused = sign_sources(storage, sources, raw_versions or {}, params, eng, log)
    table, stats = reduce_signatures(storage, sources, priorities, params, rejected)
    return table, dict(stats, reused_sources=reused)


def signatures_key(source: str) -> str:
    return layout.DEDUP_SIGNATURES.format(source=source)


def sign_sources(storage, sources: Mapping[str, str], raw_versions: Mapping[str, str], params: DedupParams,
                 eng: engine.Engine, log=None) -> list[str]:
    """Write each source's signature file unless the stored one matches; returns the reused sources."""
    names = sorted(sources)
    want = {n: sig.describe(raw_versions.get(n), params.num_perm, params.shingle, params.seed) for n in names}
    reused = sorted(stored_signatures(storage, sources, raw_versions, params))
    todo = [n for n in names if n not in reused]
    if log and reused:
        log.info(f"dedup_keys signatures: reusing the stored signatures of {', '.join(reused)} (raw data unchanged)")
    chunks = sign_chunks({n: sources[n] for n in todo}, params, eng)
    results = zip(chunks, engine.map_chunks(sign_chunk, chunks, eng))
    n_docs = sum(c.rows.stop - c.rows.start for c in chunks)
    prog = Progress(log, "dedup_keys signatures", total_docs=n_docs) if log else None
    for name in todo:
        schema = sig.schema(params.num_perm, want[name])

        def parts(k: int = sum(c.source == name for c in chunks)):
            for _, signed in itertools.islice(results, k):
                if prog:
                    prog.update(docs=len(signed.exact_keys), bytes=signed.text_bytes)
                yield sig.table(signed.doc_ids, signed.exact_keys, signed.n_shingles, signed.n_chars,
                                signed.n_words, signed.signatures, schema)

        tables.write_parquet_groups(storage, signatures_key(name), schema,
                                    sig.regroup(parts(), sig.GROUP_ROWS, schema))
    if prog:
        prog.done()
    return reused


def stored_signatures(storage, sources: Mapping[str, str], raw_versions: Mapping[str, str],
                      params: DedupParams) -> dict:
    """{source: readable signature file} of the sources whose stored file was computed from their current
    raw version ({source: data version}) with these parameters and has a row per raw row."""
    out = {}
    for n in sorted(sources):
        key = signatures_key(n)
        want = sig.describe(raw_versions.get(n), params.num_perm, params.shingle, params.seed)
        with engine.open_parquet(sources[n]) as f:
            rows = f.metadata.num_rows
        if storage.exists(key) and sig.matches(storage.source(key), want, rows):
            out[n] = storage.source(key)
    return out


def reduce_signatures(storage, sources: Mapping[str, str], priorities: Mapping[str, int],
                      params: DedupParams, rejected: Optional[pa.Array] = None) -> tuple[pa.Table, dict]:
    """LSH banding over the stored signature files (one band's columns at a time), then clusters.

    Held per document: doc_id and exact_key (Arrow), a few int64 arrays and the keep rule's sort
    keys; never the signature matrix (docs/scale.md gives the measured bytes per document).
    """
    b, r = params.bands_rows
    names = sorted(sources)
    stored = sig.Stored([storage.source(signatures_key(n)) for n in names], params.num_perm)
    meta = stored.read(sig.SCALARS)
    src = np.repeat(np.arange(len(names), dtype=np.int16), stored.rows)
    first_row = dict(zip(names, np.r_[0, np.cumsum(stored.rows)[:-1]].tolist()))
    doc_ids = meta.column("doc_id").combine_chunks()
    labels = lsh.key_groups(meta.column("exact_key").combine_chunks())  # the key strings are read again below
    nsh, nch = (meta.column(c).to_numpy() for c in ("n_shingles", "n_chars"))
    del meta
    prio = np.asarray([priorities.get(n, 0) for n in names], dtype=np.int64)[src]
    demoted = None if rejected is None else pc.is_in(doc_ids, value_set=rejected).to_numpy(zero_copy_only=False)
    with tempfile.TemporaryDirectory(prefix="dedup-shingles-") as spill:  # candidates' shingle sets, on disk
        sets = sig.shingle_reader(sources, first_row, params.shingle, spill, READ_BATCH_ROWS)
        res = lsh.dedup(doc_ids, labels, stored, nsh, nch, prio, b, r, params.threshold, shingle_sets=sets,
                        demoted=demoted)
    del prio, nsh, nch, labels, demoted
    canon = pa.array(np.asarray(pc.sort_indices(doc_ids), dtype=np.int64))  # = by doc_id (ids are unique)
    cols = {"doc_id": doc_ids.take(canon), "source": pa.array(names, pa.string()).take(pa.array(src).take(canon))}
    cols["exact_key"] = stored.read(["exact_key"]).column(0).take(canon).combine_chunks()
    cols["cluster_id"] = doc_ids.take(pa.array(res.kept_index).take(canon))
    del doc_ids
    for name, values in (("cluster_size", res.cluster_size), ("keep", res.keep), ("reason", res.code),
                         ("jaccard_to_kept", res.jaccard_to_kept)):
        cols[name] = pa.array(values).take(canon)
    cols["reason"] = pa.array(list(lsh.REASONS), pa.string()).take(cols["reason"])
    cols["n_words"] = stored.read(["n_words"]).column(0).take(canon).combine_chunks()
    table = pa.table(cols, schema=DEDUP_SCHEMA)
    stats = dict(res.stats, bands=b, rows=r, threshold=params.threshold, num_perm=params.num_perm)
    stats["per_source"] = _per_source_kills(names, src, res.code)
    return table, stats


def _per_source_kills(names: list[str], src: np.ndarray, code: np.ndarray) -> dict:
    """{source: documents, exact_dup, near_dup} from per-document source indices and lsh codes."""
    counts = np.zeros((len(names), 3), np.int64)
    np.add.at(counts, (src.astype(np.int64), code.astype(np.int64)), 1)
    return {n: {"documents": int(counts[k].sum()), "exact_dup": int(counts[k, lsh.EXACT_DUP]),
                "near_dup": int(counts[k, lsh.NEAR_DUP])} for k, n in enumerate(names) if counts[k].sum()}


def check_clusters(table: pa.Table, limit: int = 20) -> list[str]:
    """Problems with a dedup keys table (empty list = consistent), at most `limit`: doc_id uniqueness, then
    per cluster in order of first appearance its id, kept count and sizes, then its members' reasons in
    row order, then exact keys spread over several clusters. Columns as numpy arrays, no per-document
    Python objects."""
    n = table.num_rows
    doc = table.column("doc_id").combine_chunks()
    problems = [] if len(_codes(table.column("doc_id"))[1]) == n else ["doc_id is not unique"]
    code, clusters = _codes(table.column("cluster_id"))
    keep = np.asarray(table.column("keep").fill_null(False).to_numpy(), bool)
    size = np.bincount(code, minlength=len(clusters))
    # each cluster id's row (a doc_id twice: its last row)
    at = pc.index_in(clusters, value_set=doc.take(pa.array(np.arange(n - 1, -1, -1, dtype=np.int64))))
    found = at.is_valid().to_numpy(zero_copy_only=False)
    row = np.where(found, n - 1 - at.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64), 0)
    bad_id = ~found | ~keep[row] if n else found
    bad_kept = np.bincount(code, weights=keep, minlength=len(clusters)) != 1
    cs = np.asarray(table.column("cluster_size").fill_null(-1).to_numpy(), np.int64)
    bad_size = np.bincount(code, weights=cs != size[code], minlength=len(clusters)) > 0
    kc, _ = _codes(table.column("exact_key"))
    same = (kc == kc[row[code]]) & found[code]
    want = np.where(keep, 0, np.where(same, 1, 2))  # REASON_NAMES
    reason = table.column("reason")
    got = np.select([reason.is_null().to_numpy(zero_copy_only=False),
                     pc.equal(reason, "exact_dup").fill_null(False).to_numpy(zero_copy_only=False),
                     pc.equal(reason, "near_dup").fill_null(False).to_numpy(zero_copy_only=False)], [0, 1, 2], 3)
    bad_rows = np.flatnonzero(got != want)
    # problems in table order: (cluster, kind, row), kinds 0-2 per cluster, 3 per member
    ks = [np.flatnonzero(b) for b in (bad_id, bad_kept, bad_size)] + [code[bad_rows]]
    kinds = np.repeat(np.arange(4), [len(k) for k in ks])
    rows = np.concatenate([np.zeros(sum(len(k) for k in ks[:3]), np.int64), bad_rows])
    clus = np.concatenate(ks)
    for i in np.lexsort((rows, kinds, clus))[:limit].tolist():
        c, kind, r = clusters[int(clus[i])].as_py(), int(kinds[i]), int(rows[i])
        if kind == 0:
            problems.append(f"cluster {c}: its id is not a kept document")
        elif kind == 1:
            problems.append(f"cluster {c}: {int(keep[code == clus[i]].sum())} kept members (expected 1)")
        elif kind == 2:
            problems.append(f"cluster {c}: cluster_size differs from its {int(size[clus[i]])} members")
        else:
            problems.append(f"doc {doc[r].as_py()}: reason {reason[r].as_py()!r}, "
                            f"expected {REASON_NAMES[int(want[r])]!r}")
    some = np.zeros(int(kc.max()) + 1 if n else 0, np.int64)
    some[kc] = code  # one member's cluster per exact key (any member: a key is split iff others differ)
    split = int((np.bincount(kc[code != some[kc]], minlength=len(some)) > 0).sum())
    if split:
        problems.append(f"{split} exact key(s) spread over several clusters")
    return problems[:limit]


REASON_NAMES = (None, "exact_dup", "near_dup")


def _codes(col) -> tuple[np.ndarray, pa.Array]:
    """(int64 code per row, the distinct values in order of first appearance; null is a value)."""
    enc = pc.dictionary_encode(col.combine_chunks(), null_encoding="encode")
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), enc.dictionary


# -- exclusion masks ---------------------------------------------------------------------------
def exclusion_table(dedup_keys: pa.Table, contaminated: Optional[pa.Table],
                    rejected: Optional[Mapping[str, str]] = None) -> pa.Table:
    """One row per excluded document: doc_id, source, reasons (sorted list), kept_doc_id.

    `contaminated` (doc_id, source, ...) or None when contaminated documents are not masked. A
    contaminated survivor is excluded too; its cluster is then not re-elected (its duplicates
    carry the same text and stay excluded as duplicates). `rejected` ({doc_id: first failing rule},
    document_filters): each gets a row whose reasons include that rule.
    """
    d = dedup_keys.select(["doc_id", "source", "reason", "cluster_id"]).to_pydict()
    rows: dict[str, dict] = {}
    for doc, src, reason, cluster in zip(d["doc_id"], d["source"], d["reason"], d["cluster_id"]):
        if reason is not None:
            rows[doc] = {"doc_id": doc, "source": src, "reasons": {reason}, "kept_doc_id": cluster}
    if contaminated is not None:
        known = dict(zip(d["doc_id"], d["source"]))
        for doc in contaminated.column("doc_id").to_pylist():
            if doc not in known:
                raise DedupInputError(f"contaminated_docs: doc_id {doc!r} is not in the dedup keys")
            row = rows.setdefault(doc, {"doc_id": doc, "source": known[doc], "reasons": set(), "kept_doc_id": None})
            row["reasons"].add("contaminated")
    if rejected:
        known = dict(zip(d["doc_id"], d["source"]))
        for doc, reason in rejected.items():
            if doc not in known:
                raise DedupInputError(f"filter decisions: doc_id {doc!r} is not in the dedup keys")
            rows.setdefault(doc, {"doc_id": doc, "source": known[doc], "reasons": set(), "kept_doc_id": None})
            rows[doc]["reasons"].add(reason)
    out = [dict(r, reasons=sorted(r["reasons"])) for _, r in sorted(rows.items())]
    return pa.Table.from_pylist(out, schema=EXCLUSION_SCHEMA)


def composition(docs: pa.Table, excluded_ids: set[str], sources: Iterable[str]) -> list[dict]:
    """Per source before/after: documents, bytes, est. tokens, token share of the mix."""
    d = docs.select(["doc_id", "source", "n_bytes", "est_tokens"]).to_pydict()
    agg = {s: dict(source=s, docs_before=0, docs_after=0, bytes_before=0, bytes_after=0,
                   tokens_before=0, tokens_after=0) for s in sources}
    for doc, s, nb, nt in zip(d["doc_id"], d["source"], d["n_bytes"], d["est_tokens"]):
        a = agg.setdefault(s, dict(source=s, docs_before=0, docs_after=0, bytes_before=0, bytes_after=0,
                                   tokens_before=0, tokens_after=0))
        a["docs_before"] += 1
        a["bytes_before"] += nb
        a["tokens_before"] += nt
        if doc not in excluded_ids:
            a["docs_after"] += 1
            a["bytes_after"] += nb
            a["tokens_after"] += nt
    tb = sum(a["tokens_before"] for a in agg.values()) or 1
    ta = sum(a["tokens_after"] for a in agg.values()) or 1
    out = []
    for s in sorted(agg):
        a = agg[s]
        a["share_before"] = a["tokens_before"] / tb
        a["share_after"] = a["tokens_after"] / ta
        a["lost_token_share"] = 1 - a["tokens_after"] / a["tokens_before"] if a["tokens_before"] else 0.0
        out.append(a)
    return out


def _rank(doc_id: str) -> str:
    # A stable pseudo-random order: the sample does not depend on input order or worker count.
    return hashlib.sha256(doc_id.encode()).hexdigest()


def reject_samples(
    dedup_keys: pa.Table, contaminated_ids: set[str], per_reason: int = 5
) -> dict[str, list[tuple[str, str, float]]]:
    """Per dedup reason up to `per_reason` (excluded doc_id, kept doc_id, est. Jaccard) pairs.

    Pairs where either side is contaminated are left out here (they are listed by id only).
    """
    d = dedup_keys.select(["doc_id", "reason", "cluster_id", "jaccard_to_kept"]).to_pydict()
    out: dict[str, list] = {}
    for reason in ("exact_dup", "near_dup"):
        cand = [
            (doc, kept, float(j))
            for doc, r, kept, j in zip(d["doc_id"], d["reason"], d["cluster_id"], d["jaccard_to_kept"])
            if r == reason and doc not in contaminated_ids and kept not in contaminated_ids
        ]
        # Near-dups: show the least similar first (the ones a reviewer must judge), then random.
        if reason == "near_dup":
            cand.sort(key=lambda x: (x[2], _rank(x[0])))
            half = per_reason // 2 + per_reason % 2
            picked = cand[:half] + sorted(cand[half:], key=lambda x: _rank(x[0]))[: per_reason - half]
        else:
            picked = sorted(cand, key=lambda x: _rank(x[0]))[:per_reason]
        out[reason] = picked
    return out


def snippets(paths: Mapping[str, str], wanted: set[str], chars: int = 240) -> dict[str, str]:
    """First `chars` characters (whitespace collapsed) of the wanted documents' texts."""
    out: dict[str, str] = {}
    if not wanted:
        return out
    want = pa.array(sorted(wanted), pa.string())
    for name in sorted(paths):
        f = pq.ParquetFile(paths[name])
        for batch in f.iter_batches(batch_size=READ_BATCH_ROWS, columns=["doc_id", "text"]):
            mask = pc.is_in(batch.column("doc_id").cast(pa.string()), value_set=want)
            if not pc.any(mask).as_py():
                continue
            sel = batch.filter(mask)
            for doc, text in zip(sel.column("doc_id").to_pylist(), sel.column("text").to_pylist()):
                flat = " ".join((text or "").split())
                out[doc] = flat[:chars] + ("…" if len(flat) > chars else "")
    return out


# -- the exclusion_masks stage ---------------------------------------------------------------------


def dedup_params(spec) -> DedupParams:
    """The stage's parameters from the mix spec's `dedup` section."""
    d = spec.dedup
    return DedupParams(shingle=d.shingle_words, num_perm=d.num_perm, threshold=d.threshold,
                       fp_weight=d.lsh_fp_weight, fn_weight=d.lsh_fn_weight, threads=d.threads)


def docs_meta(paths: Mapping[str, str]) -> pa.Table:
    """doc_id, source, n_bytes, est_tokens of every raw document (nulls refused, naming the file)."""
    cols = ["doc_id", "source", "n_bytes", "est_tokens"]
    schema = pa.schema([("doc_id", pa.string()), ("source", pa.string()),
                        ("n_bytes", pa.int64()), ("est_tokens", pa.int64())])
    parts = []
    for name in sorted(paths):
        t = pq.read_table(paths[name], columns=cols)
        for c in ("n_bytes", "est_tokens"):
            if t.column(c).null_count:
                raise DedupInputError(f"{paths[name]}: field {c!r} has nulls (source {name})")
        parts.append(t.cast(schema))
    return pa.concat_tables(parts)


def read_contaminated(storage) -> Optional[pa.Table]:
    """contamination_report's contaminated_docs.parquet, or None when it was never written."""
    if not storage.exists(layout.CONTAMINATED_DOCS):
        return None
    t = tables.read_parquet(storage, layout.CONTAMINATED_DOCS)
    if "doc_id" not in t.column_names:
        raise DedupInputError(f"{storage.uri(layout.CONTAMINATED_DOCS)}: missing column 'doc_id'")
    return t


@dataclass
class RejectSample:
    reason: str
    excluded: str
    kept: str
    jaccard: float
    excluded_text: str
    kept_text: str


@dataclass
class Masks:
    """What exclusion_masks wrote and what its checks judge (ids and counts; dup snippets only)."""

    table: pa.Table  # EXCLUSION_SCHEMA
    documents: int  # documents before the masks (rows of dedup_keys)
    composition: list[dict]  # per source before/after, see `composition`
    per_reason: dict[str, int]  # excluded documents per reason
    samples: list[RejectSample]
    contaminated_ids: list[str]  # sorted; their text is never read
    minimum_tokens: dict[str, int]  # per configured source
    mask_contaminated: bool

    @property
    def vanished(self) -> list[str]:
        return [a["source"] for a in self.composition if a["docs_after"] == 0]

    @property
    def short(self) -> dict[str, tuple[int, int]]:
        """Sources keeping fewer tokens than their minimum: {source: (kept, minimum)}."""
        return {a["source"]: (a["tokens_after"], self.minimum_tokens[a["source"]]) for a in self.composition
                if a["source"] in self.minimum_tokens and a["tokens_after"] < self.minimum_tokens[a["source"]]}

    def lossy(self, limit: float) -> dict[str, float]:
        return {a["source"]: a["lost_token_share"] for a in self.composition if a["lost_token_share"] > limit}


def build_exclusion_masks(storage, spec) -> Masks:
    """Write the exclusion masks and the composition before/after them; pick reject samples."""
    keys = tables.read_parquet(storage, layout.DEDUP_KEYS)
    contaminated = read_contaminated(storage)
    mask = spec.audit.mask_contaminated
    if mask and contaminated is None:
        raise FileNotFoundError(
            f"{storage.uri(layout.CONTAMINATED_DOCS)}: not found; audit.mask_contaminated is on, so "
            "contamination_report must be materialised first"
        )
    contaminated_ids = set(contaminated.column("doc_id").to_pylist()) if contaminated is not None else set()
    from mix_assets.lib import docfilters  # the filters' decisions: one more reason to exclude

    rejected = docfilters.rejected_ids(storage, docfilters.filtered_sources(spec))
    table = exclusion_table(keys, contaminated if mask else None, rejected)
    tables.write_parquet(storage, layout.EXCLUSION_MASKS, table)
    names = [s.name for s in spec.sources]
    paths = tables.raw_paths(storage, names)
    comp = composition(docs_meta(paths), set(table.column("doc_id").to_pylist()), names)
    storage.write_text(layout.COMPOSITION, json.dumps(comp, indent=1, sort_keys=True))
    reasons = table.column("reasons").to_pylist()
    per_reason = {r: sum(1 for rs in reasons if r in rs) for r in ("exact_dup", "near_dup", "contaminated")}
    if docfilters.filtered_sources(spec):
        per_reason["filtered"] = len(rejected)
    return Masks(table, keys.num_rows, comp, per_reason,
                 _samples(keys, contaminated_ids, paths, spec.dedup.samples_per_reason),
                 sorted(contaminated_ids), {s: spec.minimum_tokens(s) for s in names}, mask)


def _samples(keys: pa.Table, contaminated_ids: set[str], paths, per_reason: int) -> list[RejectSample]:
    picked = reject_samples(keys, contaminated_ids, per_reason)
    wanted = {x for pairs in picked.values() for p in pairs for x in p[:2]}
    assert not wanted & contaminated_ids  # contaminated text is never read into metadata
    snip = snippets(paths, wanted)
    return [RejectSample(reason, ex, kept, j, snip.get(ex, ""), snip.get(kept, ""))
            for reason, pairs in picked.items() for ex, kept, j in pairs]
