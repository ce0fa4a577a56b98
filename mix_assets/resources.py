"""Resources: the mix spec and the storage root every asset writes under; the engine map work runs on."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Optional

import dagster as dg
from pydantic import PrivateAttr

from mix_assets.config import MixSpec, load_spec
from mix_assets.core import checkout
from mix_assets.core.engine import Engine, RayNotInstalled, ray_missing_message
from mix_assets.core.storage import Storage


class MixResource(dg.ConfigurableResource):
    """The mix spec (from `config_path`) and its storage root (`storage_root` overrides the config's).

    Every asset and check takes it as a typed parameter (`mix: MixResource`). The YAML is parsed once
    per version of the file: `spec` is cached on the file's sha256 (and the storage root), so a
    per-shard loop costs nothing and an edited config is still picked up by the next access.
    """

    config_path: str
    storage_root: Optional[str] = None
    _checkout: str = PrivateAttr(default="")  # the run's checkout under the storage root ("": the root itself)

    @property
    def spec(self) -> MixSpec:
        version = hashlib.sha256(Path(self.config_path).read_bytes()).hexdigest() if os.path.isfile(
            self.config_path) else None
        return _parsed(self.config_path, version, self.storage_root, os.environ.get("MIX_STORAGE_ROOT"))

    @property
    def storage(self) -> Storage:
        """The run's checkout (core/checkout.py; outside a run, or holding `main`: the storage root itself)."""
        root = storage_for(self.spec)
        if not self._checkout:
            return root
        return Storage(root=root.uri(self._checkout), s3_endpoint_url=root.s3_endpoint_url,
                       cache_dir=root.cache_dir, store_root=root.root)

    @contextlib.contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext):
        """For a run (a step, under the multiprocess executor): this resource working in a checkout no other
        live run uses, claimed for as long as the resource lives (core/checkout.py)."""
        run_id = getattr(context, "run_id", None)
        if not run_id:
            yield self
            return
        spec = self.spec
        store = storage_for(spec)
        ttl = _seconds("MIX_LOCK_TTL_SECONDS", 60.0)
        log = context.log.info if context.log else (lambda s: None)
        with checkout.holding(store, run_id, checkout.config_id(spec.model_dump_json()), ttl=ttl, log=log) as c:
            out = self.model_copy()
            out._checkout = c.prefix
            yield out


@functools.lru_cache(maxsize=8)
def _parsed(path: str, version: object, storage_root: Optional[str], env_root: Optional[str]) -> MixSpec:
    """The spec at `path` (`version` and `env_root` only key the cache: a changed file or root re-parses)."""
    spec = load_spec(Path(path))
    if storage_root:
        spec = spec.with_storage_root(storage_root, "the resource's storage_root")
    return spec


def _seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, "").strip() or default)
    except ValueError:
        return default  # stages/common._env_seconds names the bad value where the run lease reads it
    return value if value > 0 else default


def storage_for(spec: MixSpec) -> Storage:
    st = spec.storage
    return Storage(root=spec.resolve(st.root), s3_endpoint_url=st.s3_endpoint_url, cache_dir=spec.resolve(st.cache_dir))


_ENGINES: dict[str, "EngineResource"] = {}


class EngineResource(dg.ConfigurableResource):
    """Where map work runs (the spec's `engine` section, see core/engine.py); `engine` is what the stages' logic takes.

    kind "local" costs nothing (ray is never imported). kind "ray" connects Ray for the step through
    dagster-ray (`mix_assets/ray_engine.py`: a LocalRay whose address is "local", i.e. always a new
    local instance with `num_cpus` CPUs, or the cluster at `address`) and disconnects after it (a
    local instance shuts down). When Ray is already connected in this process (a test session's
    instance), it is used as is and left running.
    """

    kind: str = "local"
    address: Optional[str] = None
    num_cpus: int = 2
    chunk_rows: int = 2048
    max_retries: int = 3
    object_store_mb: int = 256
    connect_timeout_s: float = 30.0

    @classmethod
    def from_spec(cls, spec: MixSpec) -> "EngineResource":
        """One instance per engine section: every asset and check of a job (dedup_keys,
        contamination_report, shards_audit_clean) must hold the same object under the key `engine`
        (Dagster compares resources by reference)."""
        fields = spec.engine.model_dump()
        key = json.dumps(fields, sort_keys=True)
        if key not in _ENGINES:
            _ENGINES[key] = cls(**fields)
        return _ENGINES[key]

    @property
    def engine(self) -> Engine:
        return Engine(kind=self.kind, address=self.address, num_cpus=self.num_cpus, chunk_rows=self.chunk_rows,
                      max_retries=self.max_retries, object_store_mb=self.object_store_mb,
                      connect_timeout_s=self.connect_timeout_s)

    @contextlib.contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext):
        if self.kind != "ray":
            yield self
            return
        try:
            from mix_assets import ray_engine  # imports ray and dagster-ray: only for kind "ray"
        except ImportError as e:
            raise RayNotInstalled(ray_missing_message(e)) from e

        with ray_engine.connected(self.engine, context):
            yield self
