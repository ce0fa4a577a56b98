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

from collections.abc import Mapping
from typing import Any

from mix_assets.core.transport import sha256_stream
from mix_assets.format.checks.config import config_problems, read_config
from mix_assets.format.checks.fields import Checker, is_int
from mix_assets.format.checks.pii import scrub_problems
from mix_assets.format.checks.review import review_count_problems
from mix_assets.format.manifest import (
    DTYPES,
    FORMAT,
    INTERPRETATION_KEY,
    MANIFEST_NAME,
    README_NAME,
    SPLITS,
    ManifestError,
    compute_fingerprint,
    interpretation_sha256,
)
from mix_assets.format.mixdir import as_source
from mix_assets.format.paths import UnsafePathError, manifest_paths, path_problem


def manifest_problems(manifest: Mapping[str, Any], source: Any = None, verify_hashes: bool = True,
                      review_counts: bool | None = None, doc_index: bool | None = None) -> list[str]:
    """Every problem found in `manifest` (and the files of `source`, when given); [] when it is sound.

    review_counts: cross-check the document counts against the dedup keys and exclusion masks
    (reads both Parquet files); default: when `verify_hashes` and a source is given.
    doc_index: read each document index and its shard (format/docindex.py: shape, count, agreement with
    the separator); default: when `verify_hashes` and a source is given."""
    c = Checker(manifest)
    m = manifest
    if not isinstance(m, Mapping):
        return [f"{MANIFEST_NAME}: top level is {type(m).__name__}, expected an object"]
    unsafe: set = set()
    for where, p in manifest_paths(m):
        why = path_problem(p)
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
            if not is_int(n) or n < 0:
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
        if train_docs is not None and uniq and all(is_int(u) for u in uniq):
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
            cfg, found = read_config(src, config_path, config_entry.get("sha256"))
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


def _documents_vs_index(c: Checker, split_sums: dict, per_source: Mapping, separator: bool) -> None:
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
