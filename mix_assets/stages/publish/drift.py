"""Compare a rebuilt manifest with the published one: which file changed, which count moved.

A scheduled rebuild of the same config on the same pinned inputs must reproduce the published
fingerprint (DESIGN: determinism). When it does not, a bare "fingerprint differs" is useless to the
person on call; `compare_manifests` names every file whose bytes/sha256 differ, every file that
appeared or vanished, and every count (totals, per split, per source) that moved, so the drift can
be traced to a stage. `revision_diff` says what a new revision changed (documents, tokens, files).
Pure: no Dagster import, no I/O (bytes in, dicts out).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
import io
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


@dataclass(frozen=True)
class Drift:
    """One difference: `kind` is file_changed | file_added | file_removed | count_changed | identity_changed."""

    kind: str
    what: str  # file path relative to the mix dir, or a dotted count name ("splits.train.samples")
    published: Any
    rebuilt: Any

    def describe(self) -> str:
        if self.kind == "file_added":
            return f"{self.what}: new file ({self.rebuilt} bytes), not in the published revision"
        if self.kind == "file_removed":
            return f"{self.what}: published file ({self.published} bytes) missing from the rebuild"
        if self.kind == "file_changed":
            return f"{self.what}: content differs (published {self.published}, rebuilt {self.rebuilt})"
        return f"{self.what}: published {self.published!r}, rebuilt {self.rebuilt!r}"

    def as_row(self) -> dict[str, object]:
        return {"kind": self.kind, "what": self.what, "published": _short(self.published),
                "rebuilt": _short(self.rebuilt)}


def _short(v: Any) -> object:
    if isinstance(v, (int, float, bool)) or v is None:
        return v
    s = str(v)
    return s if len(s) <= 80 else s[:77] + "..."


@dataclass(frozen=True)
class Comparison:
    published_fingerprint: str
    rebuilt_fingerprint: str
    comparable: bool  # False when the config changed: a new fingerprint is expected, not drift
    reason: str  # why not comparable, or "" when comparable
    drifts: tuple[Drift, ...]

    @property
    def reproduced(self) -> bool:
        return self.published_fingerprint == self.rebuilt_fingerprint

    @property
    def passed(self) -> bool:
        return self.reproduced or not self.comparable

    def summary(self) -> str:
        if self.reproduced:
            return f"rebuild reproduced the published fingerprint {self.rebuilt_fingerprint[:16]}"
        if not self.comparable:
            return f"not comparable: {self.reason}; new fingerprint {self.rebuilt_fingerprint[:16]}"
        files = sum(d.kind.startswith("file_") for d in self.drifts)
        counts = sum(d.kind == "count_changed" for d in self.drifts)
        return (f"fingerprint drift: published {self.published_fingerprint[:16]}, rebuilt "
                f"{self.rebuilt_fingerprint[:16]}; {files} file(s) and {counts} count(s) differ")


# counts compared, as dotted paths into the manifest (absent paths are skipped on both sides)
_COUNT_PATHS = ("totals", "splits.train", "splits.val", "sources")


def _flatten(prefix: str, obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, Mapping):
        for k in sorted(obj):
            if prefix.startswith("splits.") and prefix.count(".") == 1 and k == "shards":
                continue
            yield from _flatten(f"{prefix}.{k}" if prefix else str(k), obj[k])
    elif isinstance(obj, (int, float, str, bool)) or obj is None:
        yield prefix, obj


def _get(manifest: Mapping[str, Any], path: str) -> Any:
    cur: Any = manifest
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _files(manifest: Mapping[str, Any], label: str) -> dict[str, Mapping[str, Any]]:
    files = manifest.get("files")
    if not isinstance(files, list):
        raise TypeError(f"{label} manifest: 'files' must be a list of {{path, bytes, sha256}}")
    out: dict[str, Mapping[str, Any]] = {}
    for i, f in enumerate(files):
        if not isinstance(f, Mapping) or not {"path", "sha256"} <= set(f):
            raise ValueError(f"{label} manifest: files[{i}] needs 'path' and 'sha256', got {f!r}")
        out[str(f["path"])] = f
    return out


def compare_manifests(published: Mapping[str, Any], rebuilt: Mapping[str, Any]) -> Comparison:
    """Differences between two `mix_assets.manifest/1` dicts (see DESIGN.md for the contract)."""
    for label, m in (("published", published), ("rebuilt", rebuilt)):
        if not isinstance(m.get("fingerprint"), str):
            raise TypeError(f"{label} manifest: 'fingerprint' missing or not a string")
    drifts: list[Drift] = []

    pf, rf = _files(published, "published"), _files(rebuilt, "rebuilt")
    for path in pf.keys() | rf.keys():
        a, b = pf.get(path), rf.get(path)
        if a is None:
            drifts.append(Drift("file_added", path, None, b.get("bytes")))
        elif b is None:
            drifts.append(Drift("file_removed", path, a.get("bytes"), None))
        elif a["sha256"] != b["sha256"] or a.get("bytes") != b.get("bytes"):
            drifts.append(Drift("file_changed", path,
                                f"{a.get('bytes')} B sha256 {str(a['sha256'])[:12]}",
                                f"{b.get('bytes')} B sha256 {str(b['sha256'])[:12]}"))

    for root in _COUNT_PATHS:
        pa, ra = dict(_flatten(root, _get(published, root))), dict(_flatten(root, _get(rebuilt, root)))
        for k in sorted(pa.keys() | ra.keys()):
            if pa.get(k) != ra.get(k):
                drifts.append(Drift("count_changed", k, pa.get(k), ra.get(k)))

    for key in ("tokenizer", "packing", "dtype", "seed"):
        if published.get(key) != rebuilt.get(key):
            drifts.append(Drift("identity_changed", key, published.get(key), rebuilt.get(key)))

    pc, rc = published.get("config_sha256"), rebuilt.get("config_sha256")
    comparable, reason = True, ""
    if pc != rc:
        comparable, reason = False, f"config changed since publication ({str(pc)[:12]} -> {str(rc)[:12]})"
    order = {"file_changed": 0, "file_removed": 1, "file_added": 2, "count_changed": 3, "identity_changed": 4}
    drifts.sort(key=lambda d: (order.get(d.kind, 9), d.what))
    return Comparison(str(published["fingerprint"]), str(rebuilt["fingerprint"]), comparable, reason,
                      tuple(drifts))


# --- the revision diff: what a new revision changed, for `fingerprint_reproduced` and `python -m mix_assets.diff`

DIFF_COLUMNS = ["source", "documents_before", "documents_after", "documents_added", "documents_removed",
                "documents_changed", "train_tokens_before", "train_tokens_after", "val_tokens_before",
                "val_tokens_after"]


def documents_by_source(rows: list[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """{source: {doc_id: exact_key}} of the review dedup keys' rows that dedup kept (the mix's documents);
    a row without `keep` counts as kept, one without `exact_key` cannot be seen to change."""
    out: dict[str, dict[str, str]] = {}
    for r in rows:
        if r.get("keep", True):
            out.setdefault(str(r["source"]), {})[str(r["doc_id"])] = str(r.get("exact_key"))
    return out


def documents_of_dedup_keys(data: bytes | None) -> dict[str, dict[str, str]]:
    """`documents_by_source` of a review/dedup_keys.parquet's bytes ({} when the revision has none)."""
    if data is None:
        return {}
    f = pq.ParquetFile(io.BytesIO(data))
    columns = [c for c in ("doc_id", "source", "exact_key", "keep") if c in f.schema_arrow.names]
    t = f.read(columns=columns)
    # `documents_by_source` of its rows, a column at a time (no dict per row): same values, same order
    if "keep" in columns:
        t = t.filter(pc.fill_null(t.column("keep"), False))  # a null keep is falsy in a row dict too
    n = len(t)
    key = pc.fill_null(t.column("exact_key").cast(pa.string()), "None") if "exact_key" in columns else \
        pa.array(["None"] * n, pa.string())
    out: dict[str, dict[str, str]] = {}

    def strings(c: str) -> list:  # str() of each value, as the row dicts gave
        return pc.fill_null(t.column(c).cast(pa.string()), "None").to_pylist()

    for s, d, k in zip(strings("source"), strings("doc_id"), key.to_pylist()):
        out.setdefault(s, {})[d] = k
    return out


def revision_diff(before: Mapping[str, Any], after: Mapping[str, Any],
                  docs_before: Mapping[str, Mapping[str, str]],
                  docs_after: Mapping[str, Mapping[str, str]]) -> dict:
    """Per source: documents (kept by dedup, by doc_id; changed = same id, other content hash) and tokens
    per split, before and after; and the files added, removed and changed. JSON-ready."""
    sources = []
    names = sorted(set(before.get("sources") or {}) | set(after.get("sources") or {})
                   | set(docs_before) | set(docs_after))
    for s in names:
        a, b = docs_before.get(s, {}), docs_after.get(s, {})
        row = {"source": s, "documents_before": len(a), "documents_after": len(b),
               "documents_added": len(b.keys() - a.keys()), "documents_removed": len(a.keys() - b.keys()),
               "documents_changed": sum(a[k] != b[k] for k in a.keys() & b.keys())}
        for split in ("train", "val"):
            for label, m in (("before", before), ("after", after)):
                row[f"{split}_tokens_{label}"] = _get(m, f"splits.{split}.sources.{s}")
        sources.append(row)
    fa, fb = _files(before, "before"), _files(after, "after")
    files = {"added": sorted(fb.keys() - fa.keys()), "removed": sorted(fa.keys() - fb.keys()),
             "changed": sorted(p for p in fa.keys() & fb.keys() if fa[p]["sha256"] != fb[p]["sha256"])}
    return {"before": {"fingerprint": before.get("fingerprint"), "config_sha256": before.get("config_sha256")},
            "after": {"fingerprint": after.get("fingerprint"), "config_sha256": after.get("config_sha256")},
            "sources": sources, "files": files,
            "totals": {k: {"before": _get(before, f"totals.{k}"), "after": _get(after, f"totals.{k}")}
                       for k in ("train_tokens", "val_tokens", "train_samples", "val_samples")}}


def diff_text(diff: Mapping[str, Any]) -> str:
    """The revision diff as plain text (what the CLI prints)."""
    b, a = diff["before"], diff["after"]
    lines = [f"revision diff: {str(b['fingerprint'])[:16]} -> {str(a['fingerprint'])[:16]}"
             + ("" if b["config_sha256"] == a["config_sha256"] else
                f" (config {str(b['config_sha256'])[:12]} -> {str(a['config_sha256'])[:12]})")]
    for r in diff["sources"]:
        lines.append(f"  {r['source']}: documents {r['documents_before']} -> {r['documents_after']} "
                     f"(+{r['documents_added']} -{r['documents_removed']} ~{r['documents_changed']}); "
                     f"train tokens {r['train_tokens_before']} -> {r['train_tokens_after']}; "
                     f"val tokens {r['val_tokens_before']} -> {r['val_tokens_after']}")
    for k, v in diff["totals"].items():
        lines.append(f"  totals.{k}: {v['before']} -> {v['after']}")
    f = diff["files"]
    lines.append(f"  files: {len(f['added'])} added, {len(f['removed'])} removed, {len(f['changed'])} changed")
    lines += [f"    {kind} {p}" for kind in ("added", "removed", "changed") for p in f[kind]]
    return "\n".join(lines) + "\n"
