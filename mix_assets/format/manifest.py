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
  before val; the fingerprint is recomputed from `files`; document indexes (optional, `doc_index` of
  every shard or of none) are listed too, and with a source their contents are read back
  (format/docindex.py: shape, count, agreement with the separator);
* every path taken from the manifest passes `safe_path` (relative, normalised, no `..`, no absolute or
  drive path, no backslash; under a local root, symlinks resolved, inside the root);
* `interpretation_sha256` is recomputed (see `interpretation`): the content fingerprint covers only the
  files' bytes, this second hash covers how to read them;
* counts that follow from the contract: each split's dropped tail is shorter than one sample, the train
  tokens of a source are its budget, train documents do not exceed the sources' unique documents (equal
  with a separator), dtype is the smallest that holds the vocabulary, config_sha256 is the config file's;
* when a file source is given: every listed file exists with that size (and that sha256, recomputed, when
  `verify_hashes`), for a local directory no unlisted file sits in the mix directory (a published
  revision's README.md must be exactly `dataset_card(manifest)`), and the manifest agrees with the review
  config it lists (name, seed, packing, tokenizer kind, sources, budgets, epochs); with `verify_hashes`,
  also with the dedup keys and exclusion masks (val documents, unique documents per source, train
  documents without a separator: at least the unique ones less those without words); the PII
  scrub manifest (review.scrub_manifest) is listed exactly when the config scrubs a source, and its
  rules' sha256 and per-source counts are recomputed / checked (`scrub_problems`).

Every problem names the file (or manifest field) and the number that is wrong. `source` is a local mix
directory, a callable `open_file(relpath) -> binary file object` (raising FileNotFoundError when absent,
so S3 or the hub can reuse the checker), an object with `open(relpath)` and optionally `size(relpath)` /
`list()`, or None for the structural checks alone (no file is touched).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import posixpath
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from mix_assets.core.transport import sha256_stream  # noqa: F401 -- re-exported (reader, checks)

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


class UnsafePathError(ManifestError):
    """A path taken from a manifest that could name a file outside the mix directory."""

    def __init__(self, path: Any, why: str):
        self.path = path
        super().__init__([f"{path!r}: {why}"])


def _path_problem(path: Any) -> str | None:
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
    why = _path_problem(path)
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


def manifest_problems(manifest: Mapping[str, Any], source: Any = None, verify_hashes: bool = True,
                      review_counts: bool | None = None, doc_index: bool | None = None) -> list[str]:
    """Every problem found in `manifest` (and the files of `source`, when given); [] when it is sound.

    review_counts: cross-check the document counts against the dedup keys and exclusion masks
    (reads both Parquet files); default: when `verify_hashes` and a source is given.
    doc_index: read each document index and its shard (format/docindex.py: shape, count, agreement with
    the separator); default: when `verify_hashes` and a source is given."""
    c = _Checker(manifest)
    m = manifest
    if not isinstance(m, Mapping):
        return [f"{MANIFEST_NAME}: top level is {type(m).__name__}, expected an object"]
    unsafe: set = set()
    for where, p in manifest_paths(m):
        why = _path_problem(p)
        if why is not None:
            c.bad(f"{where}: {p!r}: {why}")
            unsafe.add(p if isinstance(p, str) else None)
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
    index_entries: list[dict] = []  # packing.doc_index: one per shard, or none
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
        documents = c.need(s, "documents", w)
        if dropped is not None and sample_len and dropped >= sample_len:
            c.bad(f"{w}.dropped_tail_tokens: {dropped}, but a dropped tail is shorter than one sample "
                  f"(sample_len {sample_len})")
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
        starts: list = []  # each shard's doc_index.documents (None: not a count, or no index)
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
            if "doc_index" in sh:
                ix = c.need(sh, "doc_index", label, Mapping) or {}
                ix_path = c.need(ix, "path", f"{label}.doc_index", str)
                if ix_path is not None and not ix_path.startswith(f"doc_index/{name}/"):
                    c.bad(f"{ix_path}: a {name} document index must live under doc_index/{name}/")
                starts.append(c.need(ix, "documents", f"{label}.doc_index"))
                index_entries.append({"path": ix_path, "bytes": c.need(ix, "bytes", f"{label}.doc_index"),
                                      "sha256": c.need(ix, "sha256", f"{label}.doc_index", str)})
        if samples is not None:
            c.eq(f"the sum of its {len(shards)} shards' samples", shard_samples, f"{w}.samples", samples)
        split_sums[name] = {"samples": samples, "tokens": tokens, "emitted": emitted, "dropped": dropped,
                            "documents": documents,
                            "sources": dict(sources), "shards": len(shards),
                            "starts": (sum(starts) if shards and len(starts) == len(shards)
                                       and None not in starts else None)}

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
            # the train stream of a source is cut at exactly its budget (N x share x epochs)
            c.eq(f"splits.train.sources.{src} (the train stream is cut at the budget)",
                 split_sums["train"]["sources"].get(src, 0), f"sources.{src}.budget_tokens",
                 c.need(rec, "budget_tokens", f"sources.{src}"))
        uniq = [rec.get("unique_documents") for rec in per_source.values() if isinstance(rec, Mapping)]
        for src, rec in per_source.items():
            c.need(rec, "unique_documents", f"sources.{src}")
        train_docs = split_sums["train"]["documents"]
        if train_docs is not None and uniq and all(_int(u) for u in uniq):
            # every train document is one of a source's unique set; a separator gives each one a token
            if packing.get("separator") is not None:
                c.eq("the sum of sources.*.unique_documents", sum(uniq), "splits.train.documents", train_docs)
            elif train_docs > sum(uniq):
                c.bad(f"splits.train.documents: says {train_docs}, more than the sum of sources.*.unique_documents "
                      f"{sum(uniq)}")
        _documents_vs_index(c, split_sums, per_source, packing.get("separator") is not None)
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
        if p in (MANIFEST_NAME, README_NAME):
            c.bad(f"{p}: a reserved name (the manifest itself, the published dataset card) listed in files")
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
    if index_entries and len(index_entries) != len(shard_entries):
        c.bad(f"doc_index: {len(index_entries)} of {len(shard_entries)} shards have a document index "
              "(a revision has one for every shard or none)")
    for ix in index_entries:
        f = by_path.get(ix["path"])
        if f is None:
            c.bad(f"{ix['path']}: document index missing from files")
            continue
        for key in ("bytes", "sha256"):
            if ix[key] is not None and f.get(key) != ix[key]:
                c.bad(f"{ix['path']}: document index {key} {ix[key]} differs from files entry {f.get(key)}")
    tok = m.get("tokenizer")
    if not isinstance(tok, Mapping):
        c.bad("tokenizer: missing")
    else:
        vocab = c.need(tok, "vocab_size", "tokenizer")
        if vocab is not None and size is not None:
            want_dtype = "uint16" if vocab <= 1 << 16 else "uint32"  # stages/tokens/tokenizer.dtype_for_vocab
            if dtype != want_dtype:
                c.bad(f"dtype: {dtype!r}, but tokenizer.vocab_size {vocab} is stored as {want_dtype!r}")
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
    config_path = review.get("config") if isinstance(review, Mapping) else None
    config_entry = by_path.get(config_path) if isinstance(config_path, str) else None
    if config_entry is None:
        c.bad("review.config: the mix config file is not listed (it says how the mix was built)")
    else:
        c.eq(f"the sha256 of {config_path}", config_entry.get("sha256"), "config_sha256", m.get("config_sha256"))
    fp = m.get("fingerprint")
    if all(isinstance(f, Mapping) and isinstance(f.get("sha256"), str) for f in files):
        want = compute_fingerprint(files)
        if fp != want:
            c.bad(f"fingerprint: says {fp}, but sha256 over the {len(files)} files' sha256s is {want}")
    if INTERPRETATION_KEY not in m:
        c.bad(f"{INTERPRETATION_KEY}: missing (sha256 over how to read the bytes, see format/manifest.interpretation)")
    else:
        want = interpretation_sha256(m)
        if m[INTERPRETATION_KEY] != want:
            c.bad(f"{INTERPRETATION_KEY}: says {m[INTERPRETATION_KEY]}, but sha256 over the canonical JSON of "
                  f"format, dtype, packing, tokenizer identity and split shard samples is {want}")

    # -- the files themselves -----------------------------------------------------------------------------
    src = as_source(source)
    if src is not None:
        bad_files: set[str] = set()
        for p, f in by_path.items():
            if p in unsafe:
                continue  # never opened: reported above
            found = _file_problems(src, p, f.get("bytes"), f.get("sha256"), verify_hashes)
            if found:
                bad_files.add(p)
            c.problems.extend(found)
        lister = getattr(src, "list", None)
        if lister is not None:
            listed = set(lister())
            if README_NAME in listed and README_NAME not in by_path:
                c.problems.extend(_card_problems(src, m))
            for extra in sorted(listed - set(by_path) - {README_NAME}):
                c.bad(f"{extra}: present in the mix directory but not listed in files")
        if config_entry is not None and config_path not in bad_files and config_path not in unsafe:
            cfg, found = _read_config(src, config_path, config_entry.get("sha256"))
            c.problems.extend(found)
            if cfg is not None:
                c.problems.extend(config_problems(m, cfg, config_path))
                c.problems.extend(scrub_problems(m, src, cfg, skip=bad_files | unsafe))
                if review_counts or (review_counts is None and verify_hashes):
                    bad = bad_files | unsafe
                    c.problems.extend(review_count_problems(m, src, cfg, skip=bad))
        if index_entries and not c.problems and (doc_index or (doc_index is None and verify_hashes)):
            from mix_assets.format.docindex import revision_problems

            c.problems.extend(revision_problems(m, src.open))
    return c.problems


def _documents_vs_index(c: _Checker, split_sums: dict, per_source: Mapping, separator: bool) -> None:
    """splits.<split>.documents against its shards' document indexes, where every document appears at
    most once (val; train when no source has more than one epoch): each start is a different document, so
    there are at least as many documents as starts; the documents not started in a shard started in the
    dropped tail or encoded to no token, and with a separator a document has at least one token, so at
    most dropped_tail_tokens more. Structural: the reader's and any file-less check see it too. (Train
    with a separator equals the sum of unique documents, checked already.)"""
    epochs = [rec.get("epochs") for rec in per_source.values() if isinstance(rec, Mapping)]
    once_train = bool(epochs) and all(isinstance(e, (int, float)) and not isinstance(e, bool) and e <= 1
                                      for e in epochs)
    for name, s in split_sums.items():
        docs, starts, dropped = s["documents"], s["starts"], s["dropped"]
        if docs is None or starts is None or (name == "train" and (separator or not once_train)):
            continue
        w = f"splits.{name}.documents"
        if docs < starts:
            c.bad(f"{w}: says {docs}, but its shards' document indexes start {starts} documents (each a "
                  "different one)")
        elif separator and dropped is not None and docs > starts + dropped:
            c.bad(f"{w}: says {docs}, but its shards' document indexes start {starts} and its dropped tail "
                  f"of {dropped} tokens holds at most {dropped} more (a separator gives each one a token)")


def _card_problems(src: Any, m: Mapping[str, Any]) -> list[str]:
    """A published revision's README.md must be exactly the card generated from its manifest."""
    from mix_assets.stages.publish.publish import dataset_card  # publish imports this module

    try:
        want = dataset_card(dict(m))
    except Exception as e:  # noqa: BLE001 -- a manifest too broken for a card is reported above
        return [f"{README_NAME}: no dataset card can be generated from this manifest ({type(e).__name__}: {e})"]
    with src.open(README_NAME) as f:
        got = f.read()
    if got != want.encode("utf-8"):
        return [f"{README_NAME}: present but not the dataset card generated from the manifest "
                f"(stages/publish/publish.dataset_card); {len(got)} bytes, the card is {len(want.encode('utf-8'))}"]
    return []


def _read_config(src: Any, path: str, want_sha: str | None) -> tuple[dict | None, list[str]]:
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
        cfg, problems = _read_config(as_source(source), safe_path(path), entry.get("sha256"))
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
    if _MISSING not in (seq_len, shifted, per_seq) and _int(seq_len) and _int(per_seq):
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
    return out


_MISSING = object()
SCRUB_KEY = "scrub_manifest"  # review key of the PII scrub manifest (stages/manifest/manifest_builder.SCRUB_MANIFEST)


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
            if not (0 <= v["scrubbed_docs"] <= v["docs"]) or not all(_int(x) and x >= 0 for x in red.values()) \
                    or v["scrubbed_docs"] > sum(red.values()):
                out.append(f"{path}: sources.{name}: counts are incoherent ({v['docs']} docs, "
                           f"{v['scrubbed_docs']} scrubbed, redactions {red})")
    except (KeyError, TypeError, AttributeError) as e:
        out.append(f"{path}: not a scrub manifest (core/pii.scrub_manifest): {type(e).__name__} {e}")
    return out


_BATCH_ROWS = 8192  # rows of the review files decoded into Python objects at a time


def review_count_problems(m: Mapping[str, Any], src: Any, cfg: Mapping[str, Any], skip: set = frozenset()) -> list[str]:
    """Document counts against the review files: kept documents = dedup_keys rows minus the doc_ids of
    exclusion_masks; a kept document is val when hash(seed, cluster_id) < split.val_fraction (the rule
    of stages/split/split.assign_split). splits.val.documents must equal the kept val documents, and each
    source's unique_documents cannot exceed its kept train documents. Without a separator a unique document
    of no token is left out of splits.train.documents; only a document without words (dedup_keys n_words 0)
    can encode to none, so train documents are at least the unique ones less the kept train documents
    without words (equal when there are none). Both files are read a row group at a
    time on this thread (`tables.iter_batches`, the freed pages returned after each): a whole-file or
    threaded read left more memory resident the larger the corpus (issue 13; docs/scale.md). Held: the
    excluded ids (`IdSet`), nothing per kept document."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from mix_assets.core import tables
    from mix_assets.core.idset import IdSet
    from mix_assets.stages.split.split import unit_hash

    review = m.get("review") if isinstance(m.get("review"), Mapping) else {}
    keys_path, masks_path = review.get("dedup_keys"), review.get("exclusion_masks")
    if not isinstance(keys_path, str) or not isinstance(masks_path, str):
        return ["review: dedup_keys and exclusion_masks must both be listed to cross-check document counts"]
    if keys_path in skip or masks_path in skip:
        return []  # their own problems are reported
    val_fraction = cfg.get("split", {}).get("val_fraction") if isinstance(cfg.get("split"), Mapping) else None
    seed = cfg.get("seed")
    if not isinstance(val_fraction, (int, float)) or not _int(seed):
        return [f"{review.get('config')}: split.val_fraction and seed are needed to recount val documents"]

    def parquet(f: Any) -> "pq.ParquetFile":
        return pq.ParquetFile(pa.BufferReader(f.read()) if not _seekable(f) else f)

    def read_error(path: str, columns: list[str], e: Exception) -> str:
        return f"{path}: cannot read columns {columns} ({type(e).__name__}: {e})"

    def excluded_ids() -> IdSet | str:
        try:
            with src.open(masks_path) as f:
                pf = parquet(f)
                schema = pa.schema([x for x in pf.schema_arrow if x.name == "doc_id"])
                batches = tables.iter_batches(pf, ["doc_id"], _BATCH_ROWS)
                ids = pa.Table.from_batches(batches, schema).column("doc_id")
        except (pa.ArrowInvalid, KeyError, ValueError) as e:
            return read_error(masks_path, ["doc_id"], e)
        return f"{masks_path}: field doc_id is null in some rows" if ids.null_count else IdSet(ids)

    def kept_counts(excluded: IdSet) -> tuple[dict, dict, dict | None] | str:
        """{source: kept val documents}, {source: kept train documents}, {source: kept train documents
        without words} (None when dedup_keys has no n_words): dedup_keys a batch at a time."""
        columns, val, train, wordless = ["doc_id", "source", "cluster_id"], {}, {}, {}
        try:
            with src.open(keys_path) as f:
                pf = parquet(f)
                if "n_words" in pf.schema_arrow.names:
                    columns.append("n_words")
                else:
                    wordless = None
                for b in tables.iter_batches(pf, columns, _BATCH_ROWS):
                    for col in columns:
                        if b.column(col).null_count:
                            return f"{keys_path}: field {col} is null in some rows"
                    kept = b.filter(pa.array(~excluded.contains(b.column("doc_id").cast(pa.string()))))
                    clusters = pc.unique(kept.column("cluster_id"))
                    hashed = np.array([unit_hash(seed, c) < val_fraction for c in clusters.to_pylist()], bool)
                    is_val = hashed[pc.index_in(kept.column("cluster_id"), value_set=clusters).to_numpy()]
                    src_codes = pc.dictionary_encode(kept.column("source").cast(pa.string()))
                    no_words = None if wordless is None else np.asarray(
                        pc.equal(kept.column("n_words"), 0).fill_null(False), bool)
                    for k, name in enumerate(src_codes.dictionary.to_pylist()):
                        mine = src_codes.indices.to_numpy() == k
                        val[name] = val.get(name, 0) + int((mine & is_val).sum())
                        train[name] = train.get(name, 0) + int((mine & ~is_val).sum())
                        if wordless is not None:
                            wordless[name] = wordless.get(name, 0) + int((mine & ~is_val & no_words).sum())
        except (pa.ArrowInvalid, KeyError, ValueError) as e:
            return read_error(keys_path, columns, e)
        return ({k: v for k, v in val.items() if v}, {k: v for k, v in train.items() if v},
                None if wordless is None else {k: v for k, v in wordless.items() if v})

    masks = excluded_ids()
    counts = kept_counts(masks if isinstance(masks, IdSet) else IdSet())
    tables.release_unused()
    errors = [t for t in (counts, masks) if isinstance(t, str)]
    if errors:
        return errors
    val, train, wordless = counts
    out = []
    per_source = m.get("sources") if isinstance(m.get("sources"), Mapping) else {}
    splits = m.get("splits") if isinstance(m.get("splits"), Mapping) else {}
    val_docs = splits.get("val", {}).get("documents") if isinstance(splits.get("val"), Mapping) else None
    want_val = sum(val.get(s, 0) for s in per_source)
    origin = f"{keys_path} minus {masks_path}"
    if _int(val_docs) and val_docs != want_val:
        out.append(f"splits.val.documents: says {val_docs}, but {origin} holds {want_val} val documents "
                   f"of sources {sorted(per_source)} (hash(seed, cluster_id) < val_fraction {val_fraction})")
    for s, rec in per_source.items():
        u = rec.get("unique_documents") if isinstance(rec, Mapping) else None
        have = train.get(s, 0)
        if _int(u) and u > have:
            out.append(f"sources.{s}.unique_documents: says {u}, but {origin} holds only {have} kept train "
                       f"documents of {s}")
        budget = rec.get("budget_tokens") if isinstance(rec, Mapping) else None
        if _int(u) and u == 0 and _int(budget) and budget > 0:
            out.append(f"sources.{s}.unique_documents: 0, but its budget_tokens is {budget}")
    packing = m.get("packing") if isinstance(m.get("packing"), Mapping) else {}
    tr = splits.get("train") if isinstance(splits.get("train"), Mapping) else {}
    train_docs = tr.get("documents")
    uniq = {s: rec.get("unique_documents") for s, rec in per_source.items() if isinstance(rec, Mapping)}
    # with a separator the count equals the sum (manifest_problems), as it does when above it
    if (packing.get("separator") is None and wordless is not None and _int(train_docs) and uniq
            and all(_int(u) for u in uniq.values())):
        total = sum(uniq.values())
        may_drop = sum(min(u, wordless.get(s, 0)) for s, u in uniq.items())
        if train_docs < total - may_drop:
            out.append(f"splits.train.documents: says {train_docs}, but the sources' {total} unique "
                       f"documents, of which {origin} holds at most {may_drop} without words (the only "
                       f"ones that may encode to no token), leave at least {total - may_drop}")
    return out


def _seekable(f: Any) -> bool:
    return bool(getattr(f, "seekable", lambda: False)())


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
    except UnsafePathError as e:
        return [f"{path}: {e.problems[0].split(': ', 1)[1]}"]
    out = []
    if want_bytes is not None and n != want_bytes:
        out.append(f"{path}: {n} bytes on disk, manifest says {want_bytes}")
    if sha is not None and want_sha is not None and sha != want_sha:
        out.append(f"{path}: sha256 {sha}, manifest says {want_sha}")
    return out


def check_manifest(manifest: Mapping[str, Any], root_or_opener: Any = None, verify_hashes: bool = True,
                   *, strict: bool = True, review_counts: bool | None = None,
                   doc_index: bool | None = None) -> list[str]:
    """Check `manifest` (see the module doc). strict: raise ManifestError listing every problem; else return them."""
    problems = manifest_problems(manifest, root_or_opener, verify_hashes, review_counts, doc_index)
    if problems and strict:
        raise ManifestError(problems)
    return problems


def file_entry(root: str | os.PathLike, path: str) -> dict:
    """The `files` entry of one file of a local mix directory: path, bytes, sha256."""
    with open(Path(root) / path, "rb") as f:
        sha, n = sha256_stream(f)
    return {"path": path, "bytes": n, "sha256": sha}
