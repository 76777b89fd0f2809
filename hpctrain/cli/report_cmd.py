"""`hpctrain report JOBID|RUN|SWEEP [-o DIR]`: figures (PNG) and a one-page summary (report.md) of a run.

Works on a job still running (a snapshot of what its run directory holds now) and on one that ended;
never imports torch; matplotlib is imported only here, and only to draw.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from hpctrain.errors import HpctrainError, SpecError

if TYPE_CHECKING:
    from hpctrain.report.build import Written
    from hpctrain.rundir import RunDir
    from hpctrain.runs.index import Index, Run


class NothingToReport(HpctrainError):
    """The key names neither a tracked job or sweep nor a run directory."""

    exit_code = 1


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
    from hpctrain.cli.view.report import show

    show(_report(args.target, args.out))
    return 0


def _report(key: str, out: Path | None) -> Written:
    from hpctrain.report.sweep import report_sweep
    from hpctrain.rundir import RunDir, Unreadable
    from hpctrain.runs.index import Index, check_key
    from hpctrain.sweep import plan as sweep

    path = Path(check_key(key))
    if key not in (".", "..") and path.is_dir():
        record = sweep.load(path)
        if isinstance(record, sweep.SweepRecord):
            return report_sweep(path, record, out)
        if _looks_like_run(RunDir(path)):
            return _report_dir(RunDir(path), out, title=path.name, state="", job_id="", ended=True)
    index = Index()
    found = sweep.find(index, key)
    if found is not None:
        root, record = found
        if isinstance(record, Unreadable):
            raise SpecError(str(record))
        return report_sweep(root, record, out)
    runs, _ = index.find([key])
    if not runs:
        raise NothingToReport(f"{key} is neither a job, run or sweep tracked by hpctrain nor a run directory")
    tracked = _refreshed(index, runs[0])
    from hpctrain.runs.poll import ended

    return _report_dir(
        RunDir(tracked.run_dir),
        out,
        title=tracked.name,
        state=tracked.state,
        job_id=tracked.job_id or "",
        ended=ended(tracked),
        run_id=tracked.run_id,
    )


def _looks_like_run(run: RunDir) -> bool:
    from hpctrain import rundir

    return bool({rundir.METRICS, rundir.SPEC, rundir.RESULT} & run.names) or bool(run.elements())


def _refreshed(index: Index, tracked: Run) -> Run:
    """The run with its state polled now (one scheduler query); the recorded state if that fails."""
    import msgspec

    from hpctrain.runs.poll import refresh

    try:
        (polled,) = refresh(index, [tracked])
    except HpctrainError as err:
        print(f"hpctrain: warning: state not polled ({err}); showing the recorded one", file=sys.stderr)
        return tracked
    if polled.info is None:
        return tracked
    return msgspec.structs.replace(tracked, state=polled.info.state.value)


def _report_dir(run: RunDir, out: Path | None, **about: str | bool) -> Written:
    """One run, or the elements of an array job (trials without a sweep) when the root has no metrics."""
    from hpctrain import rundir
    from hpctrain.report.build import FOLDER, Trial, report_run, report_trials
    from hpctrain.report.summary import Subject

    subject = Subject(root=str(run.root), **about)  # type: ignore[arg-type]
    folder = out or run.root / FOLDER
    elements = run.elements()
    if elements and rundir.METRICS not in run.names:
        trials = [Trial(f"element {i}", run.element(i)) for i in elements]
        return report_trials(trials, subject, folder)
    return report_run(run, subject, folder)
