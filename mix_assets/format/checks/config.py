"""The manifest against the mix config it lists (review/mix_config.json, fingerprinted with the files).

`config_problems` compares the fields the config determines (name, seed, packing, tokenizer kind and
hub identity, sources, epochs, budgets); `interpretation_problems` reads the config first (what a
lazily fetching reader runs at open).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from mix_assets.format.checks.fields import is_int
from mix_assets.format.mixdir import as_source
from mix_assets.format.paths import UnsafePathError, safe_path


def read_config(src: Any, path: str, want_sha: str | None) -> tuple[dict | None, list[str]]:
    """The review config as a dict, read once and checked against its listed sha256."""
    try:
        with src.open(path) as f:
            raw = f.read()
    except (FileNotFoundError, UnsafePathError):
        return None, []  # reported by the file checks
    if hashlib.sha256(raw).hexdigest() != want_sha:
        return None, [f"{path}: sha256 {hashlib.sha256(raw).hexdigest()}, manifest says {want_sha}"]
    try:
        cfg = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, [f"{path}: not valid JSON ({e})"]
    if not isinstance(cfg, dict):
        return None, [f"{path}: top level is {type(cfg).__name__}, expected an object"]
    return cfg, []


def interpretation_problems(m: Mapping[str, Any], source: Any) -> list[str]:
    """The manifest against the mix config it lists, read from `source` (a directory, opener or object
    with `open`) and checked against its listed sha256: [] when the config backs how the manifest says
    to read the bytes. What a reader that fetches lazily runs at open (the config is small)."""
    review = m.get("review") if isinstance(m.get("review"), Mapping) else {}
    path = review.get("config")
    entry = next((f for f in m.get("files") or [] if isinstance(f, Mapping) and f.get("path") == path), None)
    if not isinstance(path, str) or entry is None:
        return ["review.config: the mix config file is not listed (it says how the mix was built)"]
    try:
        cfg, problems = read_config(as_source(source), safe_path(path), entry.get("sha256"))
    except UnsafePathError as e:
        return e.problems
    if cfg is None:
        return problems or [f"{path}: listed in files but not found"]
    return config_problems(m, cfg, path)


def config_problems(m: Mapping[str, Any], cfg: Mapping[str, Any], path: str = "review/mix_config.json") -> list[str]:
    """The manifest fields the mix config determines, compared with it: name, seed, packing (seq_len,
    shifted_targets, sample_len, separator), tokenizer kind (and hub repo/revision), the source set,
    each source's epochs and budget_tokens = round(target_tokens x share x epochs).

    The config file is among the fingerprinted files, so a manifest edited under a pinned fingerprint
    cannot change these without this check noticing."""
    out: list[str] = []

    def field(obj: Any, dotted: str) -> Any:
        cur = obj
        for part in dotted.split("."):
            if not isinstance(cur, Mapping) or part not in cur:
                out.append(f"{path}: field {dotted} missing")
                return _MISSING
            cur = cur[part]
        return cur

    def same(claim_where: str, claimed: Any, cfg_field: str, want: Any) -> None:
        if want is not _MISSING and claimed != want:
            out.append(f"{claim_where}: says {claimed!r}, but {path} has {cfg_field} = {want!r}")

    pk = m.get("packing") if isinstance(m.get("packing"), Mapping) else {}
    same("name", m.get("name"), "name", field(cfg, "name"))
    same("seed", m.get("seed"), "seed", field(cfg, "seed"))
    seq_len = field(cfg, "packing.seq_len")
    shifted = field(cfg, "packing.shifted_targets")
    per_seq = field(cfg, "packing.samples_per_seq")
    same("packing.seq_len", pk.get("seq_len"), "packing.seq_len", seq_len)
    same("packing.shifted_targets", pk.get("shifted_targets"), "packing.shifted_targets", shifted)
    same("packing.separator", pk.get("separator"), "packing.separator", field(cfg, "packing.separator"))
    # configs older than packing.doc_index wrote none
    want_index = cfg.get("packing", {}).get("doc_index", False) if isinstance(cfg.get("packing"), Mapping) else False
    shards = [sh for s in (m.get("splits") or {}).values() if isinstance(s, Mapping)
              for sh in (s.get("shards") or []) if isinstance(sh, Mapping)]
    if shards and want_index != all("doc_index" in sh for sh in shards):
        out.append(f"splits.*.shards[*].doc_index: {'missing' if want_index else 'present'}, but {path} has "
                   f"packing.doc_index = {want_index!r}")
    if _MISSING not in (seq_len, shifted, per_seq) and is_int(seq_len) and is_int(per_seq):
        want_len = seq_len + 1 if shifted else seq_len * per_seq
        same("packing.sample_len", pk.get("sample_len"), "packing seq_len/shifted_targets/samples_per_seq ->",
             want_len)
    tok = m.get("tokenizer") if isinstance(m.get("tokenizer"), Mapping) else {}
    kind = field(cfg, "tokenizer.kind")
    same("tokenizer.kind", tok.get("kind"), "tokenizer.kind", kind)
    if kind == "hub":
        for k in ("repo_id", "revision"):
            same(f"tokenizer.{k}", tok.get(k), f"tokenizer.{k}", field(cfg, f"tokenizer.{k}"))
    target = field(cfg, "target_tokens")
    srcs = field(cfg, "sources")
    per_source = m.get("sources") if isinstance(m.get("sources"), Mapping) else {}
    if isinstance(srcs, list):
        by_name = {s.get("name"): s for s in srcs if isinstance(s, Mapping)}
        if set(by_name) != set(per_source):
            out.append(f"sources: {sorted(per_source)}, but {path} configures {sorted(map(str, by_name))}")
        for name, rec in per_source.items():
            s = by_name.get(name)
            if s is None or not isinstance(rec, Mapping):
                continue
            epochs, share = s.get("epochs"), s.get("share")
            same(f"sources.{name}.epochs", rec.get("epochs"), f"sources[{name}].epochs", epochs)
            if isinstance(target, (int, float)) and isinstance(share, (int, float)) \
                    and isinstance(epochs, (int, float)) and math.isfinite(target * share * epochs):
                same(f"sources.{name}.budget_tokens", rec.get("budget_tokens"),
                     "round(target_tokens x share x epochs) =", int(round(target * share * epochs)))
            out += _tier_problems(name, rec, _configured_tiers(cfg, s), epochs, path)
    return out


def _configured_tiers(cfg: Mapping[str, Any], src: Mapping[str, Any]) -> list:
    """The quality tiers a source's merged `filters.quality` gives ([] when none): the source's override over
    the mix's section, as MixSpec.filters_for merges them."""
    def quality(f: Any) -> Mapping:
        q = f.get("quality") if isinstance(f, Mapping) else None
        return q if isinstance(q, Mapping) else {}

    merged = {**quality(cfg.get("filters")), **quality(src.get("filters"))}
    tiers = merged.get("tiers") if merged.get("enabled", True) is not False else None
    return list(tiers) if isinstance(tiers, list) else []


def _tier_problems(name: str, rec: Mapping, tiers: list, epochs: Any, path: str) -> list[str]:
    """sources.<name>.tiers against the configured tiers: the same names, best first, each with epochs = source
    epochs x tier epochs."""
    got = rec.get("tiers")
    if not tiers and got is None:
        return []
    if not isinstance(got, Mapping):
        return [f"sources.{name}.tiers: missing, but {path} fills the source by quality tier"] if tiers else \
            [f"sources.{name}.tiers: present, but {path} gives the source no quality tiers"]
    want = [t.get("name") for t in tiers if isinstance(t, Mapping)]
    if list(got) != want:
        return [f"sources.{name}.tiers: {list(got)}, but {path} configures tiers {want}"]
    out = []
    for t in tiers:
        e = t.get("epochs", 1.0)
        r = got[t["name"]]
        if isinstance(epochs, (int, float)) and isinstance(e, (int, float)) and isinstance(r, Mapping) \
                and r.get("epochs") != epochs * e:
            out.append(f"sources.{name}.tiers.{t['name']}.epochs: says {r.get('epochs')!r}, but {path} has source "
                       f"epochs x tier epochs = {epochs} x {e} = {epochs * e}")
    return out


_MISSING = object()
