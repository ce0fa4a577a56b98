"""Shared fixtures: configs written into tmp_path, storage roots, the real text (fixture and shared data)."""

from __future__ import annotations

from pathlib import Path

# huggingface_hub and datasets freeze HF_HUB_OFFLINE into constants at import: import them now, with
# the real environment, so a test that goes offline (the `hf_offline` fixture) cannot leak into others.
import datasets  # noqa: E402,F401
import huggingface_hub.constants  # noqa: E402
import pytest
import yaml

# Reusable fixtures: a SeaweedFS S3 server (session), a synthetic mix directory, an offline hub, the demo built
# once per session (restored for each test that starts from it) and its in-process fingerprint (session).
from mix_assets_tests.support.built_demo import built_demo, demo_fingerprint  # noqa: F401
from mix_assets_tests.support.fake_hub import fake_hub  # noqa: F401
from mix_assets_tests.support.shared_data import FIXTURE, find_shared_data, missing_reason, required, shared_data_dir
from mix_assets_tests.support.s3server import seaweedfs  # noqa: F401
from mix_assets_tests.support.synthetic_mix import synthetic_mix  # noqa: F401

REPO = Path(__file__).resolve().parent.parent


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items):
    skip = find_shared_data() is None and not required()
    for item in items:  # a test that takes the folder is a shared_data test, marked or not
        if "shared_data" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.shared_data)
        if skip and item.get_closest_marker("shared_data"):
            item.add_marker(pytest.mark.skip(reason=missing_reason()))


def pytest_runtest_setup(item):
    if item.get_closest_marker("shared_data"):
        shared_data_dir()  # fails when the folder is absent and MIX_REQUIRE_SHARED_DATA=1


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder (support/shared_data.py says how it is found)."""
    return shared_data_dir()


@pytest.fixture(params=["fixture", pytest.param("shared", marks=pytest.mark.shared_data)])
def real_data(request) -> Path:
    """Run a test on the in-repo fixture, and again on the shared data folder when it is there."""
    return FIXTURE if request.param == "fixture" else shared_data_dir()


@pytest.fixture
def hf_offline(monkeypatch):
    """Hub code paths with no network: env and the libraries' frozen constants, restored afterwards."""
    import datasets.config

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


def write_config(tmp_path: Path, data: dict, name: str = "mix.yaml") -> Path:
    """Write a config dict as YAML into tmp_path and return its path."""
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def minimal_config(**overrides) -> dict:
    """A one-source config dict; sources/paths are filled in by the test."""
    base = {
        "name": "t_mix",
        "target_tokens": 1000,
        "seed": 3,
        "sources": [],
        "storage": {"root": "storage", "cache_dir": "cache"},
    }
    base.update(overrides)
    return base


def source(name: str, loader: dict, share: float = 1.0, **kw) -> dict:
    d = {
        "name": name,
        "loader": loader,
        "license": "test",
        "rationale": "A test source whose property is that it is small and local.",
        "share": share,
    }
    if loader["kind"] != "text":
        d["text_field"] = "text"
    d.update(kw)
    return d
