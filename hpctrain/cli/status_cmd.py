"""`hpctrain status`: state, progress and failures of tracked jobs, one scheduler query per poll."""

from __future__ import annotations

import argparse


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
    from hpctrain.cli.view.table import print_json

    if args.jobs:  # `hpctrain status SWEEP`: a sweep's own view (one line per sweep, --trials)
        from hpctrain.cli.sweep_cmd import status_hook

        if (code := status_hook(args)) is not None:
            return code

    runs = api.list_runs(args.jobs, everything=args.all)
    detail = bool(args.jobs)
    if args.watch:
        statuses = wait_for(runs, quiet=args.json, interval=args.interval, detail=detail)
    else:
        # The table of many jobs needs only what result.json holds of ended ones; JSON and detail read
        # all but the goodput split, which only JSON shows (`hpctrain report` draws it).
        statuses = api.statuses(runs, brief=not args.json and not detail, goodput=args.json)
    if args.json:
        print_json(msgspec.to_builtins(statuses))
    elif not args.watch:
        show(statuses, detail)
    if args.watch:
        return 0
    return 1 if args.jobs and any(s.state == "SUBMIT_FAILED" for s in statuses) else 0
