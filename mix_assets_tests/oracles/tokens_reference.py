"""Reference token shards: the pre-columnar implementation of selection, budget fill and stream
order (per-document Python objects, commit 4d26c40 of stages/tokens/packing.py and stages/tokens/shards.py), kept here
as an oracle. `build_token_shards` must reproduce its shards byte for byte.

Simplifications that cannot change the result: every document is encoded up front (the real code
encodes the train prefix the budget needs, and the fill only looks at that prefix), in one batch
(token ids do not depend on batching), and ids are held in RAM instead of a spill file.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow.parquet as pq
import xxhash
from tokenizers import Tokenizer

from mix_assets.core import layout
from mix_assets.format.shards import ShardRecord, dtype_for_vocab
from mix_assets.stages.tokens.packing import Packer
from mix_assets.stages.tokens.shards import packing_plan
from mix_assets.core.seeded import unit_hash


def ref_fill_budget(lengths, unique_budget: int, stream_budget: int):
    """(n_unique, [(index, epoch, take)]) — the old loop, verbatim but for the record type."""
    lengths = np.asarray(lengths, dtype=np.int64)
    cum = np.cumsum(lengths)
    have = int(cum[-1]) if len(cum) else 0
    if have < unique_budget:
        raise ValueError("shortfall")
    n_unique = int(np.searchsorted(cum, unique_budget, side="left")) + 1 if unique_budget > 0 else 0
    out = []
    emitted, epoch = 0, 0
    while emitted < stream_budget and n_unique:
        for i in range(n_unique):
            n = int(lengths[i])
            if n == 0:
                continue
            take = min(n, stream_budget - emitted)
            out.append((i, epoch, take))
            emitted += take
            if emitted == stream_budget:
                break
        epoch += 1
    return n_unique, out


def ref_stream_order(seed: int, doc_ids: list[str], epochs, keys=None) -> np.ndarray:
    """The old stream_order; `keys` overrides the hashes (to exercise the tie-break)."""
    if keys is None:
        keys = np.fromiter(
            (xxhash.xxh64_intdigest(f"{d}\x00{int(e)}".encode("utf-8"), seed=seed & 0xFFFFFFFFFFFFFFFF)
             for d, e in zip(doc_ids, epochs)), np.uint64, len(doc_ids))
    rank = np.empty(len(doc_ids), np.int64)
    rank[sorted(range(len(doc_ids)), key=doc_ids.__getitem__)] = np.arange(len(doc_ids))
    return np.lexsort((np.asarray(epochs), rank, keys))


def ref_selection_order(seed: int, ids: list[str], u=None) -> list[int]:
    u = u if u is not None else [unit_hash(seed, f"sel:{d}") for d in ids]
    return sorted(range(len(ids)), key=lambda i: (u[i], ids[i]))


def reference_shards(storage, spec) -> dict:
    """{split: {"shards": [(path, samples, bytes, sha256)], "documents", "emitted_tokens", ...}}."""
    tok = Tokenizer.from_file(storage.local_path(layout.TOKENIZER_FILE))
    plan = packing_plan(spec, tok)
    dtype = dtype_for_vocab(tok.get_vocab_size(with_added_tokens=True))
    split = pq.read_table(storage.local_path(layout.VALIDATION_SPLIT)).to_pylist()
    tokens: dict[str, list[int]] = {}
    app_docs, app_epochs, app_take, app_src, vd, vs = [], [], [], [], [], []
    for s in sorted(x.name for x in spec.sources):
        raw = pq.read_table(storage.local_path(layout.RAW_DOCS.format(source=s)), columns=["doc_id", "text"])
        text = dict(zip(raw.column(0).to_pylist(), raw.column(1).to_pylist()))
        rows = [r for r in split if r["source"] == s]
        val_ids = [r["doc_id"] for r in rows if r["split"] == "val"]
        ids = [r["doc_id"] for r in rows if r["split"] != "val"]
        sel = [ids[i] for i in ref_selection_order(spec.seed, ids)]
        for d, e in zip(val_ids + sel, tok.encode_batch_fast([text[d] for d in val_ids + sel],
                                                              add_special_tokens=False)):
            tokens[d] = e.ids + ([plan.separator_id] if plan.separator_id is not None else [])
        _, apps = ref_fill_budget([len(tokens[d]) for d in sel], spec.unique_budget(s), spec.stream_budget(s))
        for i, epoch, take in apps:
            app_docs.append(sel[i])
            app_epochs.append(epoch)
            app_take.append(take)
            app_src.append(s)
        vd += val_ids
        vs += [s] * len(val_ids)

    def pack(doc_ids, epochs, takes, sources):
        def write(index, toks):
            data = toks.tobytes()
            return ShardRecord(f"x/{index:05d}", len(toks) // plan.sample_len, len(data),
                               hashlib.sha256(data).hexdigest())

        packer = Packer(plan.sample_len, plan.shard_samples, dtype, write)
        for i in ref_stream_order(plan.seed, doc_ids, np.asarray(epochs, np.int64)) if doc_ids else []:
            packer.feed(np.asarray(tokens[doc_ids[i]][: takes[i]]), sources[i])
        st = packer.finish()
        return {"shards": [(r.samples, r.bytes, r.sha256) for r in st.shards], "documents": len(set(doc_ids)),
                "emitted_tokens": st.emitted_tokens, "dropped_tail_tokens": st.dropped_tail_tokens,
                "seam_samples": st.seam_samples, "sources": dict(sorted(st.sources.items()))}

    return {"train": pack(app_docs, app_epochs, app_take, app_src),
            "val": pack(vd, [0] * len(vd), [len(tokens[d]) for d in vd], vs)}


def as_built(manifest: dict) -> dict:
    """The same view of what `token_shards` + `manifest` wrote."""
    return {k: {"shards": [(f["samples"], f["bytes"], f["sha256"]) for f in sp["shards"]],
                "documents": sp["documents"], "emitted_tokens": sp["emitted_tokens"],
                "dropped_tail_tokens": sp["dropped_tail_tokens"],
                "seam_samples": round(sp["seam_rate"] * sp["samples"]), "sources": sp["sources"]}
            for k, sp in manifest["splits"].items()}
