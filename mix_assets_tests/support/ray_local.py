"""A real local Ray instance for a test module (ray.init takes ~5-10 s: start one per module)."""

from __future__ import annotations

import contextlib
import os

import pytest

from mix_assets.lib import engine as eng


@contextlib.contextmanager
def local_ray(engine: eng.Engine, env: dict[str, str] | None = None):
    """Ray started for `engine` (never attached to somebody else's cluster: RAY_ADDRESS is unset
    meanwhile); `env` goes to the workers' environment too. Shut down on exit."""
    ray = pytest.importorskip("ray")
    saved = os.environ.pop("RAY_ADDRESS", None)
    opts = eng.ray_init_options(engine)
    opts["runtime_env"]["env_vars"].update(env or {})
    ray.init(address=eng.ray_address(engine), **opts)
    try:
        yield ray
    finally:
        ray.shutdown()
        if saved is not None:
            os.environ["RAY_ADDRESS"] = saved
