"""The PII scrub manifest (review.scrub_manifest) against the config: listed exactly when a source
scrubs, its rules' sha256 recomputed, its per-source counts coherent (core/pii.scrub_manifest)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mix_assets.format.checks.fields import is_int
from mix_assets.format.mixdir import as_source
from mix_assets.format.paths import safe_path


_MISSING = object()
SCRUB_KEY = "scrub_manifest"  # review key of the PII scrub manifest (stages/manifest/builder.SCRUB_MANIFEST)


def pii_sources(cfg: Mapping[str, Any]) -> list[str]:
    """Sources a mix config (as dumped) sends through PII redaction: `filters.pii` merged with the
    source's `filters.pii` override, enabled and with rules (the rule of stages/sources/modifiers.Modifiers)."""
    base = cfg.get("filters").get("pii") if isinstance(cfg.get("filters"), Mapping) else None
    out = []
    for s in cfg.get("sources") or []:
        if not isinstance(s, Mapping):
            continue
        over = s.get("filters").get("pii", _MISSING) if isinstance(s.get("filters"), Mapping) else _MISSING
        pii = base if over is _MISSING else ({**base, **over} if isinstance(base, Mapping)
                                             and isinstance(over, Mapping) else over)
        if isinstance(pii, Mapping) and pii.get("enabled", True) and pii.get("rules", True):
            out.append(s.get("name"))
    return out


def scrub_problems(m: Mapping[str, Any], src: Any, cfg: Mapping[str, Any], skip: set = frozenset()) -> list[str]:
    """The PII scrub manifest against the config: listed exactly when a source scrubs; its rule set's
    sha256 recomputed from the patterns it lists; one entry per scrubbing source with coherent counts."""
    review = m.get("review") if isinstance(m.get("review"), Mapping) else {}
    path, want = review.get(SCRUB_KEY), sorted(map(str, pii_sources(cfg)))
    if not want or path is None:
        return [f"review.{SCRUB_KEY}: {'missing' if want else 'listed'}, but the config scrubs PII in "
                f"{want or 'no source'}"] if bool(want) != (path is not None) else []
    if not isinstance(path, str) or path in skip:
        return []  # reported by the file checks
    try:
        with as_source(src).open(safe_path(path)) as f:
            sm = json.loads(f.read())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return [f"{path}: not valid JSON ({e})"]
    from mix_assets.core.pii import PiiRule, rules_sha256  # numpy / pyarrow: only when a mix scrubs

    out = []
    try:
        rules = [PiiRule(r["name"], r["placeholder"], r["pattern"], r.get("misses", "")) for r in sm["rules"]]
        for r, d in zip(rules, sm["rules"]):
            if r.pattern_sha256 != d["pattern_sha256"]:
                out.append(f"{path}: rules[{r.name}].pattern_sha256 is not the sha256 of its pattern")
        if rules_sha256(rules) != sm["rules_sha256"]:
            out.append(f"{path}: rules_sha256 {sm['rules_sha256']} is not the sha256 over its rules "
                       f"({rules_sha256(rules)})")
        got = sm["sources"]
        if sorted(got) != want:
            out.append(f"{path}: sources {sorted(got)}, but the config scrubs PII in {want}")
        names = {r.name for r in rules}
        for name, v in got.items():
            red = v["redactions"]
            if set(v["rules"]) - names or set(red) != set(v["rules"]):
                out.append(f"{path}: sources.{name}: rules {v['rules']} / redactions {sorted(red)} do not match "
                           f"the listed rules {sorted(names)}")
            if not (0 <= v["scrubbed_docs"] <= v["docs"]) or not all(is_int(x) and x >= 0 for x in red.values()) \
                    or v["scrubbed_docs"] > sum(red.values()):
                out.append(f"{path}: sources.{name}: counts are incoherent ({v['docs']} docs, "
                           f"{v['scrubbed_docs']} scrubbed, redactions {red})")
    except (KeyError, TypeError, AttributeError) as e:
        out.append(f"{path}: not a scrub manifest (core/pii.scrub_manifest): {type(e).__name__} {e}")
    return out
