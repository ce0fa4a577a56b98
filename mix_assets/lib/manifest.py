"""The manifest.json contract and its checker (shared by the manifest asset, the publish step and the reader).

`check_manifest(manifest, source)` proves the manifest's numbers add up and that the files it lists are
the files present:

* format, dtype and packing are known and coherent (sample_len = seq_len + 1 when targets are shifted,
  else a multiple of seq_len);
* per split: shard samples sum to the split's samples, tokens = samples x sample_len, emitted tokens =
  tokens + dropped tail, per-source emitted tokens sum to the emitted tokens, no empty shard, each shard's
  bytes = samples x sample_len x itemsize;
* the `sources` and `totals` sections equal the sums of the splits;
* shard, tokenizer and review files all appear in `files` (same bytes and sha256), shards first, train
  before val; the fingerprint is recomputed from `files`;
* when a file source is given: every listed file exists with that size (and that sha256, recomputed, when
  `verify_hashes`), and for a local directory no unlisted file sits in the mix directory.

Every problem names the file (or manifest field) and the number that is wrong. `source` is a local mix
directory, a callable `open_file(relpath) -> binary file object` (raising FileNotFoundError when absent,
so S3 or the hub can reuse the checker), an object with `open(relpath)` and optionally `size(relpath)` /
`list()`, or None for the structural checks alone (no file is touched).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

FORMAT = "mix_assets.manifest/1"
MANIFEST_NAME = "manifest.json"
SPLITS = ("train", "val")
DTYPES = {"uint16": 2, "uint32": 4}
_HASH_CHUNK = 1 << 22


class ManifestError(ValueError):
    """A manifest whose numbers do not add up or whose files differ; `.problems` lists every finding."""

    def __init__(self, problems: list[str], origin: str = MANIFEST_NAME):
        self.problems = list(problems)
        self.origin = origin
        shown = "\n".join(f"  - {p}" for p in self.problems[:50])
        more = f"\n  ... and {len(self.problems) - 50} more" if len(self.problems) > 50 else ""
        super().__init__(f"{origin}: {len(self.problems)} problem(s):\n{shown}{more}")


def compute_fingerprint(files: Iterable[Mapping[str, Any] | str]) -> str:
    """sha256 over the concatenated hex sha256s of `files` (entries with "sha256", or the hex strings), in order."""
    h = hashlib.sha256()
    for f in files:
        h.update((f if isinstance(f, str) else f["sha256"]).encode("utf-8"))
    return h.hexdigest()


def sha256_stream(f: BinaryIO) -> tuple[str, int]:
    """(hex sha256, bytes read) of a binary stream, read to its end."""
    h = hashlib.sha256()
    n = 0
    while chunk := f.read(_HASH_CHUNK):
        h.update(chunk)
        n += len(chunk)
    return h.hexdigest(), n


def itemsize(dtype: str) -> int:
    if dtype not in DTYPES:
        raise ManifestError([f"dtype: {dtype!r} is not one of {sorted(DTYPES)}"])
    return DTYPES[dtype]


# -- file sources -----------------------------------------------------------------------------------------
class LocalDir:
    """A mix directory on local disk."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def open(self, path: str) -> BinaryIO:
        return open(self.root / path, "rb")

    def size(self, path: str) -> int:
        return (self.root / path).stat().st_size

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


# -- the checker ------------------------------------------------------------------------------------------
def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Checker:
    def __init__(self, m: Mapping[str, Any]):
        self.m = m
        self.problems: list[str] = []

    def bad(self, msg: str) -> None:
        self.problems.append(msg)

    def need(self, obj: Any, key: str, where: str, kind: type | tuple = int) -> Any:
        """obj[key] when present and of `kind` (ints are non-negative), else record a problem and return None."""
        if not isinstance(obj, Mapping) or key not in obj:
            self.bad(f"{where}.{key}: missing")
            return None
        v = obj[key]
        if kind is int:
            if not _int(v) or v < 0:
                self.bad(f"{where}.{key}: expected a non-negative integer, got {v!r}")
                return None
        elif not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
            self.bad(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got {type(v).__name__}")
            return None
        return v

    def eq(self, what: str, got: Any, claimed_where: str, claimed: Any) -> None:
        if got is not None and claimed is not None and got != claimed:
            self.bad(f"{claimed_where}: says {claimed}, but {what} is {got}")


def manifest_problems(manifest: Mapping[str, Any], source: Any = None, verify_hashes: bool = True) -> list[str]:
    """Every problem found in `manifest` (and the files of `source`, when given); [] when it is sound."""
    c = _Checker(manifest)
    m = manifest
    if not isinstance(m, Mapping):
        return [f"{MANIFEST_NAME}: top level is {type(m).__name__}, expected an object"]
    if m.get("format") != FORMAT:
        c.bad(f"format: {m.get('format')!r}, expected {FORMAT!r}")
    dtype = m.get("dtype")
    size = DTYPES.get(dtype)
    if size is None:
        c.bad(f"dtype: {dtype!r} is not one of {sorted(DTYPES)}")
    packing = c.need(m, "packing", "manifest", Mapping) or {}
    seq_len = c.need(packing, "seq_len", "packing")
    sample_len = c.need(packing, "sample_len", "packing")
    if seq_len is not None and sample_len is not None:
        if seq_len == 0 or sample_len == 0:
            c.bad(f"packing: seq_len {seq_len} and sample_len {sample_len} must be positive")
        elif packing.get("shifted_targets"):
            if sample_len != seq_len + 1:
                c.bad(f"packing.sample_len: {sample_len}, expected seq_len + 1 = {seq_len + 1} (shifted_targets)")
        elif sample_len % seq_len:
            c.bad(f"packing.sample_len: {sample_len} is not a multiple of seq_len {seq_len}")

    # -- splits ----------------------------------------------------------------------------------------
    splits = c.need(m, "splits", "manifest", Mapping) or {}
    shard_entries: list[dict] = []  # in the order files must list them
    split_sums: dict[str, dict[str, Any]] = {}
    for name in SPLITS:
        s = c.need(splits, name, "splits", Mapping)
        if s is None:
            continue
        w = f"splits.{name}"
        samples = c.need(s, "samples", w)
        tokens = c.need(s, "tokens", w)
        emitted = c.need(s, "emitted_tokens", w)
        dropped = c.need(s, "dropped_tail_tokens", w)
        c.need(s, "documents", w)
        seam = s.get("seam_rate")
        if not isinstance(seam, (int, float)) or isinstance(seam, bool) or not 0.0 <= seam <= 1.0:
            c.bad(f"{w}.seam_rate: {seam!r}, expected a number in [0, 1]")
        sources = c.need(s, "sources", w, Mapping) or {}
        shards = c.need(s, "shards", w, list) or []
        if samples is not None and sample_len and tokens is not None:
            c.eq(f"samples x sample_len = {samples} x {sample_len}", samples * sample_len, f"{w}.tokens", tokens)
        if tokens is not None and dropped is not None and emitted is not None:
            c.eq(f"tokens + dropped_tail_tokens = {tokens} + {dropped}", tokens + dropped,
                 f"{w}.emitted_tokens", emitted)
        src_ok = True
        for src, n in sources.items():
            if not _int(n) or n < 0:
                c.bad(f"{w}.sources.{src}: expected a non-negative integer, got {n!r}")
                src_ok = False
        if src_ok and emitted is not None:
            c.eq(f"the sum of {w}.sources", sum(sources.values()), f"{w}.emitted_tokens", emitted)
        shard_samples = 0
        for i, sh in enumerate(shards):
            path = sh.get("path") if isinstance(sh, Mapping) else None
            label = path if isinstance(path, str) else f"{w}.shards[{i}]"
            if not isinstance(path, str):
                c.bad(f"{label}: shard has no path")
                continue
            if not path.startswith(f"{name}/"):
                c.bad(f"{path}: a {name} shard must live under {name}/")
            n = c.need(sh, "samples", label)
            b = c.need(sh, "bytes", label)
            sha = c.need(sh, "sha256", label, str)
            if n is not None:
                shard_samples += n
                if n == 0:
                    c.bad(f"{path}: empty shard (0 samples)")
                if b is not None and sample_len and size:
                    want = n * sample_len * size
                    if b != want:
                        c.bad(f"{path}: bytes {b}, expected samples x sample_len x itemsize = "
                              f"{n} x {sample_len} x {size} = {want}")
            shard_entries.append({"path": path, "bytes": b, "sha256": sha})
        if samples is not None:
            c.eq(f"the sum of its {len(shards)} shards' samples", shard_samples, f"{w}.samples", samples)
        split_sums[name] = {"samples": samples, "tokens": tokens, "emitted": emitted, "dropped": dropped,
                            "sources": dict(sources), "shards": len(shards)}

    # -- sources and totals ------------------------------------------------------------------------------
    per_source = c.need(m, "sources", "manifest", Mapping) or {}
    if "train" in split_sums and "val" in split_sums:
        listed = set(split_sums["train"]["sources"]) | set(split_sums["val"]["sources"])
        for src in sorted(listed - set(per_source)):
            c.bad(f"sources.{src}: missing, but splits count {src} tokens")
        for src, rec in per_source.items():
            for split, key in (("train", "train_tokens"), ("val", "val_tokens")):
                got = c.need(rec, key, f"sources.{src}")
                c.eq(f"splits.{split}.sources.{src}", split_sums[split]["sources"].get(src, 0),
                     f"sources.{src}.{key}", got)
    totals = c.need(m, "totals", "manifest", Mapping) or {}
    claimed = {k: c.need(totals, k, "totals") if totals else None
               for k in ("train_tokens", "val_tokens", "train_samples", "val_samples", "shards", "dropped_tail_tokens")}
    if "train" in split_sums and "val" in split_sums:
        tr, va = split_sums["train"], split_sums["val"]
        dropped_sum = None if tr["dropped"] is None or va["dropped"] is None else tr["dropped"] + va["dropped"]
        for key, what, got in (
            ("train_tokens", "splits.train.tokens", tr["tokens"]),
            ("val_tokens", "splits.val.tokens", va["tokens"]),
            ("train_samples", "splits.train.samples", tr["samples"]),
            ("val_samples", "splits.val.samples", va["samples"]),
            ("shards", "the number of shards listed in splits", tr["shards"] + va["shards"]),
            ("dropped_tail_tokens", "the sum of the splits' dropped_tail_tokens", dropped_sum),
        ):
            c.eq(what, got, f"totals.{key}", claimed[key])

    # -- files and fingerprint ---------------------------------------------------------------------------
    files = c.need(m, "files", "manifest", list) or []
    by_path: dict[str, dict] = {}
    for i, f in enumerate(files):
        if not isinstance(f, Mapping) or not isinstance(f.get("path"), str):
            c.bad(f"files[{i}]: entry has no path")
            continue
        p = f["path"]
        if p in by_path:
            c.bad(f"{p}: listed twice in files (entries {list(by_path).index(p)} and {i})")
        if p.startswith("/") or ".." in p.split("/") or "\\" in p:
            c.bad(f"{p}: file paths must be relative to the mix directory, without '..'")
        if p == MANIFEST_NAME:
            c.bad(f"{p}: manifest.json must not list itself in files")
        c.need(f, "bytes", p)
        sha = c.need(f, "sha256", p, str)
        if sha is not None and (len(sha) != 64 or any(ch not in "0123456789abcdef" for ch in sha)):
            c.bad(f"{p}: sha256 {sha!r} is not 64 lowercase hex digits")
        by_path[p] = dict(f)
    n_shard_files = sum(1 for p in by_path if p.split("/")[0] in SPLITS)
    if n_shard_files != len(shard_entries):
        c.bad(f"files: lists {n_shard_files} shard files under train/ and val/, splits list {len(shard_entries)} shards")
    for i, sh in enumerate(shard_entries):
        f = by_path.get(sh["path"])
        if f is None:
            c.bad(f"{sh['path']}: shard missing from files")
            continue
        at_i = files[i].get("path") if i < len(files) and isinstance(files[i], Mapping) else None
        if at_i != sh["path"]:
            c.bad(f"{sh['path']}: files must list train shards, then val shards, in split order "
                  f"(expected at files[{i}])")
        for key in ("bytes", "sha256"):
            if sh[key] is not None and f.get(key) is not None and sh[key] != f[key]:
                c.bad(f"{sh['path']}: shard {key} {sh[key]} differs from files entry {f[key]}")
    tok = m.get("tokenizer")
    if not isinstance(tok, Mapping):
        c.bad("tokenizer: missing")
    else:
        c.need(tok, "vocab_size", "tokenizer")
        for p, sha in (tok.get("files") or {}).items():
            if p not in by_path:
                c.bad(f"{p}: tokenizer file missing from files")
            elif by_path[p].get("sha256") != sha:
                c.bad(f"{p}: tokenizer sha256 {sha} differs from files entry {by_path[p].get('sha256')}")
    review = m.get("review")
    if isinstance(review, Mapping):
        for key, p in review.items():
            if p is not None and p not in by_path:
                c.bad(f"{p}: review file review.{key} missing from files")
    fp = m.get("fingerprint")
    if all(isinstance(f, Mapping) and isinstance(f.get("sha256"), str) for f in files):
        want = compute_fingerprint(files)
        if fp != want:
            c.bad(f"fingerprint: says {fp}, but sha256 over the {len(files)} files' sha256s is {want}")

    # -- the files themselves -----------------------------------------------------------------------------
    src = as_source(source)
    if src is not None:
        for p, f in by_path.items():
            c.problems.extend(_file_problems(src, p, f.get("bytes"), f.get("sha256"), verify_hashes))
        lister = getattr(src, "list", None)
        if lister is not None:
            for extra in sorted(set(lister()) - set(by_path)):
                c.bad(f"{extra}: present in the mix directory but not listed in files")
    return c.problems


def _file_problems(src: Any, path: str, want_bytes: int | None, want_sha: str | None,
                   verify_hashes: bool) -> list[str]:
    try:
        if verify_hashes:
            with src.open(path) as fh:
                sha, n = sha256_stream(fh)
        else:
            sha, n = None, src.size(path)
    except FileNotFoundError:
        return [f"{path}: listed in files ({want_bytes} bytes) but not found"]
    out = []
    if want_bytes is not None and n != want_bytes:
        out.append(f"{path}: {n} bytes on disk, manifest says {want_bytes}")
    if sha is not None and want_sha is not None and sha != want_sha:
        out.append(f"{path}: sha256 {sha}, manifest says {want_sha}")
    return out


def check_manifest(manifest: Mapping[str, Any], root_or_opener: Any = None, verify_hashes: bool = True,
                   *, strict: bool = True) -> list[str]:
    """Check `manifest` (see the module doc). strict: raise ManifestError listing every problem; else return them."""
    problems = manifest_problems(manifest, root_or_opener, verify_hashes)
    if problems and strict:
        raise ManifestError(problems)
    return problems


def file_entry(root: str | os.PathLike, path: str) -> dict:
    """The `files` entry of one file of a local mix directory: path, bytes, sha256."""
    with open(Path(root) / path, "rb") as f:
        sha, n = sha256_stream(f)
    return {"path": path, "bytes": n, "sha256": sha}
