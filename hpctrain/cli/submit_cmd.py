"""`hpctrain submit`: validate, render, record and submit a job; `--wait` follows it to the end."""

from __future__ import annotations

import argparse

from hpctrain.cli.view.arguments import add_job_arguments
from hpctrain.cli.view.table import print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_job_arguments(parser)
    parser.add_argument(
        "--wait", action="store_true", help="Wait until the job ends; exit 0 only if it completed."
    )
    parser.add_argument("--json", action="store_true", help="Print the submission as JSON.")


def run(args: argparse.Namespace) -> int:
    from hpctrain.errors import BackendError
    from hpctrain.launch.submission import submit

    done = submit(args.job, args.site, args.overrides, args.backend, check=args.check)
    run_ = done.run
    if done.error:
        raise BackendError(f"{done.error} (the script and resolved spec are kept in {run_.run_dir})")
    if args.json:
        print_json(
            {
                "job_id": run_.job_id,
                "run_id": run_.run_id,
                "run_dir": str(run_.run_dir),
                "backend": run_.backend,
            }
        )
    else:
        print(f"Submitted job {run_.job_id} ({run_.name}, run {run_.run_id})")
        print(f"  run directory: {run_.run_dir}")
    if not args.wait:
        return 0
    from hpctrain.cli.view.status import wait_for

    final = wait_for([run_], quiet=args.json)
    return 0 if final and all(s.state == "COMPLETED" for s in final) else 1
