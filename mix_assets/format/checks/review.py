"""Document counts against the review files: dedup_keys minus exclusion_masks, split by the
validation rule, against the manifest's val documents, unique documents and train documents."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mix_assets.core.seeded import unit_hash
from mix_assets.format.checks.fields import is_int


_BATCH_ROWS = 8192  # rows of the review files decoded into Python objects at a time


def review_count_problems(m: Mapping[str, Any], src: Any, cfg: Mapping[str, Any], skip: set = frozenset()) -> list[str]:
    """Document counts against the review files: kept documents = dedup_keys rows minus the doc_ids of
    exclusion_masks; a kept document is val when hash(seed, cluster_id) < split.val_fraction (the rule
    of stages/split/split.assign_split, core/seeded.unit_hash). splits.val.documents must equal the kept val documents, and each
    source's unique_documents cannot exceed its kept train documents. Without a separator a unique document
    of no token is left out of splits.train.documents; only a document without words (dedup_keys n_words 0)
    can encode to none, so train documents are at least the unique ones less the kept train documents
    without words (equal when there are none). Both files are read a row group at a
    time on this thread (`tables.iter_batches`, the freed pages returned after each): a whole-file or
    threaded read left more memory resident the larger the corpus (issue 13; docs/scale.md). Held: the
    excluded ids (`IdSet`), nothing per kept document."""
    # pyarrow only when review counts are checked: the reader imports the checker and never needs them
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from mix_assets.core import tables
    from mix_assets.core.idset import IdSet

    review = m.get("review") if isinstance(m.get("review"), Mapping) else {}
    keys_path, masks_path = review.get("dedup_keys"), review.get("exclusion_masks")
    if not isinstance(keys_path, str) or not isinstance(masks_path, str):
        return ["review: dedup_keys and exclusion_masks must both be listed to cross-check document counts"]
    if keys_path in skip or masks_path in skip:
        return []  # their own problems are reported
    val_fraction = cfg.get("split", {}).get("val_fraction") if isinstance(cfg.get("split"), Mapping) else None
    seed = cfg.get("seed")
    if not isinstance(val_fraction, (int, float)) or not is_int(seed):
        return [f"{review.get('config')}: split.val_fraction and seed are needed to recount val documents"]

    def parquet(f: Any) -> "pq.ParquetFile":
        return pq.ParquetFile(pa.BufferReader(f.read()) if not _seekable(f) else f)

    def read_error(path: str, columns: list[str], e: Exception) -> str:
        return f"{path}: cannot read columns {columns} ({type(e).__name__}: {e})"

    def excluded_ids() -> IdSet | str:
        try:
            with src.open(masks_path) as f:
                pf = parquet(f)
                schema = pa.schema([x for x in pf.schema_arrow if x.name == "doc_id"])
                batches = tables.iter_batches(pf, ["doc_id"], _BATCH_ROWS)
                ids = pa.Table.from_batches(batches, schema).column("doc_id")
        except (pa.ArrowInvalid, KeyError, ValueError) as e:
            return read_error(masks_path, ["doc_id"], e)
        return f"{masks_path}: field doc_id is null in some rows" if ids.null_count else IdSet(ids)

    def kept_counts(excluded: IdSet) -> tuple[dict, dict, dict | None] | str:
        """{source: kept val documents}, {source: kept train documents}, {source: kept train documents
        without words} (None when dedup_keys has no n_words): dedup_keys a batch at a time."""
        columns, val, train, wordless = ["doc_id", "source", "cluster_id"], {}, {}, {}
        try:
            with src.open(keys_path) as f:
                pf = parquet(f)
                if "n_words" in pf.schema_arrow.names:
                    columns.append("n_words")
                else:
                    wordless = None
                for b in tables.iter_batches(pf, columns, _BATCH_ROWS):
                    for col in columns:
                        if b.column(col).null_count:
                            return f"{keys_path}: field {col} is null in some rows"
                    kept = b.filter(pa.array(~excluded.contains(b.column("doc_id").cast(pa.string()))))
                    clusters = pc.unique(kept.column("cluster_id"))
                    hashed = np.array([unit_hash(seed, c) < val_fraction for c in clusters.to_pylist()], bool)
                    is_val = hashed[pc.index_in(kept.column("cluster_id"), value_set=clusters).to_numpy()]
                    src_codes = pc.dictionary_encode(kept.column("source").cast(pa.string()))
                    no_words = None if wordless is None else np.asarray(
                        pc.equal(kept.column("n_words"), 0).fill_null(False), bool)
                    for k, name in enumerate(src_codes.dictionary.to_pylist()):
                        mine = src_codes.indices.to_numpy() == k
                        val[name] = val.get(name, 0) + int((mine & is_val).sum())
                        train[name] = train.get(name, 0) + int((mine & ~is_val).sum())
                        if wordless is not None:
                            wordless[name] = wordless.get(name, 0) + int((mine & ~is_val & no_words).sum())
        except (pa.ArrowInvalid, KeyError, ValueError) as e:
            return read_error(keys_path, columns, e)
        return ({k: v for k, v in val.items() if v}, {k: v for k, v in train.items() if v},
                None if wordless is None else {k: v for k, v in wordless.items() if v})

    masks = excluded_ids()
    counts = kept_counts(masks if isinstance(masks, IdSet) else IdSet())
    tables.release_unused()
    errors = [t for t in (counts, masks) if isinstance(t, str)]
    if errors:
        return errors
    val, train, wordless = counts
    out = []
    per_source = m.get("sources") if isinstance(m.get("sources"), Mapping) else {}
    splits = m.get("splits") if isinstance(m.get("splits"), Mapping) else {}
    val_docs = splits.get("val", {}).get("documents") if isinstance(splits.get("val"), Mapping) else None
    want_val = sum(val.get(s, 0) for s in per_source)
    origin = f"{keys_path} minus {masks_path}"
    if is_int(val_docs) and val_docs != want_val:
        out.append(f"splits.val.documents: says {val_docs}, but {origin} holds {want_val} val documents "
                   f"of sources {sorted(per_source)} (hash(seed, cluster_id) < val_fraction {val_fraction})")
    for s, rec in per_source.items():
        u = rec.get("unique_documents") if isinstance(rec, Mapping) else None
        have = train.get(s, 0)
        if is_int(u) and u > have:
            out.append(f"sources.{s}.unique_documents: says {u}, but {origin} holds only {have} kept train "
                       f"documents of {s}")
        budget = rec.get("budget_tokens") if isinstance(rec, Mapping) else None
        if is_int(u) and u == 0 and is_int(budget) and budget > 0:
            out.append(f"sources.{s}.unique_documents: 0, but its budget_tokens is {budget}")
    packing = m.get("packing") if isinstance(m.get("packing"), Mapping) else {}
    tr = splits.get("train") if isinstance(splits.get("train"), Mapping) else {}
    train_docs = tr.get("documents")
    uniq = {s: rec.get("unique_documents") for s, rec in per_source.items() if isinstance(rec, Mapping)}
    # with a separator the count equals the sum (manifest_problems), as it does when above it
    if (packing.get("separator") is None and wordless is not None and is_int(train_docs) and uniq
            and all(is_int(u) for u in uniq.values())):
        total = sum(uniq.values())
        may_drop = sum(min(u, wordless.get(s, 0)) for s, u in uniq.items())
        if train_docs < total - may_drop:
            out.append(f"splits.train.documents: says {train_docs}, but the sources' {total} unique "
                       f"documents, of which {origin} holds at most {may_drop} without words (the only "
                       f"ones that may encode to no token), leave at least {total - may_drop}")
    return out


def _seekable(f: Any) -> bool:
    return bool(getattr(f, "seekable", lambda: False)())
