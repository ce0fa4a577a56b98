"""A small MixSpec for the tokens-stage tests."""

from mix_assets.config import parse_spec


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
    }
    for k, v in sections.items():
        data[k] = {**data.get(k, {}), **v}
    return parse_spec(data, str(root / "tiny.yaml"))
