"""Synthetic upstream files for the split/tokenizer/shards/manifest tests (the file contracts of
raw/<source>, dedup_keys and exclusion_masks in core/layout.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.core import layout, lineage
from mix_assets.core.storage import Storage

WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there had been one all we their has would when if so no more what "
    "river stone light garden number seven market winter letter window morning paper bridge silver "
    "forest engine harbor lantern meadow thunder orchard village compass anchor feather candle"
).split()


def stamp(storage: Storage, asset: str, outputs: list[str], inputs: list[str] = ()) -> dict:
    """The lineage record a real asset would write after these stand-in files (core/lineage.py)."""
    return lineage.write_record(storage, asset, outputs, lineage.verify_inputs(storage, asset, inputs))


def make_text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words)) + "."


def write_upstream(root: Path, sources: dict[str, int], seed: int = 1, words=(40, 160),
                   near_dups: int = 0, masked: int = 0) -> Storage:
    """raw/<source> with `n` docs each; `near_dups` docs per source share a cluster with another
    doc (the extra member dropped by the masks); `masked` further docs per source are masked."""
    rng = random.Random(seed)
    storage = Storage(str(root))
    keys_rows, mask_rows = [], []
    for source, n in sources.items():
        rows = []
        for i in range(n):
            text = make_text(rng, rng.randint(*words))
            doc_id = f"{source}-{i:06d}"
            rows.append(dict(doc_id=doc_id, source=source, text=text, row_index=i, origin=f"gen:{i}",
                             n_bytes=len(text.encode()), n_chars=len(text), est_tokens=len(text) // 4))
            keys_rows.append(dict(doc_id=doc_id, source=source, exact_key=f"k-{doc_id}", cluster_id=doc_id,
                                  cluster_size=1, keep=True, reason=None, n_words=len(text.split())))
        for j in range(near_dups):  # doc j+n duplicates doc j: same cluster, dropped by the masks
            src = rows[j]
            doc_id = f"{source}-{n + j:06d}"
            rows.append({**src, "doc_id": doc_id, "row_index": n + j})
            keys_rows.append(dict(doc_id=doc_id, source=source, exact_key=f"k-{src['doc_id']}",
                                  cluster_id=src["doc_id"], cluster_size=2, keep=False, reason="exact_dup",
                                  n_words=len(src["text"].split())))
            mask_rows.append(dict(doc_id=doc_id, source=source, reasons=["exact_dup"], kept_doc_id=src["doc_id"]))
        for j in range(masked):
            mask_rows.append(dict(doc_id=rows[-1 - near_dups - j]["doc_id"], source=source,
                                  reasons=["contaminated"], kept_doc_id=None))
        with storage.writing(layout.RAW_DOCS.format(source=source)) as tmp:
            pq.write_table(pa.Table.from_pylist(rows), tmp)
        stamp(storage, f"raw/{source}", [layout.RAW_DOCS.format(source=source)])
    raws = [f"raw/{s}" for s in sources]
    with storage.writing(layout.DEDUP_KEYS) as tmp:
        pq.write_table(pa.Table.from_pylist(keys_rows), tmp)
    stamp(storage, "dedup_keys", [layout.DEDUP_KEYS], raws)
    masks = pa.Table.from_pylist(mask_rows, schema=pa.schema([
        ("doc_id", pa.string()), ("source", pa.string()), ("reasons", pa.list_(pa.string())),
        ("kept_doc_id", pa.string())]))
    storage.write_text(layout.CONTAMINATION_REPORT, json.dumps({"tasks": {}, "sources": {}}, sort_keys=True))
    stamp(storage, "contamination_report", [layout.CONTAMINATION_REPORT], raws)
    with storage.writing(layout.EXCLUSION_MASKS) as tmp:
        pq.write_table(masks, tmp)
    stamp(storage, "exclusion_masks", [layout.EXCLUSION_MASKS], ["dedup_keys", "contamination_report", *raws])
    return storage


def raw_paths(storage: Storage, sources) -> dict[str, str]:
    return {s: storage.local_path(layout.RAW_DOCS.format(source=s)) for s in sources}
