"""manifest: manifest.json describing the mix directory, proven self-consistent before publishing."""

import json

import dagster as dg

from mix_assets.assets.common import code_version
from mix_assets.config import MixSpec
from mix_assets.lib import layout, manifest_builder
from mix_assets.lib.manifest import check_manifest
from mix_assets.lib.manifest_builder import write_manifest
from mix_assets.resources import MixResource

GROUP = "tokens"
MANIFEST_SELF_CONSISTENT = "manifest_self_consistent"


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
        source = st.local_path(layout.MIX_DIR) if not st.is_s3 else (
            lambda rel: open(st.local_path(f"{layout.MIX_DIR}/{rel}"), "rb"))
        problems = check_manifest(m, source, strict=False)
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
