"""The text modifiers the raw stage applies as it writes a source's documents (issue 14).

In order, over a whole row group at once (Arrow / polars kernels, no Python loop per document):
  1. PII redaction (core/pii.py `scrub`) when the source's `filters.pii` is enabled, with its rules;
  2. C4 line modification (stages/filters/cascade.py, the C4 rules alone) when `filters.c4` is enabled in mode
     "modify": a document C4 keeps becomes its kept lines, as `apply_filters` rewrites it. A document
     C4 would drop keeps its text: dropping is the document filter stage's decision, made again
     downstream on the text written here.

Counted per source (raw stats.json `modifiers`, the raw asset's metadata): for PII the scrub manifest's
block (documents, documents changed, redactions per rule), for C4 the documents changed and the
characters removed. Configs without these modifiers get `None` from `for_source` and nothing changes.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.stages.filters import cascade
from mix_assets.stages.filters.rules.c4 import C4Filter
from mix_assets.core import layout, pii


@dataclass(frozen=True)
class Modifiers:
    """What one source's text goes through in raw/<source> (None parts are off)."""

    pii_rules: Optional[tuple] = None  # core/pii.PiiRule, in the order they run
    c4: Optional[C4Filter] = None  # mode "modify"

    @classmethod
    def for_source(cls, spec, name: str) -> Optional["Modifiers"]:
        """The modifiers of source `name` (its merged `filters:`), or None when there are none."""
        f = spec.filters_for(name)
        if f is None:
            return None
        rules = pii.rules_named(f.pii.rules) if f.pii is not None and f.pii.enabled else None
        c4 = f.c4 if f.c4 is not None and f.c4.enabled and f.c4.mode == "modify" else None
        return cls(rules or None, c4) if (rules or c4) else None

    def identity(self) -> dict:
        """JSON-ready: what changes the written text (stats.json and the raw code_version record it)."""
        out = {}
        if self.pii_rules:
            out["pii"] = {"rules": [r.name for r in self.pii_rules], "rules_version": pii.SCRUB_RULES_VERSION,
                          "rules_sha256": pii.rules_sha256(self.pii_rules)}
        if self.c4:
            out["c4"] = dataclasses.asdict(self.c4)
        return json.loads(json.dumps(out))  # tuples as lists, as stats.json reads back


def _c4_config(c4: C4Filter) -> cascade.FilterConfig:
    return cascade.FilterConfig.only("c4").replace(c4=c4)


def modify(texts: pa.Array, mods: Modifiers) -> tuple[pa.Array, dict]:
    """(the modified texts, per-document counts): `pii` = core/pii.scrub's table (one int32 column per
    rule), `c4_changed` (bool) and `c4_removed_chars` (int64)."""
    out, counts = texts, {}
    if mods.pii_rules:
        out, counts["pii"] = pii.scrub(out, mods.pii_rules)
    if mods.c4:
        before = out
        res = cascade.apply_filters(before, _c4_config(mods.c4))
        # apply_filters rewrites only the documents C4 keeps; the others come back as they were
        out = res.texts.cast(pa.large_string())
        changed = pc.fill_null(pc.not_equal(pc.cast(before, pa.large_string()), out), False)
        counts["c4_changed"] = changed.to_numpy(zero_copy_only=False)
        counts["c4_removed_chars"] = (pc.utf8_length(before).to_numpy().astype(np.int64)
                                      - pc.utf8_length(out).to_numpy().astype(np.int64))
    return out, counts


class ModifierCounts:
    """Per-source totals of `modify`'s counts over the batches of one source."""

    def __init__(self, mods: Modifiers):
        self.mods = mods
        self.pii = pii.source_counts(pa.table({r.name: pa.array([], pa.int32()) for r in mods.pii_rules or ()}),
                                     mods.pii_rules or ())
        self.c4 = {"docs": 0, "modified_docs": 0, "removed_chars": 0}

    def add(self, n_docs: int, counts: dict) -> None:
        if "pii" in counts:
            self.pii = pii.add_source_counts(self.pii, pii.source_counts(counts["pii"], self.mods.pii_rules))
        if "c4_changed" in counts:
            self.c4 = {"docs": self.c4["docs"] + n_docs,
                       "modified_docs": self.c4["modified_docs"] + int(counts["c4_changed"].sum()),
                       "removed_chars": self.c4["removed_chars"] + int(counts["c4_removed_chars"].sum())}

    def stats(self) -> dict:
        """raw stats.json `modifiers`: the configuration and what it did to this source."""
        ident = self.mods.identity()
        out = {}
        if "pii" in ident:
            out["pii"] = {**ident["pii"], **self.pii}
        if "c4" in ident:
            out["c4"] = {"config": ident["c4"], **self.c4}
        return out


def modify_table(t: pa.Table, mods: Modifiers, bytes_per_token: float, total: ModifierCounts) -> pa.Table:
    """A raw documents row group with its text modified and n_bytes, n_chars and est_tokens recomputed
    from the new text (est_tokens as the reader estimates it: max(1, round(bytes / bytes_per_token)))."""
    text, counts = modify(t.column("text").combine_chunks(), mods)
    total.add(t.num_rows, counts)
    nb = pc.binary_length(text).to_numpy().astype(np.int64)
    est = np.maximum(1, np.round(nb / bytes_per_token)).astype(np.int64)
    cols = {"text": text, "n_bytes": pa.array(nb), "n_chars": pc.cast(pc.utf8_length(text), pa.int64()),
            "est_tokens": pa.array(est)}
    return pa.table({c: cols.get(c, t.column(c)) for c in t.column_names}, schema=t.schema)


def scrub_sources(spec) -> list[str]:
    """Sources whose raw text goes through PII redaction."""
    return [s.name for s in spec.sources if (m := Modifiers.for_source(spec, s.name)) and m.pii_rules]


def build_scrub_manifest(storage, spec) -> Optional[dict]:
    """mix/scrub_manifest.json (core/pii.manifest_from_sources) from the raw stats of every source that
    scrubs PII, with the C4 line counts of sources that modify lines; None when no source scrubs.
    A source whose raw stats record other rules than its config is refused (re-materialise it)."""
    by_source, c4 = {}, {}
    for s in spec.sources:
        mods = Modifiers.for_source(spec, s.name)
        if mods is None:
            continue
        key = layout.RAW_STATS.format(source=s.name)
        got = json.loads(storage.read_text(key)).get("modifiers", {})
        ran = {**({"pii": {k: got["pii"][k] for k in ("rules", "rules_version", "rules_sha256")}}
                  if "pii" in got else {}), **({"c4": got["c4"]["config"]} if "c4" in got else {})}
        if ran != mods.identity():
            raise ValueError(f"{key}: raw/{s.name} was written with the modifiers {ran}, the config asks for "
                             f"{mods.identity()}; re-materialise raw/{s.name}")
        if "pii" in got:
            p = got["pii"]
            by_source[s.name] = {"rules": p["rules"], "docs": p["docs"], "scrubbed_docs": p["scrubbed_docs"],
                                 "redactions": p["redactions"]}
        if "c4" in got:
            c4[s.name] = {k: got["c4"][k] for k in ("docs", "modified_docs", "removed_chars")}
    if not by_source:
        return None
    rules = pii.rules_named({r for v in by_source.values() for r in v["rules"]})
    return pii.manifest_from_sources(by_source, rules, **({"c4_modified_lines": c4} if c4 else {}))
