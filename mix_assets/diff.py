"""What changed between two published revisions (no Dagster needed): the revision diff of `fingerprint_reproduced`.

    python -m mix_assets.diff REV_A REV_B [--json]

REV_A, REV_B: published revision directories or s3://bucket/prefix URLs (read through core/transport).
Prints, per source, the documents kept before and after (added, removed, changed content by doc_id,
from each revision's review/dedup_keys.parquet) and the train/val tokens, the totals, and the files
added, removed and changed; `--json` prints the same as JSON. Exit status 0; 2 when a revision cannot
be read (message on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys

from mix_assets.core import transport
from mix_assets.format.manifest import ManifestError
from mix_assets.format.mixdir import load_manifest
from mix_assets.format.paths import safe_path
from mix_assets.stages.publish.drift import diff_text, documents_of_dedup_keys, revision_diff

EXIT_ERROR = 2


def _opener(location: str):
    if transport.scheme(location) == transport.HUB:  # the hub's revisions are read through the reader
        raise ValueError(f"{location}: a hub revision; pass a directory or an s3:// URL (a local copy)")
    base = location.rstrip("/")
    return lambda rel: transport.open_url(f"{base}/{rel}")


def read_revision(location: str) -> tuple[dict, dict[str, dict[str, str]]]:
    """The manifest and the kept documents by source of the revision at `location`."""
    open_file = _opener(location)
    manifest = load_manifest(open_file)
    listed = (manifest.get("review") or {}).get("dedup_keys")  # where the revision says its dedup keys are
    raw = None
    if listed:
        try:
            with open_file(safe_path(listed)) as f:
                raw = f.read()
        except FileNotFoundError:
            pass
    return manifest, documents_of_dedup_keys(raw)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mix_assets.diff", description=__doc__.split("\n")[0])
    ap.add_argument("rev_a", help="the earlier revision: a directory or s3:// URL")
    ap.add_argument("rev_b", help="the later revision")
    ap.add_argument("--json", action="store_true", help="print the diff as JSON")
    args = ap.parse_args(argv)
    read = []
    for location in (args.rev_a, args.rev_b):
        try:
            read.append(read_revision(location))
        except (OSError, ValueError, ManifestError) as e:  # ManifestError is a ValueError; named for the reader
            print(f"mix_assets.diff: {location}: {e}", file=sys.stderr)
            return EXIT_ERROR
    (ma, da), (mb, db) = read
    diff = revision_diff(ma, mb, da, db)
    sys.stdout.write(json.dumps(diff, indent=1) + "\n" if args.json else diff_text(diff))
    return 0


if __name__ == "__main__":
    sys.exit(main())
