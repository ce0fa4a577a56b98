"""MixResource: the spec is parsed once per version of the config file."""

from mix_assets import config
from mix_assets.resources import MixResource
from mix_assets_tests.conftest import minimal_config, source, write_config


def _config(tmp_path, **kw):
    return write_config(tmp_path, minimal_config(sources=[source("web", {"kind": "jsonl", "paths": ["w.jsonl"]})],
                                                 **kw))


def test_spec_is_parsed_once_and_again_after_an_edit(tmp_path, monkeypatch):
    cfg = _config(tmp_path)
    calls = []
    real = config.parse_spec
    monkeypatch.setattr(config, "parse_spec", lambda *a, **k: calls.append(1) or real(*a, **k))
    mix = MixResource(config_path=str(cfg))
    first = mix.spec
    assert all(mix.spec is first for _ in range(100)) and mix.storage.root == first.resolve(first.storage.root)
    assert len(calls) == 1
    _config(tmp_path, seed=4)  # an edited config is read by the next access, not served from the cache
    assert mix.spec.seed == 4 and len(calls) == 2


def test_storage_root_override_is_part_of_the_cache_key(tmp_path):
    cfg = _config(tmp_path)
    a = MixResource(config_path=str(cfg), storage_root=str(tmp_path / "a"))
    b = MixResource(config_path=str(cfg), storage_root=str(tmp_path / "b"))
    assert (a.storage.root, b.storage.root) == (str(tmp_path / "a"), str(tmp_path / "b"))
