"""What the quality assets compute (no Dagster): the classifier built and checked, the scores of every
document of the sources that keep by it (a map on the engine, raw row order, over the text document_filters
judges: line_dedup's when it rewrites the source), each source's cutoff, and the
parameters document_filters decides with.

A `top_fraction` rule becomes a cutoff on the score: the score of the ceil(f x n)-th best document (ties at the
cutoff are all kept). Scores and cutoffs exist before any document is dropped; the histogram per source is
shown beside them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa

from mix_assets.core import engine as eng_mod
from mix_assets.core import layout, tables
from mix_assets.stages.quality import classifier, scoring, tiers

SCORES_SCHEMA = pa.schema([("doc_id", pa.string()), ("score", pa.float64())])


def quality_sources(spec) -> list[str]:
    """The sources whose merged `filters:` keep by the classifier, in config order."""
    if spec.quality is None:
        return []
    return [s.name for s in spec.sources if (f := spec.filters_for(s.name)) is not None and "quality" in f.active()]


def labelled_sources(spec) -> list[str]:
    """The sources the classifier's labelled documents come from."""
    t = spec.quality.train if spec.quality is not None else None
    if t is None:
        return []
    names = [s.name for s in spec.sources]
    return sorted(set(t.positives) | set(classifier.negative_sources(t, names)))


def _max_chars(q) -> Optional[int]:
    return q.train.max_chars if q.train is not None else None


@dataclass
class Built:
    sha256: str
    trained: bool
    metrics: dict
    manifest: dict
    histogram: dict  # "hq" / "lq" held-out score counts per bin


def build_classifier(storage, spec, log=None) -> Built:
    """Train (or check the brought file), score the held-out documents; writes QUALITY_MODEL and the
    training-set manifest QUALITY_TRAINING_SET."""
    q = spec.quality
    if q.file is not None:
        model = open(classifier.brought_model(q, str(spec.base_dir)), "rb").read()
    data = None
    if q.train is not None:
        raw = tables.raw_paths(storage, labelled_sources(spec))
        data = classifier.labelled(raw, q.train, spec.seed, q.newline_replacement)
        if q.file is None:
            if log:
                log.info(f"quality_classifier: training {q.name} on {int((~data.held).sum()):,} documents")
            model = classifier.train_model(data, q.train, spec.seed)
    storage.write_bytes(layout.QUALITY_MODEL, model)
    sha = storage.sha256(layout.QUALITY_MODEL)
    metrics, hist = {"roc_auc": None}, {}
    if data is not None:
        held = np.flatnonzero(data.held)
        s = scoring.score([data.texts[i] for i in held], storage.local_path(layout.QUALITY_MODEL), sha, q.label,
                          q.newline_replacement, None)  # texts are prepared already
        lab = data.labels[held]
        metrics = classifier.heldout_metrics(s, lab)
        edges = np.linspace(0, 1, q.histogram_bins + 1)
        s = np.clip(s, 0, 1)  # fastText's scores reach 1 + 1e-5 (scoring.score): the last bin holds them
        hist = {"hq": np.histogram(s[lab == 1], edges)[0].tolist(), "lq": np.histogram(s[lab == 0], edges)[0].tolist()}
        manifest = classifier.training_manifest(data, q, sha, q.file is None)
    else:
        manifest = {"model": q.name, "model_sha256": sha, "trained_in_graph": False, "hyper_parameters": None,
                    "counts": {}, "per_source": {}, "doc_ids": {}}
    manifest["heldout_metrics"] = metrics
    storage.write_text(layout.QUALITY_TRAINING_SET, json.dumps(manifest, indent=1, sort_keys=True))
    return Built(sha, q.file is None, metrics, manifest, hist)


@dataclass(frozen=True)
class ScoreChunk:
    rows: eng_mod.RowRange
    model: str
    sha256: str
    label: str
    newline: str
    max_chars: Optional[int]


def score_chunk(c: ScoreChunk) -> pa.Table:
    """The map work: every document of the rows scored (pure)."""
    t = eng_mod.read_rows(c.rows, ["doc_id", "text"])
    s = scoring.score(t.column("text").fill_null(""), c.model, c.sha256, c.label, c.newline, c.max_chars)
    return pa.table({"doc_id": t.column("doc_id").cast(pa.string()), "score": s}, schema=SCORES_SCHEMA)


def cutoff(scores: np.ndarray, rule) -> float:
    """The score a source keeps at (keep score >= cutoff)."""
    if rule.threshold is not None:
        return float(rule.threshold)
    return tiers.top_cutoff(scores, rule.top_fraction) if len(scores) else 0.0


def score_sources(storage, spec, text_files: dict, eng) -> dict:
    """Write every source's scores (raw row order) and QUALITY_CUTOFFS; returns the cutoffs' rows. `text_files`:
    {source: the documents file whose text is scored} (lines.text_files: line_dedup's output or raw's)."""
    q = spec.quality
    model, sha = storage.local_path(layout.QUALITY_MODEL), storage.sha256(layout.QUALITY_MODEL)
    edges = np.linspace(0, 1, q.histogram_bins + 1)
    out = {}
    for src in sorted(text_files):
        work = [ScoreChunk(r, model, sha, q.label, q.newline_replacement, _max_chars(q))
                for r in eng_mod.row_ranges(text_files[src], eng.chunk_rows)]
        parts = list(eng_mod.map_chunks(score_chunk, work, eng))
        t = pa.concat_tables(parts) if parts else SCORES_SCHEMA.empty_table()
        tables.write_parquet(storage, layout.QUALITY_SCORES.format(source=src), t)
        s = t.column("score").to_numpy()
        rule = spec.filters_for(src).quality
        c = cutoff(s, rule)
        out[src] = {"rule": rule.model_dump(mode="json", exclude_none=True), "cutoff": c, "documents": int(len(s)),
                    "kept": int((s >= c).sum()), "model": q.name, "model_sha256": sha,
                    "scores_sha256": storage.sha256(layout.QUALITY_SCORES.format(source=src)),
                    "histogram": np.histogram(np.clip(s, 0, 1), edges)[0].tolist()}
        if rule.tiers:  # each tier's cutoff beside the keep cutoff (token_shards fills budgets by them)
            out[src]["tiers"] = tiers.tier_rows(s, rule.tiers, c)
    storage.write_text(layout.QUALITY_CUTOFFS, json.dumps(out, indent=1, sort_keys=True))
    return out


def filter_quality(storage, spec, source: str) -> Optional[tuple]:
    """FilterParams.quality for `source` (None when it does not keep by the classifier): from QUALITY_CUTOFFS."""
    if source not in quality_sources(spec):
        return None
    if not storage.exists(layout.QUALITY_CUTOFFS):
        raise FileNotFoundError(f"{storage.uri(layout.QUALITY_CUTOFFS)}: not found; materialise quality_scores first")
    row = json.loads(storage.read_text(layout.QUALITY_CUTOFFS))[source]
    return (row["model"], row["cutoff"], tables.file_at(storage, layout.QUALITY_SCORES.format(source=source)),
            row["scores_sha256"])


# -- metadata ----------------------------------------------------------------------------------------------
def _bins(n: int) -> list[str]:
    e = np.linspace(0, 1, n + 1)
    return [f"{a:.2f}-{b:.2f}" for a, b in zip(e, e[1:])]


def metrics_metadata(m: dict, q) -> dict:
    import dagster as dg

    return {k: dg.MetadataValue.float(float(v)) if isinstance(v, float) else dg.MetadataValue.int(int(v))
            for k, v in {"heldout_precision": m.get("precision"), "heldout_recall": m.get("recall"),
                         "heldout_roc_auc": m.get("roc_auc"), "heldout_documents": m.get("documents"),
                         "min_auc": q.min_auc}.items() if v is not None}


def classifier_metadata(b: Built) -> dict:
    import dagster as dg

    q_counts = b.manifest.get("counts", {})
    rows = "\n".join(f"| {lab} | " + " | ".join(str(x) for x in b.histogram[lab]) + " |" for lab in b.histogram)
    bins = _bins(len(next(iter(b.histogram.values())))) if b.histogram else []
    hist = (f"| label | {' | '.join(bins)} |\n|---|{'---|' * len(bins)}\n{rows}" if b.histogram else "no labelled data")
    return {
        "model_sha256": dg.MetadataValue.text(b.sha256),
        "trained_in_graph": dg.MetadataValue.bool(b.trained),
        "training_counts": dg.MetadataValue.json(q_counts),
        "hyper_parameters": dg.MetadataValue.json(b.manifest.get("hyper_parameters") or {}),
        "heldout_metrics": dg.MetadataValue.json(b.metrics),
        "heldout_score_histogram": dg.MetadataValue.md(hist),
        "model_file": dg.MetadataValue.path(layout.QUALITY_MODEL),
        "training_set": dg.MetadataValue.path(layout.QUALITY_TRAINING_SET),
    }


def scores_metadata(cutoffs: dict, q) -> dict:
    import dagster as dg

    bins = _bins(q.histogram_bins)
    head = f"| source | cutoff | kept / docs | {' | '.join(bins)} |\n|---|---|---|{'---|' * len(bins)}\n"
    rows = "\n".join(f"| {s} | {r['cutoff']:.4f} | {r['kept']:,} / {r['documents']:,} | "
                     + " | ".join(str(x) for x in r["histogram"]) + " |" for s, r in sorted(cutoffs.items()))
    tiered = {s: r["tiers"] for s, r in sorted(cutoffs.items()) if r.get("tiers")}
    tier_md = {"quality_tiers": dg.MetadataValue.md(
        "| source | tier | starts at score | epochs (per source epoch) | kept documents |\n|---|---|---|---|---|\n"
        + "\n".join(f"| {s} | {t['name']} | {t['cutoff']:.4f} | {t['epochs']:g} | {t['documents']:,} |"
                    for s, ts in tiered.items() for t in ts))} if tiered else {}
    return {**tier_md, "score_histogram_per_source": dg.MetadataValue.md(head + rows),
            "cutoffs": dg.MetadataValue.json({s: {k: r[k] for k in ("rule", "cutoff", "documents", "kept")}
                                              for s, r in cutoffs.items()}),
            "documents_scored": dg.MetadataValue.int(sum(r["documents"] for r in cutoffs.values()))}
