"""Each shard's document index read back (packing.doc_index, format/docindex.py): its shape and count,
and with a separator, that every document start follows one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

from mix_assets.format import docindex, shards


def doc_index_problems(m: Mapping[str, Any], open_file: Callable[[str], BinaryIO]) -> list[str]:
    """Each shard's index read back: shape and `documents` count, and with a separator, every start
    follows one (at most one exception per source in train: its budget-truncated last appearance)."""
    L = m["packing"]["sample_len"]
    sep = m["packing"].get("separator_id") if m["packing"].get("separator") is not None else None
    out: list[str] = []
    for split, s in m["splits"].items():
        prev, unexplained = None, []
        for sh in s["shards"]:
            ix = sh["doc_index"]
            with open_file(ix["path"]) as f:
                data = f.read()
            try:
                starts = docindex.from_bytes(data, ix["path"], sh["samples"] * L)
            except ValueError as e:
                out.append(str(e))
                prev = None
                continue
            if len(starts) != ix["documents"]:
                out.append(f"{ix['path']}: {len(starts)} document starts, manifest says {ix['documents']}")
            if sep is None:
                continue
            with open_file(sh["path"]) as f:  # one shard in memory at a time (<= shard_tokens)
                tokens = shards.rows(f.read(), m["dtype"], L, sh["path"]).reshape(-1)
            unexplained += [(ix["path"], int(o)) for o in docindex.unexplained_starts(starts, tokens, sep, prev)]
            prev = int(tokens[-1]) if len(tokens) else prev
        allowed = len(m.get("sources") or {}) if split == "train" else 0
        if len(unexplained) > allowed:
            path, off = unexplained[0]
            out.append(f"{path}: document start at offset {off} does not follow the separator (id {sep}); "
                       f"{len(unexplained)} such starts in {split}, at most {allowed} (budget-truncated "
                       "appearances) expected")
    return out
