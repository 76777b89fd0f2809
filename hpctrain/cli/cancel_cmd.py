"""`hpctrain cancel`: cancel tracked jobs, one scheduler call per backend."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("jobs", nargs="+", metavar="JOBID", help="Job ids or run ids.")


def run(args: argparse.Namespace) -> int:
    from hpctrain.cli.sweep_cmd import cancel_hook

    if (code := cancel_hook(args)) is not None:  # every key names a sweep: cancel all its arrays
        return code
    from hpctrain import api
    from hpctrain.errors import HpctrainError

    runs, missing = api.find_runs(args.jobs)
    asked = api.cancel(runs)
    for run_ in runs:
        if run_ in asked:
            print(f"Cancelled job {run_.job_id} ({run_.name})")
        elif run_.job_id:
            # Nothing to do is no failure: the run is not running, which is what cancel asks for.
            print(f"job {run_.job_id} ({run_.name}) already ended ({run_.record.state}): nothing to cancel")
    if missing:
        # After cancelling the others: one unknown id must not spare the jobs that were named.
        raise HpctrainError(f"not tracked by hpctrain: {', '.join(missing)} (see `hpctrain list`)")
    return 0
