"""A generated mix with the URL filter, cross-document line dedup and a quality classifier (with a tier) on
(issue 30): the config template tests/test_filters_mix.py and `bench/graph.py --filters all` write.

Corpus (gen_corpus.py with `FilterSignals`): the pool `part_a`..`part_d` (order-2 Markov prose, 10 % planted
near-copies, plus word salad mixed in, a planted boilerplate line ending 30 % of the documents, a URL on every
row, 3 % on a blocklisted domain and 1 % holding a blocklisted substring); `reference`, clean generated prose,
the classifier's positives; `junk`, word salad alone, its negatives. The classifier learns word order (fastText
bigrams): the salad in the pool scores low and is rejected by each pool source's threshold (`quality:<name>`);
the best-scored fifth of each pool source is a tier seen twice. Every path in the config is relative to it
(corpus/, storage/, cache/, published/ beside mix.yaml), so the same corpus and config written in another
folder give the same canonical config, hence the same fingerprint.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Optional

import yaml

from mix_assets_tests.support import gen_corpus as gc

POOL = ("part_a", "part_b", "part_c", "part_d")
LABELLED = ("reference", "junk")
QUALITY = "prose-vs-salad"  # the model's name: rejections read quality:prose-vs-salad
URL_LISTS = ("spam_hosts", "url_words")  # rejections read url:spam_hosts, url:url_words
LINE_DEDUP = {"min_docs": 10, "min_line_chars": 20}
NOT_FILTERS = ("guard", "expect", "pii", "url", "quality")  # sections of `filters:` that are no cascade filter
POOL_RULE = {"threshold": 0.3, "tiers": [{"name": "top", "top_fraction": 0.2, "epochs": 2}, {"name": "rest"}]}


def write_corpus(model: gc.MarkovModel, folder: Path, target_bytes: int, seed: int,
                 signals: gc.FilterSignals = gc.FilterSignals()) -> tuple[dict, gc.Corpus]:
    """The pool (about `target_bytes` before the salad), reference and junk as JSONL under `folder`, and the
    two blocklists. Returns ({source or list: path}, the pool's corpus)."""
    corpus = gc.generate_bytes(model, target_bytes, seed=seed)
    paths = gc.write_jsonl_sources(corpus, folder, POOL, seed=seed, signals=signals, model=model)
    n = len(corpus.texts)
    paths.update(gc.write_reference_sources(model, folder, n_reference=max(100, n // 10), n_junk=max(100, n // 20),
                                            seed=seed, signals=signals))
    return paths, corpus


def source_bytes(paths: dict) -> dict:
    """UTF-8 bytes of each source's stripped texts (what raw/<source> measures)."""
    return {s: sum(len(json.loads(line)["text"].strip().encode()) for line in open(paths[s]))
            for s in POOL + LABELLED}


def sources(paths: dict, shares: dict, rel_to: Path, cascade_sections: tuple = ()) -> list[dict]:
    """Every source with `url_field: url`; the pool's keep by the classifier (POOL_RULE); `junk` runs none of
    `cascade_sections` (the cascade would take most of the salad, and junk must meet its budget: it is in the
    mix so the classifier trains on it)."""
    out = []
    for s in POOL + LABELLED:
        entry = {"name": s, "loader": {"kind": "jsonl", "paths": [str(Path(paths[s]).relative_to(rel_to))]},
                 "text_field": "text", "url_field": "url", "license": "generated (CC0)",
                 "rationale": {"reference": "Generated order-2 Markov prose without copies: the classifier's "
                                            "reference (positives).",
                               "junk": "Word salad (prose's words without their order): the classifier's "
                                       "negatives."}.get(s, "Order-2 Markov prose, 10 % near-copies, word salad "
                                                            "mixed in, a planted boilerplate line, URLs."),
                 "share": shares[s]}
        if s in POOL:
            entry["filters"] = {"quality": copy.deepcopy(POOL_RULE)}
        elif s == "junk" and cascade_sections:
            entry["filters"] = {k: {"enabled": False} for k in cascade_sections}
        out.append(entry)
    return out


def sections(paths: dict, rel_to: Path, keep_share: float, cascade: Optional[dict] = None) -> dict:
    """The `filters:` (the cascade given, if any, then the URL lists), `line_dedup:` and `quality:` sections.
    The classifier makes about 20,000 passes over documents of each label whatever the corpus size (100 epochs of
    a small corpus's 100 junk documents; 10 of a large one's 2,000): fewer leave every score near 0.5."""
    labelled = min(2000, sum(1 for _ in open(paths["junk"])))
    epoch = max(5, min(100, 20000 // labelled))
    lists = [{"name": URL_LISTS[0], "path": str(Path(paths["domains"]).relative_to(rel_to)), "kind": "domains"},
             {"name": URL_LISTS[1], "path": str(Path(paths["url_words"]).relative_to(rel_to)), "kind": "substrings"}]
    return {
        "filters": {**(cascade or {}), "url": {"lists": lists}, "keep_share": keep_share},
        "line_dedup": dict(LINE_DEDUP),
        "quality": {"name": QUALITY, "min_auc": 0.9,
                    "train": {"positives": ["reference"], "negatives": ["junk"], "max_docs_per_label": 2000,
                              "dim": 16, "bucket": 20000, "epoch": epoch, "lr": 1.0}},
    }


def write_mix(folder: Path, model: gc.MarkovModel, target_bytes: int, seed: int, base: dict, *,
              keep_share: float = 0.75, cascade: Optional[dict] = None, bytes_per_token: float = 4.0,
              read_share: float = 0.97) -> tuple[Path, dict]:
    """<folder>/mix.yaml over <folder>/corpus: `base` (tokenizer, packing, dedup, audit, split...) with the
    sources and sections above, each share its share of the bytes and target_tokens set so each raw budget
    (budget x headroom / keep_share) is `read_share` of the source's estimated tokens. Returns (the config,
    {"paths", "bytes", "target_tokens", "docs", "pairs"})."""
    folder = Path(folder)
    paths, corpus = write_corpus(model, folder / "corpus", target_bytes, seed)
    nbytes = source_bytes(paths)
    total = sum(nbytes.values())
    names = POOL + LABELLED
    shares = {s: round(nbytes[s] / total, 6) for s in names[:-1]}
    shares[names[-1]] = round(1.0 - sum(shares.values()), 6)
    cfg = {"name": "filters_mix", "description": "Generated prose with URL, boilerplate and quality signals "
           "(mix_assets_tests/support/filters_mix.py).", **base}
    headroom, val = cfg.get("headroom", 1.25), cfg.get("split", {}).get("val_fraction", 0.02)
    target = int(read_share * total / bytes_per_token * (1 - val) / headroom * keep_share)
    cfg.update(target_tokens=target, headroom=headroom,
               sources=sources(paths, shares, folder, tuple(k for k, v in (cascade or {}).items()
                                                            if isinstance(v, dict) and k not in NOT_FILTERS)),
               **sections(paths, folder, keep_share, cascade),
               storage={"root": "storage", "cache_dir": "cache"}, publish={"url": "published"})
    out = folder / "mix.yaml"
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out, {"paths": paths, "bytes": total, "target_tokens": target, "docs": sum(
        1 for s in names for _ in open(paths[s])), "pairs": int(len(corpus.pairs)),
        "j_min": float(corpus.jaccard.min()), "j_max": float(corpus.jaccard.max())}
