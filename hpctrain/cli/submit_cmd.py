"""`hpctrain submit`: validate, render, record and submit a job; `--wait` follows it to the end."""

from __future__ import annotations

import argparse

from hpctrain.cli.view.arguments import add_job_arguments
from hpctrain.cli.view.table import print_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from hpctrain import api

    add_job_arguments(parser)
    parser.add_argument(
        "--wait", action="store_true", help="Wait until the job ends; exit 0 only if it completed."
    )
    parser.add_argument("--json", action="store_true", help="Print the submission as JSON.")
    parser.add_argument(
        "--after",
        action="append",
        default=[],
        metavar="JOBID",
        help="Start only after this job (a job id or run id) completed (repeatable; see --after-kind).",
    )
    parser.add_argument(
        "--from",
        dest="from_run",
        metavar="RUN",
        help="Start from this earlier run's last checkpoint (job id or run id): the same model "
        "(train.entrypoint, train.options), trained on from its step to train.steps.",
    )
    parser.add_argument(
        "--after-kind",
        choices=api.AFTER_KINDS,
        default="afterok",
        help="With --after: start once those jobs completed (afterok), ended (afterany) "
        "or failed (afternotok).",
    )


def run(args: argparse.Namespace) -> int:
    from hpctrain import api

    # A job id hpctrain does not track is passed on as it is: Slurm knows it, or refuses.
    tracked, untracked = api.find_runs(args.after) if args.after else ([], [])
    after = [*tracked, *untracked]
    run_ = api.submit(
        args.job,
        args.site,
        args.overrides,
        args.backend,
        after,
        args.after_kind,
        check=args.check,
        from_run=args.from_run,
    )
    if args.json:
        print_json(
            {
                "job_id": run_.job_id,
                "run_id": run_.run_id,
                "run_dir": str(run_.run_dir),
                "backend": run_.record.backend,
                **({"from": run_.started_from} if args.from_run else {}),
            }
        )
    else:
        print(f"Submitted job {run_.job_id} ({run_.name}, run {run_.run_id})")
        print(f"  run directory: {run_.run_dir}")
        if args.from_run:
            print(f"  starts from: {run_.started_from}")
    if not args.wait:
        return 0
    from hpctrain.cli.view.status import wait_for

    final = wait_for([run_], quiet=args.json)
    return 0 if final and all(s.state == "COMPLETED" for s in final) else 1
