"""The fixture mix's settings over generated JSONL sources (../mix_assets_tests/support/gen_corpus.write_jsonl_sources), for
end-to-end tests that run the real definitions to the published revision."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from mix_assets.config import load_spec
from mix_assets_tests.support.shared_data import FIXTURE, FIXTURE_CONFIG


def fixture_mix_over(tmp: Path, paths: dict, *, name: str, description: str, rationale: str,
                     read_share: float, **extra) -> Path:
    """Write <tmp>/<name>.yaml: the fixture config with `paths` ({source: jsonl}) as equal-share sources,
    storage and publish target under `tmp`, `extra` top-level sections, and target_tokens set so that
    about `read_share` of the smallest source is read."""
    cfg = yaml.safe_load(FIXTURE_CONFIG.read_text())
    cfg.update(name=name, description=description, **extra)
    cfg["sources"] = [
        {"name": s, "loader": {"kind": "jsonl", "paths": [p]}, "text_field": "text",
         "license": "generated (CC0)", "rationale": rationale, "share": 1 / len(paths)}
        for s, p in paths.items()
    ]
    for t in cfg["audit"]["tasks"]:
        t["dataset"]["path"] = str(FIXTURE / t["dataset"]["path"])
    cfg["storage"] = {"root": str(tmp / "storage"), "cache_dir": str(tmp / "cache")}
    cfg["publish"]["url"] = str(tmp / "published")
    out = tmp / f"{name}.yaml"
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    spec = load_spec(out)
    tokens = min(sum(len(json.loads(line)["text"].strip().encode()) for line in open(p))
                 for p in paths.values()) / spec.tokenizer.bytes_per_token_fallback
    share = 1 / len(paths)
    cfg["target_tokens"] = int(read_share * tokens * (1 - spec.split.val_fraction) / (share * spec.headroom))
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out
