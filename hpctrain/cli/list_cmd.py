"""`hpctrain list`: every job this user submitted through hpctrain, newest first (no scheduler query)."""

from __future__ import annotations

import argparse
import sys
import time

# The newest runs only, unless asked: with 100,000 recorded runs a full listing reads the whole
# archive, while the newest 100 are its last lines.
DEFAULT_LIMIT = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-n",
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        help=f"Show at most this many (default {DEFAULT_LIMIT}).",
    )
    parser.add_argument("--all", action="store_true", help="Show every run, however many.")
    parser.add_argument("--json", action="store_true", help="Machine-readable output.")


def run(args: argparse.Namespace) -> int:
    import msgspec

    from hpctrain import api
    from hpctrain.cli.view.table import print_json, table
    from hpctrain.errors import InputError

    if args.limit < 0 and not args.all:
        raise InputError(f"--limit: {args.limit} is below 0")
    limit = None if args.all else args.limit
    # Run directories whose submit was killed before recording them are listed as never submitted
    # (without --all: those made within the last hours, the newest that are listed).
    asked = None if limit is None else limit + 1  # one more tells whether there are more
    runs = [handle.record for handle in api.list_runs(everything=True, limit=asked)]
    if limit is not None and len(runs) > limit:
        runs = runs[:limit]
        print(f"hpctrain: the newest {limit} runs; `hpctrain list --all` shows every one", file=sys.stderr)
    if args.json:
        print_json([{**msgspec.structs.asdict(r), "run_dir": str(r.run_dir)} for r in runs])
        return 0
    rows = [
        [
            str(r.job_id or "-"),
            r.name,
            r.state,
            r.site,
            r.backend,
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.submitted_at)),
            r.run_id,
        ]
        for r in runs
    ]
    print(table(rows, ["JOBID", "NAME", "STATE", "SITE", "BACKEND", "SUBMITTED", "RUN"]))
    return 0
