"""Resources: the mix spec and the storage root every asset writes under."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Optional

import dagster as dg

from mix_assets.config import MixSpec, load_spec
from mix_assets.lib.storage import Storage


class MixResource(dg.ConfigurableResource):
    """The mix spec (from `config_path`) and its storage root (`storage_root` overrides the config's).

    Every asset and check takes it as a typed parameter (`mix: MixResource`). The YAML is parsed once
    per version of the file: `spec` is cached on the file's sha256 (and the storage root), so a
    per-shard loop costs nothing and an edited config is still picked up by the next access.
    """

    config_path: str
    storage_root: Optional[str] = None

    @property
    def spec(self) -> MixSpec:
        version = hashlib.sha256(Path(self.config_path).read_bytes()).hexdigest() if os.path.isfile(
            self.config_path) else None
        return _parsed(self.config_path, version, self.storage_root, os.environ.get("MIX_STORAGE_ROOT"))

    @property
    def storage(self) -> Storage:
        return storage_for(self.spec)


@functools.lru_cache(maxsize=8)
def _parsed(path: str, version: object, storage_root: Optional[str], env_root: Optional[str]) -> MixSpec:
    """The spec at `path` (`version` and `env_root` only key the cache: a changed file or root re-parses)."""
    spec = load_spec(Path(path))
    if storage_root:
        spec = spec.model_copy(update={"storage": spec.storage.model_copy(update={"root": storage_root})})
    return spec


def storage_for(spec: MixSpec) -> Storage:
    st = spec.storage
    return Storage(root=spec.resolve(st.root), s3_endpoint_url=st.s3_endpoint_url, cache_dir=spec.resolve(st.cache_dir))
