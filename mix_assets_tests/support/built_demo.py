"""The demo built once per test session over a private corpus copy, restored at the same paths for each test.

Several slow tests start from the same state: `private_demo` (test_integrity_lineage.py) built whole, then
edited or partly re-materialised. Building it costs one whole demo graph per test; the session fixture
`built_demo` (re-exported by conftest.py) builds it once, into an on-disk instance (for tests that ask
Dagster's stale status), and keeps a pristine copy. `built_demo.restore()` puts that build back (corpus,
config, storage, cache, published target, instance) at the same paths: the paths are part of the config
(mix_config.json holds the sources' absolute paths), so a copy elsewhere would be another config.

`demo_fingerprint` (session) is the fingerprint of configs/demo.yaml itself (its corpus in build/demo_corpus)
built in process: the peer of the tests that build the demo on other engines, workers or encoders.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest


@dataclass(frozen=True)
class BuiltDemo:
    work: Path  # where every test finds the build: work/demo.yaml, work/demo_corpus, work/storage, ...
    pristine: Path  # the copy taken right after the build

    @property
    def config(self) -> Path:
        return self.work / "demo.yaml"

    @property
    def home(self) -> Path:
        """DAGSTER_HOME of the instance holding the build's run (an on-disk sqlite instance)."""
        return self.work / "dagster_home"

    def restore(self) -> Path:
        """The build as it was right after it finished, at the same paths; returns the config."""
        shutil.rmtree(self.work, ignore_errors=True)
        shutil.copytree(self.pristine, self.work, symlinks=True)
        return self.config


@pytest.fixture(scope="session")
def built_demo(tmp_path_factory) -> BuiltDemo:
    """configs/demo.yaml over a private corpus copy, built whole once per session (see the module docstring)."""
    from mix_assets_tests.test_integrity_lineage import failures, materialize, private_demo

    base = tmp_path_factory.mktemp("built_demo")
    work = base / "work"
    cfg = private_demo(work)
    (work / "dagster_home").mkdir()
    with dg.DagsterInstance.local_temp(str(work / "dagster_home")) as instance:
        run = materialize(cfg, instance)
        assert run.success, failures(run)
    shutil.copytree(work, base / "pristine", symlinks=True)
    return BuiltDemo(work, base / "pristine")


@pytest.fixture(scope="session")
def demo_fingerprint(tmp_path_factory) -> str:
    """The fingerprint of configs/demo.yaml built in process (test_fingerprint_workers.REFERENCE's settings)."""
    from mix_assets_tests.test_fingerprint_workers import REFERENCE, _fingerprint

    return _fingerprint(tmp_path_factory.mktemp("demo_fingerprint"), "reference", **REFERENCE)
