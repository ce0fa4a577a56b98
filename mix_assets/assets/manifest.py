"""manifest: manifest.json describing the mix directory, proven self-consistent before publishing."""

import json
from typing import BinaryIO

import dagster as dg

from mix_assets.assets.common import code_version
from mix_assets.config import MixSpec
from mix_assets.lib import layout, manifest_builder
from mix_assets.lib.manifest import check_manifest
from mix_assets.lib.manifest_builder import write_manifest
from mix_assets.lib.storage import Storage
from mix_assets.resources import MixResource

GROUP = "tokens"
MANIFEST_SELF_CONSISTENT = "manifest_self_consistent"


class _MixDir:
    """The root's `mix/` folder as the checker's file source, through `Storage` (local or S3 alike)."""

    def __init__(self, storage: Storage):
        self.storage = storage

    def open(self, rel: str) -> BinaryIO:
        return open(self.storage.local_path(f"{layout.MIX_DIR}/{rel}"), "rb")

    def list(self) -> list[str]:  # every file but manifest.json, so an unlisted one is reported
        keys = self.storage.list(layout.MIX_DIR)
        return [k.removeprefix(layout.MIX_DIR + "/") for k in keys if k != layout.MANIFEST]


def build_manifest_assets(spec: MixSpec) -> list:
    @dg.asset(
        name="manifest",
        group_name=GROUP,
        kinds={"json"},
        owners=spec.owners,
        code_version=code_version(manifest_builder),
        deps=[dg.AssetKey("token_shards"), dg.AssetKey("tokenizer"), dg.AssetKey("dedup_keys"),
              dg.AssetKey("exclusion_masks"), dg.AssetKey("contamination_report")],
    )
    def manifest(context: dg.AssetExecutionContext, mix: MixResource) -> dg.MaterializeResult:
        """manifest.json: token counts, shards, tokenizer identity, packing, review files, fingerprint."""
        s = mix.spec
        m = write_manifest(mix.storage, name=s.name, seed=s.seed, spec_dump=s.model_dump(mode="json"))
        t = m["totals"]
        return dg.MaterializeResult(
            metadata={
                "path": dg.MetadataValue.path(mix.storage.uri(layout.MANIFEST)),
                "fingerprint": m["fingerprint"],
                "train_tokens": t["train_tokens"],
                "val_tokens": t["val_tokens"],
                "train_samples": t["train_samples"],
                "val_samples": t["val_samples"],
                "n_shards": t["shards"],
                "n_files": len(m["files"]),
                "dropped_tail_tokens": t["dropped_tail_tokens"],
                "per_source": dg.MetadataValue.json(m["sources"]),
            }
        )

    @dg.asset_check(asset=manifest, name=MANIFEST_SELF_CONSISTENT, blocking=True)
    def manifest_self_consistent(mix: MixResource) -> dg.AssetCheckResult:
        """Totals equal the sum of parts, shards match the file listing, every size and sha256 recomputed."""
        st = mix.storage
        m = json.loads(st.read_text(layout.MANIFEST))
        problems = check_manifest(m, _MixDir(st), strict=False)
        return dg.AssetCheckResult(
            passed=not problems,
            metadata={
                "n_problems": len(problems),
                "problems": dg.MetadataValue.json(problems[:50]),
                "n_files": len(m.get("files", [])),
                "fingerprint": str(m.get("fingerprint")),
            },
        )

    return [manifest, manifest_self_consistent]
