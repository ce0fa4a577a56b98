"""The manifest's numbers: format, dtype and packing; per split its totals and shards; the per-source
and overall totals, which must equal the sums of the splits. Structural: no file is read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mix_assets.format.checks.fields import Checker, is_int
from mix_assets.format.manifest import DTYPES, FORMAT, SPLITS


@dataclass
class Listed:
    """What the splits say the mix holds, for the file checks."""

    shards: list[dict]  # {"path", "bytes", "sha256"} of every shard, in the order `files` must list them
    doc_indexes: list[dict]  # the same of every document index (packing.doc_index): one per shard, or none


def count_problems(c: Checker, m: Mapping[str, Any]) -> Listed:
    """Record every problem of the manifest's numbers in `c`; the shards and indexes the splits list."""
    size, sample_len, packing = packing_problems(c, m)
    shard_entries, index_entries, split_sums = split_problems(c, m, size, sample_len)
    source_problems(c, m, split_sums, packing)
    return Listed(shard_entries, index_entries)


def packing_problems(c: Checker, m: Mapping[str, Any]) -> tuple[int | None, int | None, Mapping]:
    """format, dtype and packing (sample_len = seq_len + 1 when targets are shifted, else a multiple of
    seq_len): (itemsize, sample_len, packing), None where unknown."""
    if m.get("format") != FORMAT:
        c.bad(f"format: {m.get('format')!r}, expected {FORMAT!r}")
    dtype = m.get("dtype")
    size = DTYPES.get(dtype)
    if size is None:
        c.bad(f"dtype: {dtype!r} is not one of {sorted(DTYPES)}")
    packing = c.need(m, "packing", "manifest", Mapping) or {}
    seq_len = c.need(packing, "seq_len", "packing")
    sample_len = c.need(packing, "sample_len", "packing")
    if seq_len is not None and sample_len is not None:
        if seq_len == 0 or sample_len == 0:
            c.bad(f"packing: seq_len {seq_len} and sample_len {sample_len} must be positive")
        elif packing.get("shifted_targets"):
            if sample_len != seq_len + 1:
                c.bad(f"packing.sample_len: {sample_len}, expected seq_len + 1 = {seq_len + 1} (shifted_targets)")
        elif sample_len % seq_len:
            c.bad(f"packing.sample_len: {sample_len} is not a multiple of seq_len {seq_len}")
    return size, sample_len, packing


def split_problems(c: Checker, m: Mapping[str, Any], size: int | None,
                   sample_len: int | None) -> tuple[list[dict], list[dict], dict[str, dict[str, Any]]]:
    """Per split: shard samples sum to the split's samples, tokens = samples x sample_len, emitted tokens =
    tokens + dropped tail (shorter than one sample), per-source tokens sum to the emitted tokens, no empty
    shard, each shard's bytes = samples x sample_len x itemsize. (shard entries, index entries, sums)."""
    splits = c.need(m, "splits", "manifest", Mapping) or {}
    shard_entries: list[dict] = []  # in the order files must list them
    index_entries: list[dict] = []  # packing.doc_index: one per shard, or none
    split_sums: dict[str, dict[str, Any]] = {}
    for name in SPLITS:
        s = c.need(splits, name, "splits", Mapping)
        if s is None:
            continue
        w = f"splits.{name}"
        samples = c.need(s, "samples", w)
        tokens = c.need(s, "tokens", w)
        emitted = c.need(s, "emitted_tokens", w)
        dropped = c.need(s, "dropped_tail_tokens", w)
        documents = c.need(s, "documents", w)
        if dropped is not None and sample_len and dropped >= sample_len:
            c.bad(f"{w}.dropped_tail_tokens: {dropped}, but a dropped tail is shorter than one sample "
                  f"(sample_len {sample_len})")
        seam = s.get("seam_rate")
        if not isinstance(seam, (int, float)) or isinstance(seam, bool) or not 0.0 <= seam <= 1.0:
            c.bad(f"{w}.seam_rate: {seam!r}, expected a number in [0, 1]")
        sources = c.need(s, "sources", w, Mapping) or {}
        shards = c.need(s, "shards", w, list) or []
        if samples is not None and sample_len and tokens is not None:
            c.eq(f"samples x sample_len = {samples} x {sample_len}", samples * sample_len, f"{w}.tokens", tokens)
        if tokens is not None and dropped is not None and emitted is not None:
            c.eq(f"tokens + dropped_tail_tokens = {tokens} + {dropped}", tokens + dropped,
                 f"{w}.emitted_tokens", emitted)
        src_ok = True
        for src, n in sources.items():
            if not is_int(n) or n < 0:
                c.bad(f"{w}.sources.{src}: expected a non-negative integer, got {n!r}")
                src_ok = False
        if src_ok and emitted is not None:
            c.eq(f"the sum of {w}.sources", sum(sources.values()), f"{w}.emitted_tokens", emitted)
        shard_samples = 0
        starts: list = []  # each shard's doc_index.documents (None: not a count, or no index)
        for i, sh in enumerate(shards):
            path = sh.get("path") if isinstance(sh, Mapping) else None
            label = path if isinstance(path, str) else f"{w}.shards[{i}]"
            if not isinstance(path, str):
                c.bad(f"{label}: shard has no path")
                continue
            if not path.startswith(f"{name}/"):
                c.bad(f"{path}: a {name} shard must live under {name}/")
            n = c.need(sh, "samples", label)
            b = c.need(sh, "bytes", label)
            sha = c.need(sh, "sha256", label, str)
            if n is not None:
                shard_samples += n
                if n == 0:
                    c.bad(f"{path}: empty shard (0 samples)")
                if b is not None and sample_len and size:
                    want = n * sample_len * size
                    if b != want:
                        c.bad(f"{path}: bytes {b}, expected samples x sample_len x itemsize = "
                              f"{n} x {sample_len} x {size} = {want}")
            shard_entries.append({"path": path, "bytes": b, "sha256": sha})
            if "doc_index" in sh:
                ix = c.need(sh, "doc_index", label, Mapping) or {}
                ix_path = c.need(ix, "path", f"{label}.doc_index", str)
                if ix_path is not None and not ix_path.startswith(f"doc_index/{name}/"):
                    c.bad(f"{ix_path}: a {name} document index must live under doc_index/{name}/")
                starts.append(c.need(ix, "documents", f"{label}.doc_index"))
                index_entries.append({"path": ix_path, "bytes": c.need(ix, "bytes", f"{label}.doc_index"),
                                      "sha256": c.need(ix, "sha256", f"{label}.doc_index", str)})
        if samples is not None:
            c.eq(f"the sum of its {len(shards)} shards' samples", shard_samples, f"{w}.samples", samples)
        split_sums[name] = {"samples": samples, "tokens": tokens, "emitted": emitted, "dropped": dropped,
                            "documents": documents,
                            "sources": dict(sources), "shards": len(shards),
                            "starts": (sum(starts) if shards and len(starts) == len(shards)
                                       and None not in starts else None)}
    return shard_entries, index_entries, split_sums


def source_problems(c: Checker, m: Mapping[str, Any], split_sums: dict[str, dict[str, Any]],
                    packing: Mapping) -> None:
    """The `sources` and `totals` sections against the sums of the splits; a source's train tokens are its
    budget; train documents against the sources' unique documents and the document indexes."""
    per_source = c.need(m, "sources", "manifest", Mapping) or {}
    if "train" in split_sums and "val" in split_sums:
        listed = set(split_sums["train"]["sources"]) | set(split_sums["val"]["sources"])
        for src in sorted(listed - set(per_source)):
            c.bad(f"sources.{src}: missing, but splits count {src} tokens")
        for src, rec in per_source.items():
            for split, key in (("train", "train_tokens"), ("val", "val_tokens")):
                got = c.need(rec, key, f"sources.{src}")
                c.eq(f"splits.{split}.sources.{src}", split_sums[split]["sources"].get(src, 0),
                     f"sources.{src}.{key}", got)
            # the train stream of a source is cut at exactly its budget (N x share x epochs)
            c.eq(f"splits.train.sources.{src} (the train stream is cut at the budget)",
                 split_sums["train"]["sources"].get(src, 0), f"sources.{src}.budget_tokens",
                 c.need(rec, "budget_tokens", f"sources.{src}"))
        uniq = [rec.get("unique_documents") for rec in per_source.values() if isinstance(rec, Mapping)]
        for src, rec in per_source.items():
            c.need(rec, "unique_documents", f"sources.{src}")
            _tier_sums(c, src, rec)
        train_docs = split_sums["train"]["documents"]
        if train_docs is not None and uniq and all(is_int(u) for u in uniq):
            # every train document is one of a source's unique set; a separator gives each one a token
            if packing.get("separator") is not None:
                c.eq("the sum of sources.*.unique_documents", sum(uniq), "splits.train.documents", train_docs)
            elif train_docs > sum(uniq):
                c.bad(f"splits.train.documents: says {train_docs}, more than the sum of sources.*.unique_documents "
                      f"{sum(uniq)}")
        _documents_vs_index(c, split_sums, per_source, packing.get("separator") is not None)
    totals = c.need(m, "totals", "manifest", Mapping) or {}
    claimed = {k: c.need(totals, k, "totals") if totals else None
               for k in ("train_tokens", "val_tokens", "train_samples", "val_samples", "shards", "dropped_tail_tokens")}
    if "train" in split_sums and "val" in split_sums:
        tr, va = split_sums["train"], split_sums["val"]
        dropped_sum = None if tr["dropped"] is None or va["dropped"] is None else tr["dropped"] + va["dropped"]
        for key, what, got in (
            ("train_tokens", "splits.train.tokens", tr["tokens"]),
            ("val_tokens", "splits.val.tokens", va["tokens"]),
            ("train_samples", "splits.train.samples", tr["samples"]),
            ("val_samples", "splits.val.samples", va["samples"]),
            ("shards", "the number of shards listed in splits", tr["shards"] + va["shards"]),
            ("dropped_tail_tokens", "the sum of the splits' dropped_tail_tokens", dropped_sum),
        ):
            c.eq(what, got, f"totals.{key}", claimed[key])


def _tier_sums(c: Checker, src: str, rec: Mapping[str, Any]) -> None:
    """A source filled by quality tier: its tiers' train tokens and unique documents sum to the source's, and a
    tier's epochs (source x tier) are >= 1."""
    if not isinstance(rec, Mapping) or "tiers" not in rec:
        return
    tiers = c.need(rec, "tiers", f"sources.{src}", Mapping)
    if not tiers:
        return
    sums = {"train_tokens": 0, "documents": 0}
    for t, r in tiers.items():
        w = f"sources.{src}.tiers.{t}"
        for k in ("train_tokens", "documents", "unique_tokens"):
            v = c.need(r, k, w)
            if k in sums:
                sums[k] = None if v is None or sums[k] is None else sums[k] + v
        e = c.need(r, "epochs", w, (int, float))
        if e is not None and not e >= 1:
            c.bad(f"{w}.epochs: {e}, a tier is repeated at least once")
    c.eq(f"the sum of sources.{src}.tiers.*.train_tokens", sums["train_tokens"], f"sources.{src}.train_tokens",
         rec.get("train_tokens"))
    c.eq(f"the sum of sources.{src}.tiers.*.documents", sums["documents"], f"sources.{src}.unique_documents",
         rec.get("unique_documents"))


def _documents_vs_index(c: Checker, split_sums: dict, per_source: Mapping, separator: bool) -> None:
    """splits.<split>.documents against its shards' document indexes, where every document appears at
    most once (val; train when no source has more than one epoch): each start is a different document, so
    there are at least as many documents as starts; the documents not started in a shard started in the
    dropped tail or encoded to no token, and with a separator a document has at least one token, so at
    most dropped_tail_tokens more. Structural: the reader's and any file-less check see it too. (Train
    with a separator equals the sum of unique documents, checked already.)"""
    # a quality tier's epochs (source x tier) repeat its documents like a source's own
    epochs = [e for rec in per_source.values() if isinstance(rec, Mapping)
              for e in [rec.get("epochs"), *(t.get("epochs") if isinstance(t, Mapping) else None
                                             for t in (rec["tiers"].values() if isinstance(rec.get("tiers"), Mapping) else ()))]]
    once_train = bool(epochs) and all(isinstance(e, (int, float)) and not isinstance(e, bool) and e <= 1
                                      for e in epochs)
    for name, s in split_sums.items():
        docs, starts, dropped = s["documents"], s["starts"], s["dropped"]
        if docs is None or starts is None or (name == "train" and (separator or not once_train)):
            continue
        w = f"splits.{name}.documents"
        if docs < starts:
            c.bad(f"{w}: says {docs}, but its shards' document indexes start {starts} documents (each a "
                  "different one)")
        elif separator and dropped is not None and docs > starts + dropped:
            c.bad(f"{w}: says {docs}, but its shards' document indexes start {starts} and its dropped tail "
                  f"of {dropped} tokens holds at most {dropped} more (a separator gives each one a token)")
