"""Resources: the mix spec and the storage root every asset writes under."""

from __future__ import annotations

from typing import Optional

import dagster as dg

from mix_assets.config import MixSpec, load_spec
from mix_assets.lib.storage import Storage


class MixResource(dg.ConfigurableResource):
    """The mix spec (from `config_path`) and its storage root (`storage_root` overrides the config's)."""

    config_path: str
    storage_root: Optional[str] = None

    @property
    def spec(self) -> MixSpec:
        spec = load_spec(self.config_path)
        if self.storage_root:
            spec = spec.model_copy(update={"storage": spec.storage.model_copy(update={"root": self.storage_root})})
        return spec

    @property
    def storage(self) -> Storage:
        return storage_for(self.spec)


def storage_for(spec: MixSpec) -> Storage:
    st = spec.storage
    return Storage(root=spec.resolve(st.root), s3_endpoint_url=st.s3_endpoint_url, cache_dir=spec.resolve(st.cache_dir))
