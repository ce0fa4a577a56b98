"""The input keys of a revision: what `fingerprint_reproduced` holds fixed when it demands the same bytes.

Derived from the lineage records in storage (core/lineage.py), walking upstream from `manifest`:
  * `roots`: the data_version of every record in the chain that has no inputs (raw/<source>, the
    documents read from each source's files, and eval_registry);
  * `code`: the code_version of every record in the chain (its code and the config sections it reads);
  * `artifacts`: the artifact key of every record in the chain that has one (core/keys.py): what the
    object store must keep for this revision (mix_assets/gc.py never removes them).
With the manifest's `config_sha256` (the revision's own config), equal keys mean the same data went
through the same code under the same config, so the bytes must be the same; changed keys make a new
revision expected. The keys are stored with the publication record in storage
(`publish/published_revision.json`), never in the published revision: its bytes, and the demo
fingerprint, stay as they were. Pure over the lineage Store protocol; no Dagster.

`config_problems` closes the loop from the other side: the revision's own config (review/mix_config.json,
fingerprinted with its files) must give, through the code that is running, the code_version every artifact
of the chain recorded (each one hashes its code, the config values it reads and its parents' versions:
stages/common.chain_code_versions). A revision whose config would not reproduce its keys is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from mix_assets.core.lineage import Store, read_record

CHAIN_HEAD = "manifest"


def input_keys(store: Store, head: str = CHAIN_HEAD) -> Optional[dict]:
    """{"roots": {asset: data_version}, "code": {asset: code_version}, "artifacts": {asset: artifact key}} of
    `head`'s chain (None: no record)."""
    roots: dict[str, str] = {}
    code: dict[str, str] = {}
    artifacts: dict[str, str] = {}
    todo, seen = [head], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        rec = read_record(store, name)
        if rec is None:
            if name == head:
                return None
            roots[name] = "(no lineage record)"
            continue
        if rec.get("code_version") is not None:
            code[name] = str(rec["code_version"])
        if rec.get("key") is not None:
            artifacts[name] = str(rec["key"])
        if rec.get("inputs"):
            todo.extend(rec["inputs"])
        else:
            roots[name] = str(rec["data_version"])
    return {"roots": dict(sorted(roots.items())), "code": dict(sorted(code.items())),
            "artifacts": dict(sorted(artifacts.items()))}


def changed_keys(published: Optional[dict], rebuilt: Optional[dict]) -> list[str]:
    """The names whose key differs ("raw/web", "code:dedup_keys"), sorted; [] when the keys are equal."""
    published, rebuilt = published or {}, rebuilt or {}
    out = []
    for part, prefix in (("roots", ""), ("code", "code:")):
        a, b = published.get(part) or {}, rebuilt.get(part) or {}
        out += [f"{prefix}{k}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
    return out


def config_problems(recorded_code: Mapping[str, str], derived: Mapping[str, str],
                    origin: str = "review/mix_config.json") -> list[str]:
    """[] when `derived` (the chained code versions the published config gives, {asset: code_version}) holds
    for every asset of `recorded_code` (`input_keys`'s "code") the code_version it recorded; else one line
    per asset that differs."""
    return [f"{asset}: recorded code_version {code}, {origin} gives {derived.get(asset) or 'no such asset'}"
            for asset, code in sorted(recorded_code.items()) if derived.get(asset) != code]
