"""The manifest checker: `check_manifest(manifest, source)` proves the manifest's numbers add up and that
the files it lists are the files present. `manifest_problems` composes the concerns, in this order:

* path safety (format/paths.py): every path taken from the manifest passes `safe_path` (relative,
  normalised, no `..`, no absolute or drive path, no backslash; under a local root, symlinks resolved,
  inside the root); an unsafe path is never opened;
* the numbers (format/checks/counts.py): format, dtype and packing are known and coherent (sample_len =
  seq_len + 1 when targets are shifted, else a multiple of seq_len); per split: shard samples sum to the
  split's samples, tokens = samples x sample_len, emitted tokens = tokens + dropped tail (shorter than one
  sample), per-source emitted tokens sum to the emitted tokens, no empty shard, each shard's bytes =
  samples x sample_len x itemsize; the `sources` and `totals` sections equal the sums of the splits, the
  train tokens of a source are its budget, train documents do not exceed the sources' unique documents
  (equal with a separator);
* the listing (format/checks/files.py): shard, document index, tokenizer and review files all appear in
  `files` (same bytes and sha256), shards first, train before val; the fingerprint and
  `interpretation_sha256` are recomputed (format/manifest.py: the first covers only the files' bytes, the
  second how to read them); dtype is the smallest that holds the vocabulary; config_sha256 is the
  config file's;
* with a file source (format/mixdir.py): every listed file exists with that size (and that sha256,
  recomputed, when `verify_hashes`); for a local directory no unlisted file sits in the mix directory, and
  a README.md must be exactly `dataset_card(manifest)` (format/card.py);
* the manifest agrees with the review config it lists (format/checks/config.py: name, seed, packing,
  tokenizer kind, sources, budgets, epochs); the PII scrub manifest is listed exactly when the config
  scrubs a source, its rules' sha256 and per-source counts recomputed / checked (format/checks/pii.py);
  with `verify_hashes` (or `review_counts`), the document counts agree with the dedup keys and exclusion
  masks (format/checks/review.py: val documents, unique documents per source, train documents without a
  separator: at least the unique ones less those without words);
* when the rest is sound and `verify_hashes` (or `doc_index`): each document index is read back with its
  shard (format/checks/docindex.py: shape, count, agreement with the separator).

Every problem names the file (or manifest field) and the number that is wrong. `source` is a local mix
directory, a callable `open_file(relpath) -> binary file object`, an object with `open(relpath)` and
optionally `size(relpath)` / `list()`, or None for the structural checks alone (no file is touched).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mix_assets.format.checks.config import config_problems, read_config
from mix_assets.format.checks.counts import count_problems
from mix_assets.format.checks.docindex import doc_index_problems
from mix_assets.format.checks.fields import Checker
from mix_assets.format.checks.files import listing_problems, present_problems
from mix_assets.format.checks.pii import scrub_problems
from mix_assets.format.checks.review import review_count_problems
from mix_assets.format.manifest import MANIFEST_NAME, ManifestError
from mix_assets.format.mixdir import as_source
from mix_assets.format.paths import path_problems


def manifest_problems(manifest: Mapping[str, Any], source: Any = None, verify_hashes: bool = True,
                      review_counts: bool | None = None, doc_index: bool | None = None) -> list[str]:
    """Every problem found in `manifest` (and the files of `source`, when given); [] when it is sound.

    review_counts: cross-check the document counts against the dedup keys and exclusion masks
    (reads both Parquet files); default: when `verify_hashes` and a source is given.
    doc_index: read each document index and its shard (format/docindex.py: shape, count, agreement with
    the separator); default: when `verify_hashes` and a source is given."""
    m = manifest
    if not isinstance(m, Mapping):
        return [f"{MANIFEST_NAME}: top level is {type(m).__name__}, expected an object"]
    c = Checker(m)
    found, unsafe = path_problems(m)
    c.problems.extend(found)
    listed = count_problems(c, m)
    files = listing_problems(c, m, listed)
    src = as_source(source)
    if src is None:
        return c.problems
    bad = unsafe | present_problems(c, m, src, files.by_path, unsafe, verify_hashes)
    if files.config_entry is not None and files.config_path not in bad:
        cfg, found = read_config(src, files.config_path, files.config_entry.get("sha256"))
        c.problems.extend(found)
        if cfg is not None:
            c.problems.extend(config_problems(m, cfg, files.config_path))
            c.problems.extend(scrub_problems(m, src, cfg, skip=bad))
            if review_counts or (review_counts is None and verify_hashes):
                c.problems.extend(review_count_problems(m, src, cfg, skip=bad))
    if listed.doc_indexes and not c.problems and (doc_index or (doc_index is None and verify_hashes)):
        c.problems.extend(doc_index_problems(m, src.open))
    return c.problems


def check_manifest(manifest: Mapping[str, Any], root_or_opener: Any = None, verify_hashes: bool = True,
                   *, strict: bool = True, review_counts: bool | None = None,
                   doc_index: bool | None = None) -> list[str]:
    """Check `manifest` (see the module doc). strict: raise ManifestError listing every problem; else return them."""
    problems = manifest_problems(manifest, root_or_opener, verify_hashes, review_counts, doc_index)
    if problems and strict:
        raise ManifestError(problems)
    return problems
