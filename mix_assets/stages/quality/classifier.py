"""The quality classifier (no Dagster): its labelled documents, its training, its held-out quality.

DCLM-style (arXiv 2406.11794 §4.4): label `hq` for the documents of the reference sources, `lq` for a
seeded sample of the rest of the raw pool; each document's side (train / held out) and whether it is
sampled are decided by a hash of (seed, doc_id), so the sets do not depend on the row order or the engine.
Training is fastText supervised (`fasttext-new`, a Rust port whose .bin files the C++ fasttext-predict
loads and scores identically) with thread=1 and a fixed seed: the model file is byte-identical on a rebuild.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import tempfile
from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np
import pyarrow.parquet as pq

from mix_assets.stages.quality import scoring
from mix_assets.stages.quality.config import QualitySpec, QualityTraining

POS, NEG = "__label__hq", "__label__lq"
TRAINER_DIST = "fasttext-new"  # pinned in pyproject.toml


class ModelMismatchError(ValueError):
    """A brought model file whose bytes are not the ones the config pins."""


def _unit(seed: int, what: str, doc_ids: list[str]) -> np.ndarray:
    """A uniform [0, 1) number per doc id from sha256(seed, what, id): the sampling and split draws."""
    pre = f"{seed}:{what}:".encode()
    return np.array([int.from_bytes(hashlib.sha256(pre + d.encode()).digest()[:8], "big") / 2.0 ** 64
                     for d in doc_ids], dtype=np.float64)


@dataclass
class Labelled:
    """The labelled documents: ids, texts (one line each), labels (1 = hq), held-out flags."""

    doc_ids: list
    texts: list
    labels: np.ndarray
    held: np.ndarray
    sources: list


def negative_sources(train: QualityTraining, sources: list[str]) -> list[str]:
    return [s for s in sources if s not in train.positives] if train.negatives is None else list(train.negatives)


def labelled(raw: Mapping[str, object], train: QualityTraining, mix_seed: int, newline: str) -> Labelled:
    """Positives from `train.positives`, negatives from the other sources (or `train.negatives`), each side a
    seeded sample of at most max_docs_per_label documents; `raw`: {source: its raw documents parquet}."""
    seed = mix_seed * 1_000_003 + train.seed
    out = Labelled([], [], np.zeros(0, np.int8), np.zeros(0, bool), [])
    sides = [(1, list(train.positives)), (0, negative_sources(train, sorted(raw)))]
    for lab, srcs in sides:
        missing = sorted(set(srcs) - set(raw))
        if missing:
            raise ValueError(f"quality.train: source(s) {missing} are not sources of the mix")
        ids, srcs_of = [], []
        for s in srcs:
            got = pq.read_table(raw[s], columns=["doc_id"]).column("doc_id").to_pylist()
            ids += got
            srcs_of += [s] * len(got)
        if not ids:
            raise ValueError(f"quality.train: no documents labelled {'hq' if lab else 'lq'} (sources {srcs})")
        draw = _unit(seed, "sample", ids)
        picked = sorted(np.argsort(draw, kind="stable")[:train.max_docs_per_label].tolist())
        wanted = {ids[i] for i in picked}
        texts: dict[str, str] = {}
        for s in sorted(set(srcs_of[i] for i in picked)):
            t = pq.read_table(raw[s], columns=["doc_id", "text"])
            for d, x in zip(t.column("doc_id").to_pylist(), t.column("text").to_pylist()):
                if d in wanted:
                    texts[d] = x
        chosen = [ids[i] for i in picked]
        out.doc_ids += chosen
        out.sources += [srcs_of[i] for i in picked]
        out.texts += scoring.prepared([texts[d] for d in chosen], newline, train.max_chars)
        out.labels = np.concatenate([out.labels, np.full(len(chosen), lab, np.int8)])
        out.held = np.concatenate([out.held, _unit(seed, "held", chosen) < train.held_out])
    return out


def train_model(data: Labelled, train: QualityTraining, mix_seed: int) -> bytes:
    """The fastText .bin bytes trained on the non-held-out documents (one thread, fixed seed)."""
    import fasttext_new

    order = np.argsort(_unit(mix_seed * 1_000_003 + train.seed, "order", data.doc_ids), kind="stable")
    with tempfile.TemporaryDirectory() as tmp:
        path, model = os.path.join(tmp, "train.txt"), os.path.join(tmp, "model.bin")
        with open(path, "w", encoding="utf-8") as f:
            for i in order:
                if not data.held[i]:
                    f.write(f"{POS if data.labels[i] else NEG} {data.texts[i]}\n")
        m = fasttext_new.train_supervised(
            input=path, epoch=train.epoch, lr=train.lr, dim=train.dim, wordNgrams=train.word_ngrams,
            minCount=train.min_count, bucket=train.bucket, thread=1, seed=train.seed, verbose=0)
        m.save_model(model)
        with open(model, "rb") as f:
            return f.read()


def hyper_parameters(train: QualityTraining) -> dict:
    return {**train.model_dump(mode="json"), "thread": 1, "loss": "softmax",
            "trainer": f"{TRAINER_DIST}=={importlib.metadata.version(TRAINER_DIST)}"}


def training_manifest(data: Labelled, spec: QualitySpec, model_sha: str, trained: bool) -> dict:
    """What the classifier was trained (or evaluated) on: doc ids per label and side, counts, hyper-parameters."""
    def ids(lab: int, held: bool) -> list[str]:
        return sorted(d for d, l, h in zip(data.doc_ids, data.labels, data.held) if l == lab and h == held)

    counts = {f"{name}_{side}": int(((data.labels == lab) & (data.held == held)).sum())
              for name, lab in (("hq", 1), ("lq", 0)) for side, held in (("train", False), ("held_out", True))}
    per_source: dict[str, dict] = {}
    for s, l in zip(data.sources, data.labels):
        per_source.setdefault(s, {"hq": 0, "lq": 0})["hq" if l else "lq"] += 1
    return {"model": spec.name, "model_sha256": model_sha, "trained_in_graph": trained,
            "hyper_parameters": hyper_parameters(spec.train) if spec.train else None,
            "counts": counts, "per_source": per_source,
            "doc_ids": {"hq_train": ids(1, False), "hq_held_out": ids(1, True),
                        "lq_train": ids(0, False), "lq_held_out": ids(0, True)}}


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> Optional[float]:
    """ROC-AUC (Mann-Whitney U with average ranks for ties); None without both classes."""
    pos, neg = int((labels == 1).sum()), int((labels == 0).sum())
    if not pos or not neg:
        return None
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores), np.float64)
    s = scores[order]
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[labels == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def heldout_metrics(scores: np.ndarray, labels: np.ndarray, threshold: float = 0.5) -> dict:
    """Precision and recall of `score >= threshold` for hq, and ROC-AUC, on the held-out documents."""
    pred = scores >= threshold
    tp = int((pred & (labels == 1)).sum())
    fp = int((pred & (labels == 0)).sum())
    fn = int((~pred & (labels == 1)).sum())
    return {"documents": int(len(labels)), "hq": int((labels == 1).sum()), "lq": int((labels == 0).sum()),
            "threshold": threshold, "precision": tp / (tp + fp) if tp + fp else None,
            "recall": tp / (tp + fn) if tp + fn else None, "roc_auc": roc_auc(scores, labels)}


def brought_model(spec: QualitySpec, config_dir: Optional[str]) -> str:
    """The path of the user's model file once its sha256 is the pinned one (else ModelMismatchError)."""
    path = spec.file if os.path.isabs(spec.file) or not config_dir else os.path.join(config_dir, spec.file)
    if not os.path.exists(path):
        raise FileNotFoundError(f"quality.file: {path} not found")
    got = scoring.file_sha256(path)
    if got != spec.sha256:
        raise ModelMismatchError(f"quality.file: {path} has sha256 {got}, the config pins {spec.sha256}: "
                                 "not the model the config names (update quality.sha256 only if the new file "
                                 "is meant)")
    return path
