"""`hpctrain list`: every job this user submitted through hpctrain, newest first (no scheduler query)."""

from __future__ import annotations

import argparse
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--limit", type=int, default=None, help="Show at most this many.")
    parser.add_argument("--json", action="store_true", help="Machine-readable output.")


def run(args: argparse.Namespace) -> int:
    import msgspec

    from hpctrain.cli.common import print_json, table
    from hpctrain.records import Index

    runs = Index().runs(limit=args.limit)
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
