"""Review files (dedup keys, exclusion masks, contamination report, mix config) for hand-built test mixes.

The manifest checker cross-checks the manifest against them (budgets and packing against the config,
document counts against the dedup keys minus the exclusion masks), so a hand-built mix must carry a
consistent set: `write_review_files` writes one and returns the manifest fields that follow from it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.core.seeded import unit_hash

REVIEW = {
    "dedup_keys": "review/dedup_keys.parquet",
    "exclusion_masks": "review/exclusion_masks.parquet",
    "contamination_report": "review/contamination_report.json",
    "config": "review/mix_config.json",
}
REVIEW_PATHS = list(REVIEW.values())


def write_review_files(root: str | Path, *, name: str, seed: int, splits: dict, packing: dict,
                       tokenizer_kind: str = "file", val_fraction: float = 0.1, docs_per_source: int = 12,
                       budgets: dict[str, int] | None = None, wordless: dict[str, int] | None = None) -> dict:
    """Write `root/review/*` consistent with `splits` (its per-source emitted train tokens are the budgets,
    epochs 1) and `packing`; set splits[*]["documents"]. Returns {"review", "config_sha256", "sources"}
    (the manifest's `sources` section). budgets: configure these instead (the same config as another
    build; the manifest then disagrees with it where the train tokens differ). wordless: {source: k}, the
    first k kept train documents of the source have no words (n_words 0)."""
    root = Path(root)
    (root / "review").mkdir(parents=True, exist_ok=True)
    train_tok = splits["train"]["sources"]
    names = sorted(train_tok)
    # per source: singleton clusters, the last document an exact duplicate of the first (excluded)
    ids, srcs, clusters, excluded = [], [], [], []
    for s in names:
        for i in range(docs_per_source):
            ids.append(f"{s}-{i:04d}")
            srcs.append(s)
            clusters.append(f"{s}-0000" if i == docs_per_source - 1 else f"{s}-{i:04d}")
        excluded.append(f"{s}-{docs_per_source - 1:04d}")
    keep = [d not in excluded for d in ids]
    n_words, left = [], dict(wordless or {})
    for s, c, k in zip(srcs, clusters, keep):
        none = k and unit_hash(seed, c) >= val_fraction and left.get(s, 0) > 0
        left[s] = left.get(s, 0) - none
        n_words.append(0 if none else 10)
    pq.write_table(pa.table({"doc_id": ids, "source": srcs, "cluster_id": clusters, "keep": keep,
                             "reason": [None if k else "exact_dup" for k in keep], "n_words": n_words}),
                   root / REVIEW["dedup_keys"])
    pq.write_table(pa.table({"doc_id": excluded, "source": names, "reasons": [["exact_dup"]] * len(names),
                             "kept_doc_id": [f"{s}-0000" for s in names]}), root / REVIEW["exclusion_masks"])
    (root / REVIEW["contamination_report"]).write_text(json.dumps({"counts": {s: {} for s in names}}))

    val_docs, train_docs = 0, dict.fromkeys(names, 0)
    for d, s, c, k in zip(ids, srcs, clusters, keep):
        if not k:
            continue
        if unit_hash(seed, c) < val_fraction:
            val_docs += 1
        else:
            train_docs[s] += 1
    assert all(train_docs.values()), f"a source of seed {seed} has no train document: {train_docs}"
    unique = {s: min(train_docs[s], 3) for s in names}
    splits["val"]["documents"] = val_docs
    splits["train"]["documents"] = sum(unique.values())

    budgets = budgets or train_tok
    target = sum(budgets.values())
    seq_len = packing["seq_len"]
    config = {
        "name": name, "seed": seed, "target_tokens": target,
        "sources": [{"name": s, "share": budgets[s] / target, "epochs": 1.0} for s in names],
        "packing": {"seq_len": seq_len, "shifted_targets": packing["shifted_targets"],
                    "samples_per_seq": 1 if packing["shifted_targets"] else packing["sample_len"] // seq_len,
                    "separator": packing["separator"]},
        "tokenizer": {"kind": tokenizer_kind, "repo_id": None, "revision": None},
        "split": {"val_fraction": val_fraction},
    }
    text = json.dumps(config, sort_keys=True, separators=(",", ":")) + "\n"
    (root / REVIEW["config"]).write_text(text)
    sources = {
        s: {"train_tokens": train_tok[s], "val_tokens": splits["val"]["sources"].get(s, 0),
            "budget_tokens": budgets[s], "epochs": 1.0, "unique_documents": unique[s]}
        for s in names
    }
    return {"review": dict(REVIEW), "config_sha256": hashlib.sha256(text.encode()).hexdigest(), "sources": sources}
