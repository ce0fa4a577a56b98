"""Artifact keys: an artifact named by what produced it (pure; no Dagster, no config).

    artifact_key(asset, code_version, input_keys) = sha256 of the canonical JSON
        {"asset": ..., "code_version": ..., "inputs": {name: key, ...} sorted}

`code_version` is the asset's derived code_version (its code and the config values it reads,
stages/common.code_version); `input_keys` maps each input to its key: an upstream asset's artifact key,
or for what a root reads from outside the storage root (a source's files, the eval files, a tokenizer
file) a fingerprint of those bytes (`files_fingerprint`). Equal keys mean the same code under the same
config over the same inputs: the artifact may be taken from the object store instead of recomputed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

FORMAT = "mix_assets.key/1"
CHUNK = 1 << 20


def canonical(obj) -> bytes:
    """The canonical JSON of `obj` (sorted keys, no spaces, UTF-8)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def artifact_key(asset: str, code_version: str | None, input_keys: Mapping[str, str]) -> str:
    """sha256 hex over {asset, code_version, inputs sorted}: the name of what `asset` computes from them."""
    return hashlib.sha256(canonical({"format": FORMAT, "asset": asset, "code_version": code_version or "",
                                     "inputs": dict(sorted(input_keys.items()))})).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)  # releases the GIL on large buffers: threads hash files in parallel
    return h.hexdigest()


def files_fingerprint(files: Iterable[str | os.PathLike], base: str | os.PathLike | None = None,
                      threads: int = 4) -> str:
    """sha256 over the sorted (path relative to `base`, size, sha256 of content) of `files`.

    Paths are relative to `base` (default: their common folder), so the same bytes at another
    checkout path give the same fingerprint; a file listed twice counts once. FileNotFoundError when
    one is absent."""
    paths = sorted({str(Path(f)) for f in files})
    if base is None:
        base = os.path.commonpath([os.path.dirname(p) or "." for p in paths]) if paths else "."
    with ThreadPoolExecutor(max(1, min(threads, len(paths) or 1))) as pool:
        digests = list(pool.map(sha256_file, paths))
    rows = [[os.path.relpath(p, base).replace(os.sep, "/"), os.path.getsize(p), d] for p, d in zip(paths, digests)]
    return hashlib.sha256(canonical(sorted(rows))).hexdigest()


def folder_files(folder: str | os.PathLike) -> list[str]:
    """Every non-hidden file under `folder` (not following directory links), sorted."""
    out = []
    for d, dirs, names in os.walk(folder, followlinks=False):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        out += [os.path.join(d, n) for n in sorted(names) if not n.startswith(".")]
    return out
