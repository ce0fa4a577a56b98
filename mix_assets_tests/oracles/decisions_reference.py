"""The document_filters summary and sample pick as first written (a Python loop per document): the oracle
stages/filters/decisions.py's vectorised, row-group-at-a-time `summarise` / `pick_samples` must match exactly."""

from __future__ import annotations

import hashlib
from typing import Mapping

import numpy as np
import pyarrow as pa

from mix_assets.stages.filters import decisions as lib
from mix_assets.stages.filters import registry


def summarise(decisions: Mapping[str, pa.Table], guard: lib.Guard) -> lib.Summary:
    """The tables and findings of `decisions` ({source: DECISIONS_SCHEMA table})."""
    labels = lib.length_bucket_labels(guard.length_buckets)
    kills, comp, brevity, rows = [], {}, [], []
    for src, t in sorted(decisions.items()):
        keep = t.column("keep").to_numpy(zero_copy_only=False)
        nch, nb = (t.column(c).to_numpy() for c in ("n_chars", "n_bytes"))
        rules = t.column("rules").to_pylist()
        reason = t.column("reason").to_pylist()
        n, total_bytes = len(keep), int(nb.sum())
        for f in guard.active.get(src, []):
            own = np.array([any(lib.filter_of(r) == f for r in rs) for rs in rules], bool)
            first = np.array([r is not None and lib.filter_of(r) == f for r in reason], bool)
            kills.append({"source": src, "filter": f, "docs": n, "failed_docs": int(own.sum()),
                          "kill_share": own.sum() / max(n, 1), "killed_bytes_share": nb[own].sum() / max(total_bytes, 1),
                          "first_failure_docs": int(first.sum()),
                          "max_kill_share": guard.max_kill_rate.get((src, f), 0.5)})
        short = nch < guard.brevity_chars.get(src, 200)
        for rule in registry.length_rules():
            hit = np.array([rule in rs for rs in rules], bool) & short & ~keep
            if hit.any():
                brevity.append({"source": src, "rule": rule, "short_docs": int(short.sum()), "removed_docs": int(hit.sum()),
                                "removed_share": hit.sum() / max(int(short.sum()), 1),
                                "warn_share": guard.brevity_warn.get(src, 0.5)})
        bucket = lib.length_buckets(nch, guard.length_buckets)
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
    return lib.Summary(kills, composition, domains, vanished, [k for k in kills if k["kill_share"] > k["max_kill_share"]],
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
                by.setdefault("kept" if r is None else lib.filter_of(r), []).append((d, r))
        order = lib.filter_order()
        for f in sorted(by, key=lambda f: (f == "kept", order.index(f) if f in order else len(order), f)):
            out += [(src, f, d, r or "") for d, r in sorted(by[f], key=lambda x: _rank(x[0]))[:per_filter]]
    return out
