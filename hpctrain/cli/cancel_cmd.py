"""`hpctrain cancel`: cancel tracked jobs, one scheduler call per backend."""

from __future__ import annotations

import argparse
from collections import defaultdict


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("jobs", nargs="+", metavar="JOBID", help="Job ids or run ids.")


def run(args: argparse.Namespace) -> int:
    from hpctrain.cli.sweep_cmd import cancel_hook

    if (code := cancel_hook(args)) is not None:  # every key names a sweep: cancel all its arrays
        return code
    from hpctrain.errors import HpctrainError
    from hpctrain.runs.index import Index
    from hpctrain.runs.poll import CANCEL_REQUESTED
    from hpctrain.scheduler import select_backend

    index = Index()
    runs, missing = index.find(args.jobs)
    by_backend = defaultdict(list)
    for run_ in runs:
        if run_.job_id:
            by_backend[run_.backend].append(run_)
    for backend_name, group in by_backend.items():
        select_backend(backend_name).cancel([r.job_id for r in group])
        index.update_states((r, r.state, CANCEL_REQUESTED) for r in group)
        for run_ in group:
            print(f"Cancelled job {run_.job_id} ({run_.name})")
    if missing:
        # After cancelling the others: one unknown id must not spare the jobs that were named.
        raise HpctrainError(f"not tracked by hpctrain: {', '.join(missing)} (see `hpctrain list`)")
    return 0
