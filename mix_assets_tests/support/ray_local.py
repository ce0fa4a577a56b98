"""A real local Ray instance for a test module (issue 13: CI runs the map stages on Ray, both cores;
ray.init takes ~5-10 s, so start one per module)."""

from __future__ import annotations

import contextlib
import os

import pytest

from mix_assets.core import engine as eng


@contextlib.contextmanager
def local_ray(engine: eng.Engine, env: dict[str, str] | None = None):
    """Ray started for `engine` (skipped when ray is not installed; never attached to somebody else's
    cluster: RAY_ADDRESS is unset meanwhile); `env` goes to the workers' environment too. Shut down on exit."""
    ray = pytest.importorskip("ray")
    saved = os.environ.pop("RAY_ADDRESS", None)
    opts = eng.ray_init_options(engine)
    opts["runtime_env"]["env_vars"].update(env or {})
    ray.init(address=eng.ray_address(engine), **opts)
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
