"""`hpctrain status`: state, progress and failures of tracked jobs, one scheduler query per poll."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from hpctrain.cli.view.status import MIN_INTERVAL_S

    parser.add_argument("jobs", nargs="*", metavar="JOBID", help="Job ids or run ids (default: recent jobs).")
    parser.add_argument("--all", action="store_true", help="Every tracked job, not only the last day's.")
    parser.add_argument("--watch", action="store_true", help="Poll until every shown job has ended.")
    parser.add_argument(
        "--interval",
        type=float,
        default=10.0,
        help=f"Seconds between polls with --watch (at least {MIN_INTERVAL_S:.0f}).",
    )
    parser.add_argument("--json", action="store_true", help="Machine-readable output.")
    from hpctrain.cli.sweep_cmd import add_status_arguments

    add_status_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import msgspec

    from hpctrain import api
    from hpctrain.cli.view.status import show, wait_for

    if args.jobs:  # `hpctrain status SWEEP`: a sweep's own view (one line per sweep, --trials)
        from hpctrain.cli.sweep_cmd import status_hook

        if (code := status_hook(args)) is not None:
            return code

    runs = api.list_runs(args.jobs, everything=args.all)
    detail = bool(args.jobs)
    if args.watch:
        statuses = wait_for(runs, quiet=args.json, interval=args.interval, detail=detail)
    else:
        # The list of many jobs, as a table or JSON, needs only what result.json holds of ended ones
        # that did not fail (the goodput split, read from the whole metrics file, was most of the
        # JSON list's time); named jobs are read whole, and their JSON carries the goodput split.
        statuses = api.statuses(runs, brief=not detail, goodput=args.json and detail)
    if args.json:  # msgspec writes the same JSON as print_json, 20x faster: 10,000 runs take 30 ms
        sys.stdout.flush()
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(statuses), indent=2) + b"\n")
    elif not args.watch:
        show(statuses, detail)
    if args.watch:
        return 0
    return 1 if args.jobs and any(s.state == "SUBMIT_FAILED" for s in statuses) else 0
