"""The manifest.json contract: its format constants, fingerprint and interpretation hash, its errors.

A published mix is a directory holding the files `manifest.json` lists (`files`: path, bytes, sha256;
shards first, train before val), a README.md dataset card (format/card.py) and manifest.json itself.
`fingerprint` is the sha256 over the listed files' sha256s in order (`compute_fingerprint`); it covers
only the files' bytes, `interpretation_sha256` covers how to read them (`interpretation`). The shard
bytes are format/shards.py's, the document indexes format/docindex.py's; the checker is
format/checker.py, path safety format/paths.py, reading a mix directory format/mixdir.py.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mix_assets.core.transport import sha256_stream

FORMAT = "mix_assets.manifest/1"
MANIFEST_NAME = "manifest.json"
README_NAME = "README.md"  # the dataset card a published revision carries beside the listed files
INTERPRETATION_KEY = "interpretation_sha256"
SPLITS = ("train", "val")
DTYPES = {"uint16": 2, "uint32": 4}


class ManifestError(ValueError):
    """A manifest whose numbers do not add up or whose files differ; `.problems` lists every finding."""

    def __init__(self, problems: list[str], origin: str = MANIFEST_NAME):
        self.problems = list(problems)
        self.origin = origin
        shown = "\n".join(f"  - {p}" for p in self.problems[:50])
        more = f"\n  ... and {len(self.problems) - 50} more" if len(self.problems) > 50 else ""
        super().__init__(f"{origin}: {len(self.problems)} problem(s):\n{shown}{more}")


def interpretation(m: Mapping[str, Any]) -> dict:
    """What says how to read the bytes: format, dtype, packing (rule, separator and its id, seq_len,
    sample_len, shifted_targets), tokenizer identity (kind, repo_id, revision, vocab_size, special
    tokens, files) and per split its sample count and shard order with each shard's samples."""
    def get(obj: Any, key: str) -> Any:
        return obj.get(key) if isinstance(obj, Mapping) else None

    tok = m.get("tokenizer")
    splits = m.get("splits")
    out_splits = {}
    for name, s in (splits.items() if isinstance(splits, Mapping) else ()):
        shards = get(s, "shards")
        out_splits[name] = {
            "samples": get(s, "samples"),
            "shards": [[get(sh, "path"), get(sh, "samples")] for sh in (shards if isinstance(shards, list) else [])],
        }
    return {
        "format": m.get("format"),
        "dtype": m.get("dtype"),
        "packing": m.get("packing"),
        "tokenizer": {k: get(tok, k) for k in ("kind", "repo_id", "revision", "vocab_size", "special_tokens",
                                               "files")},
        "splits": out_splits,
    }


def interpretation_sha256(m: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces, ASCII) of `interpretation(m)`."""
    text = json.dumps(interpretation(m), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def compute_fingerprint(files: Iterable[Mapping[str, Any] | str]) -> str:
    """sha256 over the concatenated hex sha256s of `files` (entries with "sha256", or the hex strings), in order."""
    h = hashlib.sha256()
    for f in files:
        h.update((f if isinstance(f, str) else f["sha256"]).encode("utf-8"))
    return h.hexdigest()


def file_entry(root: str | os.PathLike, path: str) -> dict:
    """The `files` entry of one file of a local mix directory: path, bytes, sha256."""
    with open(Path(root) / path, "rb") as f:
        sha, n = sha256_stream(f)
    return {"path": path, "bytes": n, "sha256": sha}
