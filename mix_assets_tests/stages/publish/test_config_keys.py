"""The config a revision carries must rebuild its artifacts' keys (stages/publish/input_keys.config_problems):
derived from the published review config through the running code, every recorded code_version must match."""

from __future__ import annotations

import json

from mix_assets.config import MixConfigError, load_spec, parse_spec
from mix_assets.definitions import code_versions
from mix_assets.stages.manifest.builder import review_config_json
from mix_assets.stages.publish.input_keys import config_problems


def _published(spec) -> dict:
    return json.loads(review_config_json(spec.model_dump(mode="json")))


def test_the_demo_review_config_gives_every_recorded_code_version():
    spec = load_spec("configs/demo.yaml")
    recorded = code_versions(spec)
    assert {"raw/stories", "dedup_keys", "token_shards", "manifest"} <= set(recorded)
    # published_revision is not in a revision's chain (its head is manifest); the rest are re-derived
    chain = {k: v for k, v in recorded.items() if k != "published_revision"}
    assert config_problems(chain, code_versions(parse_spec(_published(spec), "mix_config.json"))) == []


def test_a_config_that_did_not_build_the_artifacts_is_named_asset_by_asset():
    spec = load_spec("configs/demo.yaml")
    chain = {k: v for k, v in code_versions(spec).items() if k != "published_revision"}
    edited = _published(spec)
    edited["dedup"]["threshold"] = 0.7  # as if the revision's config were not the one its dedup ran under
    problems = config_problems(chain, code_versions(parse_spec(edited, "mix_config.json")), "mix_config.json")
    named = {p.split(":", 1)[0] for p in problems}
    assert {"dedup_keys", "exclusion_masks", "validation_split", "token_shards", "manifest"} <= named
    assert not any(n.startswith("raw/") or n in ("eval_registry", "document_filters") for n in named), named
    assert all("recorded code_version" in p and "mix_config.json gives" in p for p in problems)
