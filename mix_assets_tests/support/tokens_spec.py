"""A small MixSpec for the tokens-stage tests."""

import json
from pathlib import Path

from mix_assets.config import parse_spec


def tiny_eval_task(root) -> dict:
    """A 60-row local eval task whose words never occur in the generated sources (tokens_fixtures.WORDS)."""
    folder = Path(root) / "evals" / "tiny_qa"
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"question": f"which numbered quartz beacon {i} guides zebra pilots across the frozen delta "
                         f"toward marker {i * 7} before dusk tonight"} for i in range(60)]
    (folder / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # relative to the spec file (root/tiny.yaml): the review config, and so the fingerprint, holds no tmp path
    return {"name": "tiny_qa", "dataset": {"kind": "local", "path": "evals/tiny_qa"}, "scored_split": "validation",
            "audit_splits": ["validation"], "fields": ["question"], "min_rows": 50}


def tiny_spec(root, sources=("a", "b"), shares=None, target_tokens=20_000, epochs=None, **sections):
    shares = shares or {s: 1 / len(sources) for s in sources}
    data = {
        "name": "tiny",
        "target_tokens": target_tokens,
        "seed": 11,
        "sources": [
            {
                "name": s,
                "loader": {"kind": "parquet", "paths": [f"{s}.parquet"]},
                "text_field": "text",
                "license": "test",
                "rationale": "synthetic text for the tokens-stage tests",
                "share": shares[s],
                "epochs": (epochs or {}).get(s, 1.0),
            }
            for s in sources
        ],
        "tokenizer": {"kind": "train", "vocab_size": 400, "train_sample_bytes": 200_000},
        "packing": {"seq_len": 64, "shard_tokens": 4096, "encode_batch_docs": 64},
        "split": {"val_fraction": 0.1, "tolerance": 0.5},
        "storage": {"root": str(root)},
        "audit": {"tasks": [tiny_eval_task(root)]},
    }
    for k, v in sections.items():
        data[k] = {**data.get(k, {}), **v}
    return parse_spec(data, str(root / "tiny.yaml"))
