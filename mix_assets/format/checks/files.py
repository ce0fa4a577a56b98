"""The files a manifest lists and the files present: `files` entries, the shards, document indexes,
tokenizer and review files among them, the fingerprint and interpretation hash recomputed; with a file
source, every listed file's size (and sha256) and, for a directory, no unlisted file but the dataset card."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from mix_assets.core.transport import sha256_stream
from mix_assets.format.card import card_problems
from mix_assets.format.checks.counts import Listed
from mix_assets.format.checks.fields import Checker
from mix_assets.format.manifest import (
    DTYPES,
    INTERPRETATION_KEY,
    MANIFEST_NAME,
    README_NAME,
    SPLITS,
    compute_fingerprint,
    interpretation_sha256,
)
from mix_assets.format.paths import UnsafePathError
from mix_assets.format.shards import dtype_for_vocab


@dataclass
class FileList:
    """The manifest's `files` by path, and the review config's entry among them."""

    by_path: dict[str, dict]
    config_path: Any
    config_entry: Optional[dict]


def listing_problems(c: Checker, m: Mapping[str, Any], listed: Listed) -> FileList:
    """`files` entries (a path once, sha256 hex, no reserved name), shards first in split order, every
    shard, document index, tokenizer and review file listed with the same bytes and sha256; the
    fingerprint and interpretation_sha256 recomputed; dtype the smallest that holds the vocabulary."""
    shard_entries, index_entries = listed.shards, listed.doc_indexes
    dtype = m.get("dtype")
    size = DTYPES.get(dtype)
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
            want_dtype = dtype_for_vocab(vocab)
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
    return FileList(by_path, config_path, config_entry)


def present_problems(c: Checker, m: Mapping[str, Any], src: Any, by_path: dict[str, dict], unsafe: set,
                     verify_hashes: bool) -> set[str]:
    """Every listed file present with its size (and sha256 when `verify_hashes`); a lister's directory
    holds no unlisted file but the dataset card (format/card.py). The listed files found wrong."""
    bad_files: set[str] = set()
    for p, f in by_path.items():
        if p in unsafe:
            continue  # never opened: reported above
        found = file_problems(src, p, f.get("bytes"), f.get("sha256"), verify_hashes)
        if found:
            bad_files.add(p)
        c.problems.extend(found)
    lister = getattr(src, "list", None)
    if lister is not None:
        listed = set(lister())
        if README_NAME in listed and README_NAME not in by_path:
            c.problems.extend(card_problems(src, m))
        for extra in sorted(listed - set(by_path) - {README_NAME}):
            c.bad(f"{extra}: present in the mix directory but not listed in files")
    return bad_files


def file_problems(src: Any, path: str, want_bytes: int | None, want_sha: str | None,
                  verify_hashes: bool) -> list[str]:
    """One listed file against its entry: found, its size, and its sha256 when `verify_hashes`."""
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
