"""The Dagster side of engine.kind "ray": a dagster-ray resource connecting Ray for one step.

Imported only when the engine is Ray (ray and dagster-ray cost ~2 s to import, ray.init 5-10 s).
"""

from __future__ import annotations

import contextlib
from typing import Optional

import dagster as dg
import ray
from dagster_ray import LocalRay

from mix_assets.core.engine import Engine, check_reachable, ray_address, ray_init_options


class RayAt(LocalRay):
    """dagster-ray's LocalRay with an explicit address: "local" (always a NEW local instance, never
    RAY_ADDRESS or one already running, unlike LocalRay's None) or a cluster ("ray://head:10001")."""

    cluster_address: Optional[str] = "local"

    @property
    def ray_address(self) -> Optional[str]:  # type: ignore[override]
        return self.cluster_address

    @property
    def name(self) -> str:
        return f"Ray at {self.cluster_address}"


def ray_resource(engine: Engine) -> RayAt:
    return RayAt(cluster_address=ray_address(engine), ray_init_options=ray_init_options(engine))


@contextlib.contextmanager
def connected(engine: Engine, context: dg.InitResourceContext):
    """Ray connected for the duration of the block (left alone when already connected)."""
    if ray.is_initialized():
        context.log.info("engine: using the Ray instance already connected in this process")
        yield
        return
    check_reachable(engine)  # ray.init on an address nobody answers at blocks for good
    with ray_resource(engine).yield_for_execution(context) as res:
        context.log.info(f"engine: {res.name}, {ray.cluster_resources().get('CPU', 0):.0f} CPU(s)")
        yield
