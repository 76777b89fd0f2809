"""`hpctrain render`: print the batch script a job would submit; nothing is submitted or recorded."""

from __future__ import annotations

import argparse
import sys

from hpctrain.cli.view.arguments import add_job_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_job_arguments(parser)
    parser.add_argument("--spec", action="store_true", help="Print the resolved spec (JSON) instead.")


def run(args: argparse.Namespace) -> int:
    from hpctrain import api

    request = api.render(args.job, args.site, args.overrides, args.backend, check=args.check)
    if args.spec:
        sys.stdout.write(api.spec_json(request.resolved) + "\n")
    else:
        sys.stdout.write(request.script)
    return 0
