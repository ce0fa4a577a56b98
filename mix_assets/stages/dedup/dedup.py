"""The dedup stage over the merged pool, and the exclusion masks built from it (no Dagster here).

`dedup_keys_table` is a map and a reduce. Map (`sign_sources`): each source's documents parquet in
row-range chunks (doc_id, text, n_chars read; the text dropped after signing), written per source
to `dedup/signatures/<source>.parquet` (stages/dedup/signatures.py) and reused while the source's raw data
and the parameters are unchanged. Reduce (`reduce_signatures`): LSH band by band over those files
(one band's columns in memory per band task), then a pass reading the text of the documents in
candidate pairs only (one task per raw row group), whose shingle sets (8 B per distinct shingle of
those documents, spilled to disk) verify every candidate by exact Jaccard (chunks of pairs as
tasks); the candidate pairs' union, the clusters and the keep rule as partition tasks
(stages/dedup/partitioned.py, `dedup.partitions`; the bytes do not depend on it), and every per-document step
(sort by doc_id, exact groups, keep keys, the table's rows) as tasks over doc_id ranges
(stages/dedup/docparts.py): `reduce_to` writes the file from the ranges' parts, holding no per-document array. The verified
Jaccards are stored per pair of sources (stages/dedup/pairs.py): a rerun compares only the candidate
pairs they do not hold. The tasks run on the same engine as the map, results taken in task order,
so the bytes do not depend on the worker count.

exclusion_masks runs as tasks over row ranges (issue 29): `exclusion_task` reads a range of dedup_keys
(sorted by doc_id) and unions each document's reasons (dedup's, contaminated, the filters' rules from
`Rejections`; `union_reasons` is the one place) into one row per excluded document; `composition_task`
counts a raw range before and after; `sample_task` keeps only each reason's best candidates of a range.
A row's outcome depends on that row alone (and the contaminated / rejected sets), so ranges need no shuffle:
the driver takes the parts in order, checks the order across them and writes them (the same bytes for any
range size or worker count). Held in the driver per document: the ids of excluded, contaminated and
rejected documents (`IdSet`, the id's bytes + 1 each), nothing per kept document. Text of a document
flagged contaminated is never read into a sample.
"""

from __future__ import annotations

import functools
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

from mix_assets.core import chunks, engine, layout, tables
from mix_assets.stages.dedup import docparts, lsh, pairs, partitioned
from mix_assets.core import textkeys as tk
from mix_assets.stages.audit.contamination import ordered_map
from mix_assets.core.idset import UNSORTED, IdSet, unsorted_row
from mix_assets.stages.dedup import signatures as sig
from mix_assets.stages.dedup import minhash as mh
from mix_assets.stages.filters import decisions
from mix_assets.stages.lines import lines as lines_lib
from mix_assets.core.progress import Progress, reused_line
from mix_assets.core.storage import Storage

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
    """What the stage needs from the mix spec (kept separate so the logic takes no pydantic model)."""

    shingle: int = 5
    num_perm: int = 128
    threshold: float = 0.8
    fp_weight: float = 0.05
    fn_weight: float = 0.95
    seed: int = mh.DEFAULT_SEED
    threads: int = 2
    partitions: int = 1  # node partitions of the reduce's tasks (stages/dedup/partitioned.py); never in the bytes

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
    bad = null_field(t, chunk.rows)
    if bad:
        raise DedupInputError(f"{bad} (source {chunk.source})")
    text = t.column("text").combine_chunks()
    a, b = mh.permutations(chunk.num_perm, chunk.seed)
    batches = [text.slice(s, e - s) for s, e in mh._batches(text, mh.BATCH_BYTES)]  # ~1 MB of text each
    sign = functools.partial(sign_texts, a=a, b=b, shingle=chunk.shingle)
    return signed_chunk(t, list(ordered_map(sign, batches, chunk.threads)), chunk.num_perm)


def null_field(t: pa.Table, rows: engine.RowRange) -> Optional[str]:
    """"<file>: row <n>: field 'x' is null" for the first null doc_id or text of rows `rows` (read as `t`)."""
    for field in ("doc_id", "text"):
        col = t.column(field)
        if col.null_count:
            bad = rows.start + int(np.flatnonzero(np.asarray(col.is_null()))[0])
            return f"{rows.path}: row {bad}: field {field!r} is null"
    return None


def sign_texts(texts: pa.Array, a: np.ndarray, b: np.ndarray, shingle: int) -> mh.Batch:
    """Normalise a batch of texts and sign it (`minhash.sign_words`)."""
    return mh.sign_words(tk.word_keys(texts), a, b, shingle)


def signed_chunk(t: pa.Table, parts: list[mh.Batch], num_perm: int) -> SignedChunk:
    """A chunk's signatures from its rows `t` (doc_id, text, n_chars) and its batches' `sign_words`
    results, in row order."""
    if not parts:
        none = np.zeros(0, np.int64)
        parts = [mh.Batch(np.zeros((0, num_perm), np.uint32), none, none, [])]
    cat = {f: np.concatenate([getattr(p, f) for p in parts]) for f in ("signatures", "n_words", "n_shingles")}
    keys = [k for p in parts for k in p.exact_keys]
    return SignedChunk(t.column("doc_id").combine_chunks().cast(pa.string()), keys,
                       cat["signatures"], cat["n_words"], cat["n_shingles"],
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
    Reduce (`reduce_signatures`): LSH band by band from the stored files and exact verification
    (both as tasks on `eng` too), then clusters and the keep rule as partition tasks (`params.partitions`).
    Returns the table (DEDUP_SCHEMA, rows sorted by doc_id) and stage statistics. With `log` (an object
    with `info`), the map logs progress lines. `rejected`: doc ids the filters rejected
    (document_filters); they rank below every other member in the keep rule.
    """
    if storage is None:
        with tempfile.TemporaryDirectory(prefix="dedup-signatures-") as tmp:
            return dedup_keys_table(sources, priorities, params, eng, log, Storage(tmp), rejected=rejected)
    reused = sign_sources(storage, sources, raw_versions or {}, params, eng, log)
    table, stats = reduce_signatures(storage, sources, priorities, params, rejected, eng)
    return table, dict(stats, reused_sources=reused)


def write_dedup_keys(
    storage, key: str, sources: Mapping[str, str], priorities: Mapping[str, int], params: DedupParams,
    eng: engine.Engine = engine.Engine(), log=None, raw_versions: Optional[Mapping[str, str]] = None,
    rejected: Optional[pa.Array] = None,
) -> dict:
    """`dedup_keys_table` written to `key` of `storage` by `reduce_to` (the table never whole in this process);
    returns the statistics."""
    reused = sign_sources(storage, sources, raw_versions or {}, params, eng, log)
    return dict(reduce_to(storage, key, sources, priorities, params, rejected, eng), reused_sources=reused)


def signatures_key(source: str) -> str:
    return layout.DEDUP_SIGNATURES.format(source=source)


PARTS_STAGE = "signatures"  # core/chunks.py: parts/signatures/ (dedup_keys' map and contamination_report's signing)


def signature_parts(storage) -> chunks.Parts:
    """Where a source's signed chunks wait for its signature file (written by dedup_keys' map and by
    contamination_report's signing pass under the same keys, so either resumes from the other's)."""
    return chunks.Parts(storage, PARTS_STAGE)


def sign_sources(storage, sources: Mapping[str, str], raw_versions: Mapping[str, str], params: DedupParams,
                 eng: engine.Engine, log=None) -> list[str]:
    """Write each source's signature file unless the stored one matches; returns the reused sources
    (signed by an earlier dedup_keys or by contamination_report's pass, `signing_plan`).

    Each signed chunk is stored as a part (core/chunks.py) as it arrives; a rerun after a kill (or after
    a contamination_report pass that signed part of a source) signs only the chunks without a part, and
    the file is assembled from both in row order (the same bytes), then the source's parts are deleted."""
    names = sorted(sources)
    reused = sorted(stored_signatures(storage, sources, raw_versions, params))
    todo = [n for n in names if n not in reused]
    if log and reused:
        log.info(reused_line("dedup_keys signatures", "signatures", {n: _raw_rows(sources[n]) for n in reused},
                             "raw data and parameters unchanged; signed by an earlier dedup_keys or by "
                             "contamination_report's pass"))
    store = signature_parts(storage)
    meta = {n: signature_meta(raw_versions.get(n), params) for n in todo}
    work = sign_chunks({n: sources[n] for n in todo}, params, eng)
    keys, have, _ = store.keyed("dedup_keys signatures", [(c.source, c.rows) for c in work], meta, log)
    part_schema = sig.schema(params.num_perm, {}).remove_metadata()
    results = chunks.resume(sign_chunk, work, keys, eng, store, have=have,
                            encode=lambda _, s: signed_table(s, part_schema))
    n_docs = sum(c.rows.stop - c.rows.start for c, k in zip(work, keys) if k not in have)
    # a progress line only for work done: with everything reused it would read "0 docs, 0B | 0 docs/s"
    prog = Progress(log, "dedup_keys signatures", total_docs=n_docs) if log and n_docs else None
    for name in todo:
        mine = [k for c, k in zip(work, keys) if c.source == name]

        def signed(k: int = len(mine)):
            for t, got in itertools.islice(results, k):
                if prog and got is not None:
                    prog.update(docs=len(got.exact_keys), bytes=got.text_bytes)
                yield t

        write_signature_tables(storage, name, meta[name], params.num_perm, signed())
        store.drop(mine)
    if prog:
        prog.done()
    return reused


def _raw_rows(source) -> int:
    """Rows of a raw documents file (a stored signature file has one per raw row)."""
    with engine.open_parquet(source) as f:
        return f.metadata.num_rows


def signature_meta(raw_version: Optional[str], params: DedupParams) -> dict:
    """What a source's signature file records it was computed from (`signatures.describe`)."""
    return sig.describe(raw_version, params.num_perm, params.shingle, params.seed)


def signed_table(s: SignedChunk, schema: pa.Schema) -> pa.Table:
    """A signed chunk as a signature file's rows (`signatures.table`)."""
    return sig.table(s.doc_ids, s.exact_keys, s.n_shingles, s.n_chars, s.n_words, s.signatures, schema)


def write_signatures(storage, name: str, meta: dict, num_perm: int, signed: Iterable[SignedChunk]) -> None:
    """A source's signature file from its chunks' results in row order, GROUP_ROWS rows per row group,
    holding one group at a time (dedup_keys' map and contamination_report's pass write the same bytes)."""
    schema = sig.schema(num_perm, meta)
    write_signature_tables(storage, name, meta, num_perm, (signed_table(s, schema) for s in signed))


def write_signature_tables(storage, name: str, meta: dict, num_perm: int, parts: Iterable[pa.Table]) -> None:
    """`write_signatures` from the chunks' tables (`signed_table`, with or without the file's metadata)."""
    schema = sig.schema(num_perm, meta)
    groups = sig.regroup((t.replace_schema_metadata(schema.metadata) for t in parts), sig.GROUP_ROWS, schema)
    tables.write_parquet_groups(storage, signatures_key(name), schema, groups)


def signing_plan(storage, sources: Mapping[str, str], raw_versions: Mapping[str, str],
                 params: DedupParams) -> dict[str, dict]:
    """{source: `signature_meta`} of the sources another pass over the same text (contamination_report's)
    signs for dedup_keys: the stored file does not match, and is absent or computed from another raw
    version. A file computed from the current raw version with other parameters or code stays: a
    dedup_keys whose lineage still holds may have been computed from it, and only dedup_keys replaces
    it. A source without a raw version or an n_chars column is left to dedup_keys (and its errors)."""
    stored = stored_signatures(storage, sources, raw_versions, params)
    out = {}
    for n in sorted(sources):
        key, raw = signatures_key(n), raw_versions.get(n)
        if n in stored or raw is None:
            continue
        if storage.exists(key) and (sig.stored_meta(storage.source(key)) or {}).get("raw") == raw:
            continue
        with engine.open_parquet(sources[n]) as f:
            if "n_chars" in f.schema_arrow.names:
                out[n] = signature_meta(raw, params)
    return out


def stored_signatures(storage, sources: Mapping[str, str], raw_versions: Mapping[str, str],
                      params: DedupParams) -> dict:
    """{source: readable signature file} of the sources whose stored file was computed from their current
    raw version ({source: data version}) with these parameters and has a row per raw row."""
    out = {}
    for n in sorted(sources):
        key = signatures_key(n)
        want = signature_meta(raw_versions.get(n), params)
        with engine.open_parquet(sources[n]) as f:
            rows = f.metadata.num_rows
        if storage.exists(key) and sig.matches(storage.source(key), want, rows):
            out[n] = storage.source(key)
    return out


def reduce_signatures(storage, sources: Mapping[str, str], priorities: Mapping[str, int],
                      params: DedupParams, rejected: Optional[pa.Array] = None,
                      eng: Optional[engine.Engine] = None, reuse_pairs: bool = True) -> tuple[pa.Table, dict]:
    """`reduce_to` into a scratch file of `storage`, read back: (the dedup_keys table, statistics)."""
    with partitioned.scratch(storage, "dedup_keys_table") as out:
        key = out.key("dedup_keys.parquet")
        stats = reduce_to(storage, key, sources, priorities, params, rejected, eng, reuse_pairs)
        return tables.read_parquet(storage, key), stats


def reduce_to(storage, key: str, sources: Mapping[str, str], priorities: Mapping[str, int], params: DedupParams,
              rejected: Optional[pa.Array] = None, eng: Optional[engine.Engine] = None,
              reuse_pairs: bool = True) -> dict:
    """Write dedup_keys (DEDUP_SCHEMA, rows sorted by doc_id) to `key` from the stored signature files; returns
    the stage statistics. Every per-document step runs as tasks on `eng` (default: this thread) over doc_id
    ranges, exact-key partitions and node partitions (`params.partitions` of each; stages/dedup/docparts.py):
    LSH band by band, the candidates' text pass (read + shingle sets, one task per raw row group) and the
    verification's chunks, components and the keep rule. The bytes do not depend on the partitions or the
    engine, and are `lsh.dedup`'s. This process holds the candidate pairs and their Jaccards, the near
    duplicates' pairs and one row group of the table while it copies the ranges' parts into the file.
    With `reuse_pairs`, verified Jaccards are taken from and stored to layout.DEDUP_PAIRS per pair of
    sources (stages/dedup/pairs.py): a rerun with one source changed compares only the pairs involving it.
    """
    b, r = params.bands_rows
    if params.partitions < 1:
        raise ValueError(f"dedup: partitions is {params.partitions}, expected at least 1")
    P, eng = params.partitions, eng or engine.Engine(num_cpus=1)
    names = sorted(sources)
    files = [tables.file_at(storage, signatures_key(n)) for n in names]
    stored = sig.Stored(files, params.num_perm)
    first_row = np.r_[0, np.cumsum(stored.rows)[:-1]].astype(np.int64).tolist()
    rej = IdSet(rejected) if rejected is not None else None
    run = functools.partial
    with tempfile.TemporaryDirectory(prefix="dedup-shingles-") as spill, \
            partitioned.scratch(storage) as sc:  # the tasks' parts (rows, pairs, shingle sets), under the storage root
        st = docparts.Setup(sc, tuple(names), tuple(files), tuple(first_row),
                            tuple(int(priorities.get(x, 0)) for x in names), rej, P)
        chunks_ = docparts.chunks_of(st, max(eng.chunk_rows, docparts.CHUNK_ROWS))
        cuts = docparts.splitters(list(engine.map_chunks(run(docparts.sample_task, P), chunks_, eng)), P) \
            if P > 1 else ()
        n = sum(engine.map_chunks(run(docparts.scatter_task, st, cuts), chunks_, eng))
        ranges = list(engine.map_chunks(run(docparts.sort_task, st, len(chunks_)), range(P), eng))
        dup = sorted(x for _, d, _ in ranges for x in d)[:5]
        if dup:
            raise ValueError(f"dedup: doc_id must be unique; repeated: {dup}")
        docparts.check_order(ranges)
        bounds = tuple(np.r_[0, np.cumsum([c for c, _, _ in ranges])].astype(np.int64).tolist())
        exact = list(engine.map_chunks(run(docparts.exact_task, st, bounds), range(P), eng))
        reps = tuple(x[0] for x in exact)
        prep = list(engine.map_chunks(run(docparts.prep_task, st, bounds, reps), range(P), eng))
        active = tuple(x[0] for x in prep)
        lsh_docs = sum(x[2] for x in prep)
        e = np.zeros(0, np.int64)
        c_lo, c_hi, i_lo, i_hi = (docparts.candidates(st, stored, active, b, r, lsh.GROUP_CAP, eng)
                                  if lsh_docs > 1 else (e, e, e, e))
        sets = sig.shingle_reader(sources, dict(zip(names, first_row)), params.shingle, spill, READ_BATCH_ROWS,
                                  eng, scratch=sc)
        known = pairs.PairStore.of(storage, names, stored.rows, params.shingle) if reuse_pairs else None
        # then by text: the pairs among a changed source's unchanged documents (its rows moved) too
        by_text = pairs.TextPairs(storage, files, stored.rows, params.shingle) if reuse_pairs else None
        verify = lsh.Verifier(sets, pairs.first_hit(known.cached, by_text.cached) if known else None)
        est = verify(i_lo, i_hi)  # loads the candidate documents' sets (unless `known` holds them all)
        ok = est >= params.threshold
        labels, rounds = partitioned.components(c_lo[ok], c_hi[ok], P, eng, sc,
                                                partitioned.Ranks(tuple(x[1] for x in prep), 5),
                                                tuple(x[1] for x in exact))
        got = list(engine.map_chunks(run(docparts.cluster_task, st, labels, bounds), range(P), eng))
        near = [np.concatenate([e, *(g[1][k] for g in got)]) for k in range(3)]
        # near duplicates: Jaccard of their exact representative to the survivor's (both candidate documents)
        jv = lsh._reused_jaccard(verify, near[1], near[2], (i_lo, i_hi, est), n) if len(near[0]) else np.zeros(0)
        jac = ("jaccard", tuple(partitioned._put_rows(sc, "jaccard", [near[0], jv.astype(np.float64).view(np.int64)],
                                                      P, docparts._ranged(near[0], np.asarray(bounds)))))
        done: list[dict] = []
        outs = engine.map_chunks(run(docparts.final_task, st, bounds, [g[0] for g in got], jac, DEDUP_SCHEMA),
                                 range(P), eng)

        def parts():
            for q, o in enumerate(outs):
                done.append(o)
                yield from docparts.iter_batches(sc, f"out-{q}")
                sc.storage().delete(sc.key(f"out-{q}"))

        tables.write_parquet_groups(storage, key, DEDUP_SCHEMA,
                                    docparts.row_groups(parts(), tables.ROW_GROUP_ROWS, DEDUP_SCHEMA))
    if known is not None:
        known.store(*verify.pairs())
        by_text.store(*verify.pairs())
    counts = sum((o["counts"] for o in done), np.zeros((len(names), 3), np.int64))
    members = sum(g[2]["members"] for g in got)
    multi = sum(g[2]["multi"] for g in got)
    stats = {
        "documents": n, "exact_groups": sum(x[2] for x in exact), "lsh_documents": lsh_docs,
        "no_shingle_documents": sum(x[3] for x in prep), "candidate_pairs": int(len(c_lo)), "verification": "exact",
        "confirmed_pairs": int(ok.sum()), "rejected_pairs": int(len(ok) - ok.sum()),
        "clusters": n - members + multi, "multi_member_clusters": multi,
        "largest_cluster": max([1 if n else 0] + [g[2]["largest"] for g in got]),
        "partitions": P, "component_rounds": rounds,
        "kept": int(counts[:, lsh.KEEP].sum()), "excluded_exact_dup": int(counts[:, lsh.EXACT_DUP].sum()),
        "excluded_near_dup": int(counts[:, lsh.NEAR_DUP].sum()),
        "confirmed_jaccard_min": float(est[ok].min()) if ok.any() else None,
        "rejected_jaccard_max": float(est[~ok].max()) if (~ok).any() else None,
        "pairs_compared": verify.compared,
        "bands": b, "rows": r, "threshold": params.threshold, "num_perm": params.num_perm,
        "per_source": {x: {"documents": int(counts[k].sum()), "exact_dup": int(counts[k, lsh.EXACT_DUP]),
                           "near_dup": int(counts[k, lsh.NEAR_DUP])} for k, x in enumerate(names) if counts[k].sum()},
        "wordless_exact_dup": sum(o["wordless_exact_dup"] for o in done),
        "pairs_reused": known.reused + by_text.reused if known is not None else 0,
        "pairs_reused_by_text": by_text.reused if by_text is not None else 0,
        "kept_cluster_sizes": kept_sizes(done),
    }
    return stats


def kept_sizes(done: list[dict]) -> dict[int, int]:
    """{cluster size: clusters} summed over the range tasks' counts (one kept member per cluster)."""
    out: dict[int, int] = {}
    for o in done:
        for k, v in o["kept_sizes"].items():
            out[k] = out.get(k, 0) + v
    return dict(sorted(out.items()))


CHECK_ROWS = 1 << 16  # dedup_keys rows per scatter task and (about) per partition of the clusters_consistent check


def cluster_problems(storage, key: str, eng: engine.Engine, partitions: int) -> list[str]:
    """`check_clusters`' problems of the dedup_keys file `key`: none when tasks on `eng` find it consistent
    (`docparts.clusters_consistent`, the driver holding O(partitions)); otherwise `check_clusters` over the
    table read here lists them."""
    with partitioned.scratch(storage, "dedup_keys_check") as sc:
        if docparts.clusters_consistent(tables.file_at(storage, key), sc, partitions, eng, CHECK_ROWS):
            return []
    return check_clusters(tables.read_parquet(storage, key))


def check_clusters(table: pa.Table, limit: int = 20) -> list[str]:
    """Problems with a dedup keys table (empty list = consistent), at most `limit`: doc_id uniqueness, then
    per cluster in order of first appearance its id, kept count and sizes, then its members' reasons in
    row order, then exact keys spread over several clusters. Columns as numpy arrays, no per-document
    Python objects; Arrow's freed pages are returned after each hash or sort, so its peak is one of them
    over the table (bench/dedup_step_memory.py)."""
    n = table.num_rows
    doc = table.column("doc_id").combine_chunks()
    problems = [] if _unique(doc) else ["doc_id is not unique"]
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
    key = table.column("exact_key").combine_chunks()
    kc = lsh.key_groups(key) if not key.null_count else _codes(table.column("exact_key"))[0]  # as the reduce's
    del key
    tables.release_unused()
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
    tables.release_unused()
    return problems[:limit]


REASON_NAMES = (None, "exact_dup", "near_dup")


def _codes(col) -> tuple[np.ndarray, pa.Array]:
    """(int64 code per row, the distinct values in order of first appearance; null is a value)."""
    enc = pc.dictionary_encode(col.combine_chunks(), null_encoding="encode")
    out = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), enc.dictionary
    del enc
    tables.release_unused()  # the hash table's pages
    return out


def _unique(values: pa.Array) -> bool:
    """No value twice (null is a value), by sorting: cheaper than a hash table of every value."""
    if values.null_count > 1:
        return False
    s = values.take(pc.sort_indices(values))  # nulls last
    return len(s) < 2 or not pc.any(pc.equal(s.slice(1), s.slice(0, len(s) - 1))).as_py()


# -- exclusion masks ---------------------------------------------------------------------------
KEY_BATCH_ROWS = 8192  # dedup_keys rows per batch of the exclusion pass (it never holds the whole table)
SAMPLE_REASONS = ("exact_dup", "near_dup")
PER_REASON = ("exact_dup", "near_dup", "contaminated")  # excluded_docs/<reason> in the metadata


def union_reasons(flags: Mapping[str, np.ndarray]) -> tuple[np.ndarray, pa.Array]:
    """The one place reasons are unioned: {reason: bool per row} -> (rows with at least one reason,
    their `reasons` lists, each in sorted reason order)."""
    names = sorted(flags)
    n = len(next(iter(flags.values()))) if flags else 0
    m = np.column_stack([np.asarray(flags[r], bool) for r in names]) if names else np.zeros((n, 0), bool)
    rows = np.flatnonzero(m.any(axis=1))
    _, col = np.nonzero(m[rows])
    offsets = np.r_[0, np.cumsum(m[rows].sum(axis=1))].astype(np.int32)
    values = pa.array(names, pa.string()).take(pa.array(col, pa.int64()))
    return rows, pa.ListArray.from_arrays(pa.array(offsets), values)


def _key_batches(keys, columns: list[str]):
    """dedup_keys as record batches (a table, or a Parquet file read one batch at a time)."""
    if isinstance(keys, pa.Table):
        return keys.select(columns).to_batches(KEY_BATCH_ROWS)
    return tables.iter_batches(keys, columns, KEY_BATCH_ROWS)


@dataclass
class Rejections:
    """The documents the filters rejected (document_filters) and each one's first failing rule: an `IdSet`
    and a reason code per id in its order (held per rejected document only)."""

    ids: IdSet
    code: np.ndarray
    reasons: list

    @classmethod
    def of(cls, doc_ids, reasons) -> "Rejections":
        ids = pa.array(doc_ids, pa.string()) if not isinstance(doc_ids, (pa.Array, pa.ChunkedArray)) else doc_ids
        enc = pc.dictionary_encode(pa.array(reasons, pa.string()) if isinstance(reasons, list) else reasons)
        enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
        got = IdSet(ids)
        code = np.zeros(len(got), np.int64)
        code[got.index(ids)] = enc.indices.to_numpy(zero_copy_only=False)
        return cls(got, code, enc.dictionary.to_pylist())

    def flags(self, doc: pa.Array, found: np.ndarray) -> dict[str, np.ndarray]:
        """{rule: bool per id of `doc`} for the rejected ids among them; marks them in `found`."""
        pos = self.ids.index(doc)
        hit = pos >= 0
        found[pos[hit]] = True
        code = np.where(hit, self.code[np.maximum(pos, 0)], -1)
        return {self.reasons[k]: code == k for k in np.unique(code[hit]).tolist()}


@dataclass
class Exclusions:
    """What the exclusion pass saw: documents in dedup_keys, excluded ids, excluded documents per reason."""

    documents: int = 0
    excluded: Optional[IdSet] = None
    per_reason: Optional[dict] = None


@dataclass
class ExclusionPart:
    """The exclusion pass over one part of dedup_keys (a batch, or a task's row range): its rows of
    EXCLUSION_SCHEMA and what the whole pass sums or checks (held per part, returned to the driver)."""

    table: pa.Table
    rows: int  # dedup_keys rows read
    first: Optional[str]  # first and last doc_id (None: no row, or a null first id)
    last: Optional[str]
    unsorted: Optional[int]  # first row (numbered in the file) null or not above the row before it, inside the part
    counts: dict  # excluded documents per reason
    found_contaminated: np.ndarray  # positions in the contaminated IdSet of the ids seen
    found_rejected: np.ndarray  # positions in the rejected ids of the ids seen


def exclude_rows(b, contaminated: Optional[IdSet], rejected: Optional["Rejections"], row0: int) -> ExclusionPart:
    """The exclusion rows of one part of dedup_keys (`b`: doc_id, source, reason, cluster_id, its first row
    numbered `row0` in the file), each row on its own: nothing here depends on another row (pure)."""
    doc = b.column(0).cast(pa.string())
    doc = doc.combine_chunks() if isinstance(doc, pa.ChunkedArray) else doc
    counts = dict.fromkeys(PER_REASON + (("filtered",) if rejected is not None else ()), 0)
    reason = b.column(2).cast(pa.string())
    reason = reason.combine_chunks() if isinstance(reason, pa.ChunkedArray) else reason
    enc = pc.dictionary_encode(reason)
    code = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    flags = {r: code == k for k, r in enumerate(enc.dictionary.to_pylist())}
    found_c = found_r = np.zeros(0, np.int64)
    if contaminated is not None:
        pos = contaminated.index(doc)
        found_c = np.unique(pos[pos >= 0])
        flags["contaminated"] = flags.get("contaminated", np.zeros(len(doc), bool)) | (pos >= 0)
    if rejected is not None:
        seen_r = np.zeros(len(rejected.ids), bool)
        ruled = rejected.flags(doc, seen_r)
        found_r = np.flatnonzero(seen_r)
        counts["filtered"] += int(sum(ruled.values(), np.zeros(len(doc), bool)).sum())
        for r, f in ruled.items():
            flags[r] = flags[r] | f if r in flags else f
    rows, reasons = union_reasons(flags)
    for r in PER_REASON:
        counts[r] += int(flags[r][rows].sum()) if r in flags else 0
    take = pa.array(rows, pa.int64())
    kept = pc.if_else(reason.is_valid(), b.column(3).cast(pa.string()), pa.scalar(None, pa.string()))
    out = pa.table({"doc_id": doc.take(take), "source": b.column(1).cast(pa.string()).take(take),
                    "reasons": reasons, "kept_doc_id": kept.take(take)}, schema=EXCLUSION_SCHEMA)
    first = doc[0].as_py() if len(doc) else None
    return ExclusionPart(out, len(doc), first, doc[-1].as_py() if len(doc) else None,
                         unsorted_row(doc, None, row0), counts, found_c, found_r)


def exclusion_task(contaminated: Optional[IdSet], rejected: Optional["Rejections"], rng: engine.RowRange
                   ) -> ExclusionPart:
    """`exclude_rows` over one row range of the dedup_keys file (an engine task; the sets are put once)."""
    return exclude_rows(engine.read_rows(rng, EXCLUSION_COLUMNS), contaminated, rejected, rng.start)


EXCLUSION_COLUMNS = ["doc_id", "source", "reason", "cluster_id"]


def exclusion_batches(keys, contaminated: Optional[IdSet], seen: Exclusions, where: str = "dedup_keys",
                      rejected: Optional[Rejections] = None, eng: Optional[engine.Engine] = None):
    """The rows of `exclusion_table`, one table per part of dedup_keys (a table or a Parquet file sorted by
    doc_id; a path or an `engine.FileAt`), in order. Fills `seen`; a contaminated or rejected id missing
    from dedup_keys is an error at the end.
    `rejected`: every document the filters rejected gets a row whose reasons include its rule.

    A table is read a batch at a time here; a file in row ranges of max(eng.chunk_rows, KEY_BATCH_ROWS) rows
    as tasks on `eng` (`exclusion_task`, default this thread), taken in order: a row's exclusion depends on
    that row only, so the rows (and the file written from them) do not depend on the ranges or the workers.
    The driver checks the order across parts and holds the excluded ids."""
    if isinstance(keys, pa.Table):
        parts, at = [], 0
        for b in _key_batches(keys, EXCLUSION_COLUMNS):
            parts.append(exclude_rows(b, contaminated, rejected, at))
            at += b.num_rows
    else:
        eng = eng or engine.Engine(num_cpus=1)
        ranges = engine.row_ranges(keys, max(eng.chunk_rows, KEY_BATCH_ROWS))
        parts = engine.map_chunks(functools.partial(exclusion_task, contaminated, rejected), ranges, eng)
    found = np.zeros(len(contaminated) if contaminated is not None else 0, bool)
    found_r = np.zeros(len(rejected.ids) if rejected is not None else 0, bool)
    last, row, excluded = None, 0, []
    counts = dict.fromkeys(PER_REASON + (("filtered",) if rejected is not None else ()), 0)
    for p in parts:
        bad = row if last is not None and p.first is not None and not p.first > last else p.unsorted
        if bad is not None:
            raise DedupInputError(f"{where}: row {bad}: field 'doc_id' is {UNSORTED}")
        last, row = (p.last if p.rows else last), row + p.rows
        found[p.found_contaminated] = True
        found_r[p.found_rejected] = True
        for r, k in p.counts.items():
            counts[r] += k
        excluded.append(p.table.column("doc_id"))
        yield p.table
    if not found.all():
        missing = contaminated.ids()[int(np.flatnonzero(~found)[0])]
        raise DedupInputError(f"contaminated_docs: doc_id {missing!r} is not in the dedup keys")
    if not found_r.all():
        missing = rejected.ids.ids()[int(np.flatnonzero(~found_r)[0])]
        raise DedupInputError(f"filter decisions: doc_id {missing!r} is not in the dedup keys")
    seen.documents, seen.per_reason = row, counts
    seen.excluded = IdSet(pa.chunked_array([c for t in excluded for c in t.chunks], pa.string()))


def exclusion_table(dedup_keys: pa.Table, contaminated: Optional[pa.Table],
                    rejected: Optional[Mapping[str, str]] = None) -> pa.Table:
    """One row per excluded document: doc_id, source, reasons (sorted list), kept_doc_id.

    `contaminated` (doc_id, source, ...) or None when contaminated documents are not masked. A
    contaminated survivor is excluded too; its cluster is then not re-elected (its duplicates
    carry the same text and stay excluded as duplicates). `rejected`: {doc_id: first failing rule} of
    the documents the filters rejected. `exclusion_batches` is the streaming form.
    """
    keys = dedup_keys.sort_by("doc_id")
    ids = IdSet(contaminated.column("doc_id")) if contaminated is not None else None
    rej = Rejections.of(list(rejected), list(rejected.values())) if rejected else None
    return pa.concat_tables(list(exclusion_batches(keys, ids, Exclusions(), rejected=rej))
                            or [EXCLUSION_SCHEMA.empty_table()])


def composition(docs, excluded: IdSet, sources: Iterable[str]) -> list[dict]:
    """Per source before/after: documents, bytes, est. tokens, token share of the mix. `docs`: tables or
    record batches of doc_id, source, n_bytes, est_tokens (e.g. `docs_meta`), one at a time."""
    agg: dict = {}
    for b in docs:
        _add_counts(agg, composition_counts(b, excluded))
    return composition_shares(agg, sources)


_COUNTS = ("docs_before", "docs_after", "bytes_before", "bytes_after", "tokens_before", "tokens_after")


def composition_counts(b, excluded: IdSet) -> dict:
    """{source: its before/after counts} over one batch of doc_id, source, n_bytes, est_tokens (pure)."""
    col = b.column("source").cast(pa.string())
    kept = ~excluded.contains(b.column("doc_id").cast(pa.string()))
    src = pc.dictionary_encode(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    code = src.indices.to_numpy(zero_copy_only=False)
    nb, nt = (np.asarray(b.column(c), np.int64) for c in ("n_bytes", "est_tokens"))
    out = {}
    for k, s in enumerate(src.dictionary.to_pylist()):
        mine = code == k
        after = mine & kept
        out[s] = dict(docs_before=int(mine.sum()), bytes_before=int(nb[mine].sum()),
                      tokens_before=int(nt[mine].sum()), docs_after=int(after.sum()),
                      bytes_after=int(nb[after].sum()), tokens_after=int(nt[after].sum()))
    return out


def _add_counts(agg: dict, part: dict) -> None:
    """Sum one part's `composition_counts` into `agg` (integers: any order gives the same sums)."""
    for s, c in part.items():
        a = agg.setdefault(s, dict.fromkeys(_COUNTS, 0))
        for f in _COUNTS:
            a[f] += c[f]


def composition_shares(agg: dict, sources: Iterable[str]) -> list[dict]:
    """`composition`'s rows from the summed counts: every configured source (zeros when absent), shares."""
    for s in sources:
        agg.setdefault(s, dict.fromkeys(_COUNTS, 0))
    tb = sum(a["tokens_before"] for a in agg.values()) or 1
    ta = sum(a["tokens_after"] for a in agg.values()) or 1
    out = []
    for s in sorted(agg):
        a = dict(source=s, **agg[s])
        a["share_before"] = a["tokens_before"] / tb
        a["share_after"] = a["tokens_after"] / ta
        a["lost_token_share"] = 1 - a["tokens_after"] / a["tokens_before"] if a["tokens_before"] else 0.0
        out.append(a)
    return out


@dataclass(frozen=True)
class MetaChunk:
    """A composition task: rows of one source's raw documents parquet."""

    source: str
    rows: engine.RowRange


def composition_task(excluded: IdSet, chunk: MetaChunk) -> dict:
    """`composition_counts` of one raw row range (nulls refused, naming file, row and field; pure)."""
    t = engine.read_rows(chunk.rows, ["doc_id", "source", "n_bytes", "est_tokens"])
    _check_meta(t, chunk.rows.path, chunk.source, chunk.rows.start)
    return composition_counts(t, excluded)


def _check_meta(b, path, source: str, row0: int) -> None:
    for c in ("n_bytes", "est_tokens"):
        if b.column(c).null_count:
            bad = row0 + int(np.flatnonzero(b.column(c).is_null().to_numpy(zero_copy_only=False))[0])
            raise DedupInputError(f"{path}: row {bad}: field {c!r} is null (source {source})")


def composition_on(files: Mapping[str, engine.FileAt], excluded: IdSet, sources: Iterable[str],
                   eng: engine.Engine) -> list[dict]:
    """`composition` with the raw files ({source: `engine.FileAt`}) read in row ranges as tasks on `eng`."""
    chunks = [MetaChunk(n, r) for n in sorted(files) for r in engine.row_ranges(
        files[n], max(eng.chunk_rows, READ_BATCH_ROWS))]
    agg: dict = {}
    for part in engine.map_chunks(functools.partial(composition_task, excluded), chunks, eng):
        _add_counts(agg, part)
    return composition_shares(agg, sources)


def _rank(doc_id: str) -> str:
    # A stable pseudo-random order: the sample does not depend on input order or worker count.
    return hashlib.sha256(doc_id.encode()).hexdigest()


def reject_samples(
    dedup_keys, contaminated_ids, per_reason: int = 5, eng: Optional[engine.Engine] = None,
) -> dict[str, list[tuple[str, str, float]]]:
    """Per dedup reason up to `per_reason` (excluded doc_id, kept doc_id, est. Jaccard) pairs.

    `dedup_keys`: a table, or a Parquet file read in row ranges as tasks on `eng` (`sample_task`; default this
    thread), each keeping only each reason's best `per_reason` candidates (the best of the union is the best of
    the parts' bests, so the pick does not depend on the ranges); `contaminated_ids`: an `IdSet` (or any
    iterable of ids). Pairs where either side is contaminated are left out here (they are listed by id only).
    """
    cont = contaminated_ids if isinstance(contaminated_ids, IdSet) else IdSet(contaminated_ids)
    if isinstance(dedup_keys, pa.Table):
        parts = [_sample_candidates(_key_batches(dedup_keys, SAMPLE_COLUMNS), cont, per_reason)]
    else:
        eng = eng or engine.Engine(num_cpus=1)
        ranges = engine.row_ranges(dedup_keys, max(eng.chunk_rows, KEY_BATCH_ROWS))
        parts = engine.map_chunks(functools.partial(sample_task, cont, per_reason), ranges, eng)
    half = per_reason // 2 + per_reason % 2
    low: list = []
    by_rank: dict[str, list] = {r: [] for r in SAMPLE_REASONS}
    for lo, ranked in parts:
        low = sorted(low + lo, key=lambda x: (x[3], x[0]))[:half]
        for r in SAMPLE_REASONS:
            by_rank[r] = sorted(by_rank[r] + ranked[r])[:per_reason]
    out = {"exact_dup": [(d, k, j) for _, d, k, j in by_rank["exact_dup"]]}
    first = {x[1] for x in low}
    rest = [x for x in by_rank["near_dup"] if x[1] not in first][: per_reason - half]
    out["near_dup"] = [(d, k, j) for _, d, k, j in low + rest]
    return out


SAMPLE_COLUMNS = ["doc_id", "reason", "cluster_id", "jaccard_to_kept"]


def sample_task(cont: IdSet, per_reason: int, rng: engine.RowRange) -> tuple[list, dict]:
    """`_sample_candidates` of one row range of the dedup_keys file (an engine task)."""
    return _sample_candidates(engine.read_rows(rng, SAMPLE_COLUMNS).to_batches(KEY_BATCH_ROWS), cont, per_reason)


def _sample_candidates(batches, cont: IdSet, per_reason: int) -> tuple[list, dict]:
    """(near_dup's `half` smallest by (jaccard, rank), each reason's `per_reason` smallest ranks) of the rows."""
    half = per_reason // 2 + per_reason % 2
    # near-dups show the least similar first (the ones a reviewer must judge), then random; exact: random
    low: list = []  # near_dup: the `half` smallest by (jaccard, rank)
    by_rank: dict[str, list] = {r: [] for r in SAMPLE_REASONS}  # each reason's `per_reason` smallest ranks
    for b in batches:
        doc, kept = b.column(0).cast(pa.string()), b.column(2).cast(pa.string())
        ok = ~cont.contains(doc) & ~cont.contains(kept)
        for reason in SAMPLE_REASONS:
            sel = np.flatnonzero(pc.equal(b.column(1), reason).fill_null(False).to_numpy(zero_copy_only=False) & ok)
            if not len(sel):
                continue
            idx = pa.array(sel, pa.int64())
            cand = [(_rank(d), d, k, float(j)) for d, k, j in zip(
                doc.take(idx).to_pylist(), kept.take(idx).to_pylist(), b.column(3).take(idx).to_pylist())]
            by_rank[reason] = sorted(by_rank[reason] + cand)[:per_reason]
            if reason == "near_dup":
                low = sorted(low + cand, key=lambda x: (x[3], x[0]))[:half]
    return low, by_rank


def snippets(paths: Mapping[str, str], wanted: set[str], chars: int = 240) -> dict[str, str]:
    """First `chars` characters (whitespace collapsed) of the wanted documents' texts."""
    return {doc: snippet(text, chars) for doc, text in texts(paths, wanted).items()}


def snippet(text: str, chars: int = 240) -> str:
    """The first `chars` characters of `text`, whitespace collapsed, "…" when cut."""
    flat = " ".join(text.split())
    return flat[:chars] + ("…" if len(flat) > chars else "")


def texts(paths: Mapping[str, str], wanted: set[str]) -> dict[str, str]:
    """The wanted documents' whole texts (None as "").

    Reads each row group's doc_ids and the text of only the row groups holding a wanted document
    (a handful of the corpus: samples name ~10 documents)."""
    out: dict[str, str] = {}
    if not wanted:
        return out
    want = pa.array(sorted(wanted), pa.string())
    for name in sorted(paths):
        f = paths[name] if isinstance(paths[name], pq.ParquetFile) else pq.ParquetFile(paths[name])
        for i in range(f.metadata.num_row_groups):
            mask = pc.is_in(f.read_row_group(i, ["doc_id"], use_threads=False).column(0).cast(pa.string()),
                            value_set=want)
            if not pc.any(mask).as_py():
                continue
            sel = f.read_row_group(i, ["doc_id", "text"], use_threads=False).filter(mask)
            for doc, text in zip(sel.column("doc_id").to_pylist(), sel.column("text").to_pylist()):
                out[doc] = text or ""
    return out


# -- the exclusion_masks stage ---------------------------------------------------------------------


def dedup_params(spec) -> DedupParams:
    """The stage's parameters from the mix spec's `dedup` section."""
    d = spec.dedup
    return DedupParams(shingle=d.shingle_words, num_perm=d.num_perm, threshold=d.threshold,
                       fp_weight=d.lsh_fp_weight, fn_weight=d.lsh_fn_weight, threads=d.threads,
                       partitions=d.partitions)


def docs_meta(paths: Mapping[str, str]) -> Iterable[pa.RecordBatch]:
    """doc_id, source, n_bytes, est_tokens of every raw document, a batch at a time (nulls refused,
    naming file, row and field)."""
    cols = ["doc_id", "source", "n_bytes", "est_tokens"]
    for name in sorted(paths):
        row = 0
        for b in tables.iter_batches(paths[name], cols, READ_BATCH_ROWS):
            _check_meta(b, paths[name], name, row)
            row += b.num_rows
            yield b


def read_contaminated_ids(storage) -> Optional[IdSet]:
    """The doc ids of contamination_report's contaminated_docs.parquet, or None when it was never written."""
    if not storage.exists(layout.CONTAMINATED_DOCS):
        return None
    f = pq.ParquetFile(storage.source(layout.CONTAMINATED_DOCS))
    if "doc_id" not in f.schema_arrow.names:
        raise DedupInputError(f"{storage.uri(layout.CONTAMINATED_DOCS)}: missing column 'doc_id'")
    return IdSet(f.read(columns=["doc_id"]).column(0).cast(pa.string()))


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

    excluded_docs: int  # rows written to exclusion_masks.parquet (EXCLUSION_SCHEMA)
    documents: int  # documents before the masks (rows of dedup_keys)
    composition: list[dict]  # per source before/after, see `composition`
    per_reason: dict[str, int]  # excluded documents per reason
    samples: list[RejectSample]
    contaminated_ids: list[str]  # the first CONTAMINATED_SHOWN, sorted; their text is never read
    contaminated_docs: int
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


CONTAMINATED_SHOWN = 50  # contaminated ids listed in the metadata (by id only)


def build_exclusion_masks(storage, spec, eng: Optional[engine.Engine] = None) -> Masks:
    """Write the exclusion masks and the composition before/after them; pick reject samples.

    Three passes as tasks on `eng` (default this thread), each over row ranges: dedup_keys (sorted by doc_id)
    for the exclusion rows (`exclusion_task`), every raw file for the composition (`composition_task`),
    dedup_keys again for the samples (`sample_task`); the driver takes the results in task order, so the
    bytes do not depend on the ranges or the workers. Held in the driver per document: the excluded ids and
    the contaminated and rejected ids (`IdSet`, ~30 B per id; the tasks get them put once), nothing per kept
    document.
    """
    eng = eng or engine.Engine(num_cpus=1)
    contaminated = read_contaminated_ids(storage)
    mask = spec.audit.mask_contaminated
    if mask and contaminated is None:
        raise FileNotFoundError(
            f"{storage.uri(layout.CONTAMINATED_DOCS)}: not found; audit.mask_contaminated is on, so "
            "contamination_report must be materialised first"
        )
    keys, seen = tables.file_at(storage, layout.DEDUP_KEYS), Exclusions()
    rejected = lines_lib.with_dropped(decisions.rejected_reasons(storage, decisions.filtered_sources(spec)), storage, spec)
    batches = exclusion_batches(keys, contaminated if mask else None, seen, storage.uri(layout.DEDUP_KEYS),
                                Rejections.of(*rejected) if rejected is not None else None, eng)
    tables.write_parquet_groups(storage, layout.EXCLUSION_MASKS, EXCLUSION_SCHEMA,
                                sig.regroup(batches, tables.ROW_GROUP_ROWS, EXCLUSION_SCHEMA))
    names = [s.name for s in spec.sources]
    comp = composition_on(tables.raw_files(storage, names), seen.excluded, names, eng)
    storage.write_text(layout.COMPOSITION, json.dumps(comp, indent=1, sort_keys=True))
    contaminated = contaminated if contaminated is not None else IdSet()
    return Masks(len(seen.excluded), seen.documents, comp, seen.per_reason,
                 _samples(keys, contaminated, tables.raw_paths(storage, names), spec.dedup.samples_per_reason, eng),
                 contaminated.ids(CONTAMINATED_SHOWN), len(contaminated), {s: spec.minimum_tokens(s) for s in names},
                 mask)


def _samples(keys, contaminated: IdSet, paths, per_reason: int, eng: engine.Engine) -> list[RejectSample]:
    picked = reject_samples(keys, contaminated, per_reason, eng)
    wanted = {x for pairs in picked.values() for p in pairs for x in p[:2]}
    assert not contaminated.contains(pa.array(sorted(wanted), pa.string())).any()  # contaminated text is never read
    snip = snippets(paths, wanted)
    return [RejectSample(reason, ex, kept, j, snip.get(ex, ""), snip.get(kept, ""))
            for reason, pairs in picked.items() for ex, kept, j in pairs]
