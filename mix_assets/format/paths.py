"""Path safety: every path taken from a manifest is checked by `safe_path` before any file is opened.

A path is relative to the mix directory, '/'-separated and normalised (no `..`, `.` or empty component,
no absolute path, drive, backslash or control character); under a local root its symlinks resolved
stay inside the root. `manifest_paths` lists every path a manifest names (the checker refuses the
manifest when one is unsafe, before touching a file).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mix_assets.format.manifest import ManifestError


class UnsafePathError(ManifestError):
    """A path taken from a manifest that could name a file outside the mix directory."""

    def __init__(self, path: Any, why: str):
        self.path = path
        super().__init__([f"{path!r}: {why}"])


def path_problem(path: Any) -> str | None:
    if not isinstance(path, str) or not path:
        return "a path must be a non-empty string"
    if any(ord(ch) < 0x20 for ch in path):
        return "control characters in a path"
    if "\\" in path:
        return "backslash in a path (paths are '/'-separated)"
    if ":" in path:
        return "':' in a path (drive letters and URLs are refused)"
    if path.startswith("/"):
        return "absolute path (must be relative to the mix directory)"
    parts = path.split("/")
    if ".." in parts:
        return "'..' in a path (must stay inside the mix directory)"
    if "" in parts or "." in parts or posixpath.normpath(path) != path:
        return "not a normalised path (empty or '.' components)"
    return None


def safe_path(path: Any, root: str | os.PathLike | None = None) -> Any:
    """The one validator of a path taken from a manifest (publish, verify, reader and this checker).

    Without `root`: returns `path` when it is relative, '/'-separated and normalised (no `..`, `.` or
    empty component, no absolute path, drive, backslash or control character). With a local `root`:
    also resolves symlinks and returns the resolved `Path`, which must lie inside the resolved root.
    Raises UnsafePathError naming the path and the rule it breaks.
    """
    why = path_problem(path)
    if why is not None:
        raise UnsafePathError(path, why)
    if root is None:
        return path
    base = Path(root).resolve()
    full = (base / path).resolve()
    if full != base and base not in full.parents:
        raise UnsafePathError(path, f"resolves to {full}, outside {base} (symlink)")
    return full


def manifest_paths(m: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(where, path) of every path a manifest names: files, shards, tokenizer files, review files."""
    out: list[tuple[str, Any]] = []
    files = m.get("files")
    for i, f in enumerate(files if isinstance(files, list) else []):
        if isinstance(f, Mapping) and "path" in f:
            out.append((f"files[{i}].path", f["path"]))
    splits = m.get("splits")
    for name, s in (splits.items() if isinstance(splits, Mapping) else ()):
        shards = s.get("shards") if isinstance(s, Mapping) else None
        for i, sh in enumerate(shards if isinstance(shards, list) else []):
            if isinstance(sh, Mapping) and "path" in sh:
                out.append((f"splits.{name}.shards[{i}].path", sh["path"]))
            ix = sh.get("doc_index") if isinstance(sh, Mapping) else None
            if isinstance(ix, Mapping) and "path" in ix:
                out.append((f"splits.{name}.shards[{i}].doc_index.path", ix["path"]))
    tok = m.get("tokenizer")
    tok_files = tok.get("files") if isinstance(tok, Mapping) else None
    for p in (tok_files if isinstance(tok_files, Mapping) else ()):
        out.append(("tokenizer.files", p))
    review = m.get("review")
    for k, p in (review.items() if isinstance(review, Mapping) else ()):
        if p is not None:
            out.append((f"review.{k}", p))
    return out


def path_problems(m: Mapping[str, Any]) -> tuple[list[str], set]:
    """(a problem per unsafe path the manifest names, the set of those paths): they are never opened."""
    problems, unsafe = [], set()
    for where, p in manifest_paths(m):
        why = path_problem(p)
        if why is not None:
            problems.append(f"{where}: {p!r}: {why}")
            unsafe.add(p if isinstance(p, str) else None)
    return problems, unsafe
