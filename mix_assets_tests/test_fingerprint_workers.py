"""Issue 13 §5: the whole demo graph publishes the same fingerprint with 1, 2 and 4 workers, in process
and on Ray; issue 29: and with dedup_keys' reduce in 1, 2 or 8 partitions. Worker, thread and partition counts are
operational (`engine`, `*.threads`, `dedup.partitions`): never in the published config."""

import json

import dagster as dg
import pytest
import yaml

from mix_assets.config import REPO_ROOT, load_spec
from mix_assets.definitions import build_definitions
from mix_assets.core import engine as eng
from mix_assets_tests.support.ray_local import local_ray

CONFIGS = REPO_ROOT / "configs"


def _absolute(node):
    """The demo config's relative paths made absolute, so a copy works from a temp dir."""
    if isinstance(node, dict):
        return {k: _absolute(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_absolute(v) for v in node]
    if isinstance(node, str) and node.startswith("../"):
        return str((CONFIGS / node).resolve())
    return node


def _fingerprint(tmp_path, name: str, threads: int, engine: dict, partitions: int = 1,
                 tokenizer: dict | None = None) -> str:
    cfg = _absolute(yaml.safe_load((CONFIGS / "demo.yaml").read_text()))
    cfg.setdefault("tokenizer", {}).update(tokenizer or {})
    for section in ("packing", "dedup", "audit"):
        cfg.setdefault(section, {})["threads"] = threads
    cfg["dedup"]["partitions"] = partitions
    cfg["engine"] = engine
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    root = tmp_path / name
    defs = build_definitions(load_spec(path), storage_root=str(root))
    sel = dg.AssetSelection.all() - dg.AssetSelection.assets("published_revision")
    res = dg.materialize(list(defs.assets), resources=defs.resources, selection=sel,
                         instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert res.success, name
    return json.loads((root / "mix" / "manifest.json").read_text())["fingerprint"]


# The peer the Ray and HF builds are compared with: 2 threads in process, 1 partition, the fast encoder (backend
# is operational: test_same_fingerprint_and_code_versions_with_each_encoder_backend compares it with HF). Built
# once per session (the fixture `demo_fingerprint`, support/built_demo.py; test_ray_two_nodes compares with it
# too): the Ray and HF tests each built this same configuration again before.
REFERENCE = {"threads": 2, "engine": {"kind": "local", "num_cpus": 2}, "partitions": 1, "tokenizer": {"backend": "fast"}}


@pytest.fixture
def reference(demo_fingerprint) -> str:
    """The fingerprint of the demo built with REFERENCE's settings."""
    return demo_fingerprint


def test_same_fingerprint_for_any_worker_count_in_process(tmp_path):
    prints = {
        "one": _fingerprint(tmp_path, "one", 1, {"kind": "local", "num_cpus": 1}),
        "two": _fingerprint(tmp_path, "two", 2, {"kind": "local", "num_cpus": 2}, partitions=2),
        "four_small_chunks": _fingerprint(tmp_path, "four", 4, {"kind": "local", "num_cpus": 4, "chunk_rows": 37},
                                          partitions=8),
    }
    assert len(set(prints.values())) == 1, prints


@pytest.mark.timeout(600)
def test_same_fingerprint_on_ray_as_in_process(tmp_path, reference):
    with local_ray(eng.Engine(kind="ray", num_cpus=2)):  # the engine resource uses the connected instance
        ray2 = _fingerprint(tmp_path, "ray", 2, {"kind": "ray", "num_cpus": 2, "chunk_rows": 101}, partitions=8,
                            tokenizer=REFERENCE["tokenizer"])  # only where and how it runs differs from the peer
    assert ray2 == reference


def test_same_fingerprint_and_code_versions_with_each_encoder_backend(tmp_path, reference):
    """tokenizer.backend (stages/tokens/backends.py) is operational: the demo's fingerprint and every asset's
    code_version (hence every artifact key) are the same with the HF reference and the fast backend."""
    versions = {}
    for backend in ("hf", "fast"):
        cfg = _absolute(yaml.safe_load((CONFIGS / "demo.yaml").read_text()))
        cfg.setdefault("tokenizer", {})["backend"] = backend
        path = tmp_path / f"{backend}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        defs = build_definitions(load_spec(path), storage_root=str(tmp_path / backend))
        versions[backend] = {k.to_user_string(): v for a in defs.assets for k, v in a.code_versions_by_key.items()}
    assert versions["hf"] == versions["fast"]
    assert REFERENCE["tokenizer"] == {"backend": "fast"}  # the module's peer is the fast backend's build
    prints = {"hf": _fingerprint(tmp_path, "hf", **{**REFERENCE, "tokenizer": {"backend": "hf"}}), "fast": reference}
    assert prints["hf"] == prints["fast"], prints
