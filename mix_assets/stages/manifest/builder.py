"""Build manifest.json (format `mix_assets.manifest/1`) from the shard stats, the tokenizer
identity and the review files. The checker is `mix_assets.format.checker.check_manifest`.
`fingerprint` covers the files' bytes; `interpretation_sha256` covers how to read them
(`mix_assets.format.manifest.interpretation`), so editing e.g. seq_len changes it.

Nothing time- or location-dependent goes in: the review config is the spec without its storage,
publish and schedule sections (where a mix is built or published does not change its content).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from typing import Callable

from mix_assets.core import layout
from mix_assets.format.manifest import FORMAT, INTERPRETATION_KEY, compute_fingerprint, interpretation_sha256

# review name -> path relative to the mix dir, in the order they are listed in `files`
REVIEW_FILES = {
    "dedup_keys": "review/dedup_keys.parquet",
    "exclusion_masks": "review/exclusion_masks.parquet",
    "contamination_report": "review/contamination_report.json",
    "config": "review/mix_config.json",
}
# listed after them only when a source scrubs PII (a mix without it keeps its bytes and fingerprint)
SCRUB_MANIFEST = ("scrub_manifest", "scrub_manifest.json")
# listed last only when some source keeps by a quality classifier (stages/quality): the model and what it was
# trained on, published with the mix they filtered
QUALITY_FILES = {"quality_model": "review/quality_model.bin", "quality_training_set": "review/quality_training_set.json"}
_OPERATIONAL = ("storage", "publish", "schedule")
_ADVISORY = {"audit": "fuzzy"}  # settings of reports that change no published byte (audit.fuzzy excludes nothing)


def review_config_json(spec_dump: dict) -> str:
    """Canonical JSON of the spec minus its operational sections and advisory settings."""
    content = {k: v for k, v in spec_dump.items() if k not in _OPERATIONAL}
    for section, key in _ADVISORY.items():
        if isinstance(content.get(section), dict):
            content[section] = {k: v for k, v in content[section].items() if k != key}
    packing = content.get("packing")
    if isinstance(packing, dict) and packing.get("doc_index") is False:  # as configs before the option:
        content["packing"] = {k: v for k, v in packing.items() if k != "doc_index"}  # the same bytes
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"


def build_manifest(
    *,
    name: str,
    seed: int,
    config_sha256: str,
    tokenizer: dict,
    packing: dict,
    shard_stats: dict,
    file_sha256: Callable[[str], tuple[int, str]],
    scrubbed: bool = False,
    quality: bool = False,
) -> dict:
    """The manifest dict. `file_sha256(rel_path) -> (bytes, sha256)` hashes tokenizer and review
    files (relative to the mix dir); shard sizes and hashes come from the shard stats. `scrubbed`:
    the mix dir holds the PII scrub manifest, listed as a review file."""
    review = {**REVIEW_FILES, **(dict([SCRUB_MANIFEST]) if scrubbed else {}), **(QUALITY_FILES if quality else {})}
    splits, files = {}, []
    for split in ("train", "val"):
        st = shard_stats["splits"][split]
        splits[split] = {
            "samples": st["samples"],
            "tokens": st["tokens"],
            "emitted_tokens": st["emitted_tokens"],
            "dropped_tail_tokens": st["dropped_tail_tokens"],
            "seam_rate": st["seam_rate"],
            "documents": st["documents"],
            "sources": dict(sorted(st["sources"].items())),
            "shards": [
                {"path": s["path"], "samples": s["samples"], "bytes": s["bytes"], "sha256": s["sha256"],
                 **({"doc_index": dict(s["doc_index"])} if s.get("doc_index") else {})}
                for s in st["shards"]
            ],
        }
        files += [{"path": s["path"], "bytes": s["bytes"], "sha256": s["sha256"]} for s in st["shards"]]
    # document indexes (packing.doc_index) after every shard: readers that predate them ignore them
    files += [{k: s["doc_index"][k] for k in ("path", "bytes", "sha256")}
              for split in ("train", "val") for s in shard_stats["splits"][split]["shards"] if s.get("doc_index")]
    for rel in sorted(tokenizer["files"]):
        n, h = file_sha256(rel)
        if h != tokenizer["files"][rel]:
            raise ValueError(f"{rel}: sha256 {h} differs from the tokenizer identity ({tokenizer['files'][rel]})")
        files.append({"path": rel, "bytes": n, "sha256": h})
    for rel in review.values():
        n, h = file_sha256(rel)
        files.append({"path": rel, "bytes": n, "sha256": h})

    sources = {
        # `tiers` only for a source filled by quality tier: per tier its effective epochs, documents, tokens
        s: {**{k: v[k] for k in ("train_tokens", "val_tokens", "budget_tokens", "epochs", "unique_documents")},
            **({"tiers": v["tiers"]} if "tiers" in v else {})}
        for s, v in sorted(shard_stats["sources"].items())
    }
    tr, va = splits["train"], splits["val"]
    manifest = {
        "format": FORMAT,
        "name": name,
        "seed": seed,
        "config_sha256": config_sha256,
        "tokenizer": {
            "kind": tokenizer["kind"],
            "repo_id": tokenizer["repo_id"],
            "revision": tokenizer["revision"],
            "vocab_size": tokenizer["vocab_size"],
            "special_tokens": dict(tokenizer["special_tokens"]),
            "files": dict(sorted(tokenizer["files"].items())),
        },
        "packing": {
            "rule": "contiguous",
            "separator": packing["separator"],
            "separator_id": packing["separator_id"],
            "seq_len": packing["seq_len"],
            "sample_len": packing["sample_len"],
            "shifted_targets": packing["shifted_targets"],
        },
        "dtype": shard_stats["dtype"],
        "splits": splits,
        "sources": sources,
        "totals": {
            "train_tokens": tr["tokens"],
            "val_tokens": va["tokens"],
            "train_samples": tr["samples"],
            "val_samples": va["samples"],
            "shards": len(tr["shards"]) + len(va["shards"]),
            "dropped_tail_tokens": tr["dropped_tail_tokens"] + va["dropped_tail_tokens"],
        },
        "review": review,
        "files": files,
        "fingerprint": compute_fingerprint(files),
    }
    manifest[INTERPRETATION_KEY] = interpretation_sha256(manifest)
    return manifest


def dumps(manifest: dict) -> str:
    """The bytes written as manifest.json: stable key order as built, 1-space indent, trailing newline."""
    return json.dumps(manifest, indent=1, ensure_ascii=False) + "\n"


def write_manifest(storage, *, name: str, seed: int, spec_dump: dict, scrub: dict | None = None,
                   quality: bool = False) -> dict:
    """Copy the review files into the mix dir (and write `scrub`, the PII scrub manifest, when given),
    then build and write manifest.json (last).

    Reads the shard stats and tokenizer identity written by the upstream assets through `storage`.
    """
    loc = storage.location
    quality_files = ((layout.QUALITY_MODEL, layout.MIX_QUALITY_MODEL),
                     (layout.QUALITY_TRAINING_SET, layout.MIX_QUALITY_TRAINING_SET))
    if not quality:
        for _, dst in quality_files:
            if storage.exists(dst):  # from an earlier build with a classifier: not this mix's
                storage.delete(dst)
    for src, dst in (
        (layout.DEDUP_KEYS, layout.MIX_DEDUP_KEYS),
        (layout.EXCLUSION_MASKS, layout.MIX_EXCLUSION_MASKS),
        (layout.CONTAMINATION_REPORT, layout.MIX_CONTAMINATION_REPORT),
        *(quality_files if quality else ()),
    ):
        if loc.copy_from(loc, src, dst, storage.sha256(src)):  # S3: server-side, the bytes stay there
            continue
        local = storage.local_path(src)
        with storage.writing(dst) as tmp:
            shutil.copyfile(local, tmp)
    config_text = review_config_json(spec_dump)
    storage.write_text(layout.MIX_CONFIG, config_text)
    if scrub is not None:
        storage.write_text(layout.MIX_SCRUB_MANIFEST, json.dumps(scrub, indent=1, ensure_ascii=False) + "\n")
    elif storage.exists(layout.MIX_SCRUB_MANIFEST):  # from an earlier build that scrubbed: not this mix's
        storage.delete(layout.MIX_SCRUB_MANIFEST)

    def file_sha256(rel: str) -> tuple[int, str]:
        key = f"{layout.MIX_DIR}/{rel}"
        st = loc.stat(key)  # S3: the sha256 recorded from the uploaded file's bytes; local: hashed
        if st is None:
            raise FileNotFoundError(storage.uri(key))
        return st if st[1] else loc.digest(key)

    shard_stats = json.loads(storage.read_text(layout.SHARD_STATS))
    manifest = build_manifest(
        name=name,
        seed=seed,
        config_sha256=hashlib.sha256(config_text.encode("utf-8")).hexdigest(),
        tokenizer=json.loads(storage.read_text(layout.TOKENIZER_IDENTITY)),
        packing=shard_stats["packing"],
        shard_stats=shard_stats,
        file_sha256=file_sha256,
        scrubbed=scrub is not None,
        quality=quality,
    )
    storage.write_text(layout.MANIFEST, dumps(manifest))
    return manifest
