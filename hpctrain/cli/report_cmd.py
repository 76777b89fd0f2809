"""`hpctrain report JOBID|RUN|SWEEP [-o DIR]`: figures (PNG) and a one-page summary (report.md) of a run.

Works on a job still running (a snapshot of what its run directory holds now) and on one that ended;
never imports torch; matplotlib is imported only here, and only to draw.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        metavar="JOBID|RUN|SWEEP",
        help="A job id, a run id (or its unique prefix), a sweep id, or the path of a run directory.",
    )
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        default=None,
        help="Folder for the figures and report.md (default: report/ in the run directory); for a sweep, "
        "a FILE.png names its metric-per-parameter figure and the rest goes beside it.",
    )


def run(args: argparse.Namespace) -> int:
    from hpctrain import api
    from hpctrain.cli.view.report import show

    show(api.write_report(args.target, args.out))
    return 0
