"""Audit a published revision against the eval registry of a mix config (no Dagster needed).

    python -m mix_assets.audit_published <location> --config configs/<mix>.yaml [--cache-dir DIR] [--json out.json]
        [--workers N] [--ray [ADDRESS]]

<location>: a local mix directory, s3://bucket/prefix or hf://datasets/org/name@revision[/subdir]
(as `mix_assets.reader.open_mix`). Prints a table of counts; --json writes the full report.
Each shard is a map task (core/engine): --workers threads in this process (default 2), or Ray tasks
with --ray (a new local instance of N workers, or the cluster at ADDRESS); the report is the same.
Exit status: 0 = zero overlap with every denominator >= min_rows; otherwise the bits
1 = overlap found, 4 = a task below min_rows (or without n-grams, or no tasks); 2 = the audit
could not run (unreadable revision or eval file, test split asked for, bad config, or any crash),
message on stderr; no message here quotes eval or document text.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from mix_assets.config import MixConfigError, load_spec
from mix_assets.stages.sources import demo_corpus
from mix_assets.core import engine
from mix_assets.stages.audit import published as pa_
from mix_assets.stages.audit.evals import EvalDataError, TestSplitRefused
from mix_assets.format.manifest import ManifestError
from mix_assets.reader.errors import ReaderError

EXIT_ERROR = 2


def _where(e: BaseException) -> str:
    """file:line of the innermost frame of `e` (no variable values, no message)."""
    tb = traceback.extract_tb(e.__traceback__)
    return f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mix_assets.audit_published", description=__doc__.split("\n\n")[0])
    ap.add_argument("location", help="published revision: local dir, s3://bucket/prefix or hf://datasets/o/n@rev")
    ap.add_argument("--config", required=True, help="the mix config whose audit.tasks form the eval registry")
    ap.add_argument("--cache-dir", default=None, help="where remote shards are cached (default: the reader's)")
    ap.add_argument("--json", dest="json_out", default=None, help="write the report (counts only) here")
    ap.add_argument("--s3-endpoint-url", default=None, help="S3-compatible endpoint (else AWS_ENDPOINT_URL)")
    ap.add_argument("--anonymous", action="store_true", help="unsigned S3 requests")
    ap.add_argument("--workers", type=int, default=2, help="shards audited at once (threads, or local Ray CPUs)")
    ap.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                    help="run the shard tasks on Ray: a new local instance, or the cluster at ADDRESS")
    args = ap.parse_args(argv)
    eng = engine.Engine(kind="ray" if args.ray else "local", num_cpus=max(1, args.workers),
                        address=None if args.ray in (None, "local") else args.ray)
    try:
        spec = load_spec(args.config)
        demo_corpus.ensure_for_spec(spec)  # the embedded demo's eval task is generated with its corpus
        kw = {}
        if args.s3_endpoint_url:
            kw["s3_endpoint_url"] = args.s3_endpoint_url
        if args.anonymous:
            kw["anonymous"] = True
        with engine.ray_session(eng):
            report = pa_.audit_published(args.location, spec, args.cache_dir, eng=eng, **kw)
        if args.json_out:
            Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json_out).write_text(pa_.dumps(report) + "\n")
        print(pa_.format_report(report))
    except (MixConfigError, TestSplitRefused, EvalDataError, ManifestError, ReaderError,
            pa_.PublishedAuditError, OSError) as e:  # these messages name files and fields, never cells
        print(f"audit_published: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:  # noqa: BLE001 - a crash must not exit 1 ("overlap found") nor print data
        print(f"audit_published: the audit could not run: unexpected {type(e).__name__} at {_where(e)} "
              "(its message is not shown: it may quote eval or document text)", file=sys.stderr)
        return EXIT_ERROR
    return pa_.exit_code(report)


if __name__ == "__main__":
    sys.exit(main())
