"""dedup_keys' reduce as it was before its per-document steps became tasks (stages/dedup/docparts.py): every
per-document array in one process, `lsh.dedup` deciding. The oracle the partitioned reduce must equal byte for byte."""

from __future__ import annotations

import tempfile
from typing import Mapping, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.core import engine, tables
from mix_assets.stages.dedup import lsh, pairs, partitioned
from mix_assets.stages.dedup import signatures as sig
from mix_assets.stages.dedup.dedup import DEDUP_SCHEMA, READ_BATCH_ROWS, DedupParams, signatures_key


def reduce_signatures(storage, sources: Mapping[str, str], priorities: Mapping[str, int],
                      params: DedupParams, rejected: Optional[pa.Array] = None,
                      eng: Optional[engine.Engine] = None, reuse_pairs: bool = True) -> tuple[pa.Table, dict]:
    """LSH banding over the stored signature files (one band's columns at a time), then clusters.
    The bands, the candidates' text pass (read + shingle sets, one task per raw row group) and the
    verification's chunks run as tasks on `eng` (default: this thread); the bytes do not depend on it.

    Held per document: doc_id and exact_key (Arrow), a few int64 arrays and the keep rule's sort
    keys; never the signature matrix (docs/scale.md gives the measured bytes per document).
    With `reuse_pairs`, verified Jaccards are taken from and stored to layout.DEDUP_PAIRS per pair of
    sources (stages/dedup/pairs.py): a rerun with one source changed compares only the pairs involving it.
    """
    b, r = params.bands_rows
    names = sorted(sources)
    stored = sig.Stored([tables.file_at(storage, signatures_key(n)) for n in names], params.num_perm)
    meta = stored.read(sig.SCALARS)
    src = np.repeat(np.arange(len(names), dtype=np.int16), stored.rows)
    first_row = dict(zip(names, np.r_[0, np.cumsum(stored.rows)[:-1]].tolist()))
    doc_ids = meta.column("doc_id").combine_chunks()
    labels = lsh.key_groups(meta.column("exact_key").combine_chunks())  # the key strings are read again below
    nsh, nch = (meta.column(c).to_numpy() for c in ("n_shingles", "n_chars"))
    del meta
    prio = np.asarray([priorities.get(n, 0) for n in names], dtype=np.int64)[src]
    demoted = None if rejected is None else pc.is_in(doc_ids, value_set=rejected).to_numpy(zero_copy_only=False)
    with tempfile.TemporaryDirectory(prefix="dedup-shingles-") as spill, \
            partitioned.scratch(storage) as sc:  # the tasks' parts (pairs, shingle sets), under the storage root
        sets = sig.shingle_reader(sources, first_row, params.shingle, spill, READ_BATCH_ROWS, eng, scratch=sc)
        known = pairs.PairStore.of(storage, names, stored.rows, params.shingle) if reuse_pairs else None
        res = lsh.dedup(doc_ids, labels, stored, nsh, nch, prio, b, r, params.threshold, shingle_sets=sets,
                        demoted=demoted, eng=eng, cached=known.cached if known else None,
                        partitions=params.partitions, scratch=sc)
    if known is not None:
        known.store(*res.verified)
    # documents without words (so without a shingle) are keyed on their raw text: copies of it dropped
    wordless_exact_dup = int(np.count_nonzero(res.code[nsh == 0] == lsh.EXACT_DUP))
    del prio, nsh, nch, labels, demoted
    tables.release_unused()  # the bands' and verification's freed pages, before the table is built
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
    stats["wordless_exact_dup"] = wordless_exact_dup
    stats["pairs_reused"] = known.reused if known is not None else 0
    stats["pairs_reused_by_text"] = 0  # the reference looks up no pair by text (stages/dedup/pairs.TextPairs)
    del cols, res, canon
    tables.release_unused()
    return table, stats


def _per_source_kills(names: list[str], src: np.ndarray, code: np.ndarray) -> dict:
    """{source: documents, exact_dup, near_dup} from per-document source indices and lsh codes."""
    counts = np.zeros((len(names), 3), np.int64)
    np.add.at(counts, (src.astype(np.int64), code.astype(np.int64)), 1)
    return {n: {"documents": int(counts[k].sum()), "exact_dup": int(counts[k, lsh.EXACT_DUP]),
                "near_dup": int(counts[k, lsh.NEAR_DUP])} for k, n in enumerate(names) if counts[k].sum()}


