"""Where the checker reads a mix's files: a local directory, an opener callable, or an object with `open`.

`as_source(source)` accepts a local mix directory (`LocalDir`: every path through `safe_path`), a
callable `open_file(relpath) -> binary file object` (raising FileNotFoundError when absent, so S3 or the
hub can reuse the checker), an object with `open(relpath)` and optionally `size(relpath)` / `list()`,
or None (no file is touched). `load_manifest` parses manifest.json from any of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from mix_assets.core.transport import sha256_stream
from mix_assets.format.manifest import MANIFEST_NAME, ManifestError
from mix_assets.format.paths import safe_path


class LocalDir:
    """A mix directory on local disk."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def open(self, path: str) -> BinaryIO:
        return open(safe_path(path, self.root), "rb")

    def size(self, path: str) -> int:
        return safe_path(path, self.root).stat().st_size

    def list(self) -> list[str]:
        """Every regular, non-hidden file under the root except manifest.json (relative, `/`-separated)."""
        out = []
        for p in self.root.rglob("*"):
            rel = p.relative_to(self.root)
            if p.is_file() and not any(part.startswith(".") for part in rel.parts) and str(rel) != MANIFEST_NAME:
                out.append(rel.as_posix())
        return sorted(out)

    def __repr__(self) -> str:
        return f"LocalDir({str(self.root)!r})"


class _Opener:
    """Adapts a bare `open_file(relpath)` callable: sizes are learnt by reading (or seeking) the file."""

    def __init__(self, open_file: Callable[[str], BinaryIO]):
        self._open = open_file

    def open(self, path: str) -> BinaryIO:
        return self._open(path)

    def size(self, path: str) -> int:
        with self._open(path) as f:
            if getattr(f, "seekable", lambda: False)():
                return f.seek(0, os.SEEK_END)
            return sha256_stream(f)[1]


def as_source(source: Any) -> Any:
    if isinstance(source, (str, os.PathLike)):  # before the duck test: pathlib.Path has .open too
        return LocalDir(source)
    if source is None or hasattr(source, "open"):
        return source
    if callable(source):
        return _Opener(source)
    raise TypeError(f"manifest file source must be a directory, a callable or None, got {type(source).__name__}")


def load_manifest(source: Any) -> dict:
    """Parse manifest.json from a mix directory / opener; a clear error when absent or not JSON."""
    src = as_source(source)
    try:
        with src.open(MANIFEST_NAME) as f:
            raw = f.read()
    except FileNotFoundError:
        raise ManifestError([f"{MANIFEST_NAME}: not found in {src!r}"]) from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ManifestError([f"{MANIFEST_NAME}: not valid JSON ({e})"]) from None
    if not isinstance(data, dict):
        raise ManifestError([f"{MANIFEST_NAME}: top level is {type(data).__name__}, expected an object"])
    return data
