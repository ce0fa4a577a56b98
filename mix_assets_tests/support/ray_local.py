"""A real local Ray instance for a test module (issue 13: CI runs the map stages on Ray, both cores)."""

from __future__ import annotations

import contextlib
import os

import pytest

from mix_assets.lib import engine as eng


@contextlib.contextmanager
def local_ray(engine: eng.Engine):
    """Start a local Ray instance for `engine` (skipped when ray is not installed); shut down on exit.

    RAY_ADDRESS is unset meanwhile: a test never attaches to somebody else's cluster."""
    ray = pytest.importorskip("ray")
    saved = os.environ.pop("RAY_ADDRESS", None)
    ray.init(address=eng.ray_address(engine), **eng.ray_init_options(engine))
    try:
        assert ray.cluster_resources()["CPU"] == engine.num_cpus
        yield ray
    finally:
        ray.shutdown()
        if saved is not None:
            os.environ["RAY_ADDRESS"] = saved


class LogLines:
    """A `log` for lib code (anything with `info`) that keeps the lines."""

    def __init__(self):
        self.lines: list[str] = []

    def info(self, msg: str) -> None:
        self.lines.append(msg)
