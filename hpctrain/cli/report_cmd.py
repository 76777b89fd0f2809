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
    from hpctrain.sweep.plan import SweepRecord


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
        help="Folder for the figures and report.md (default: report/ in the run directory).",
    )


def run(args: argparse.Namespace) -> int:
    written = _report(args.target, args.out)
    for note in written.notes:
        print(f"hpctrain: warning: {note}", file=sys.stderr)
    print(f"report: {written.summary}")
    for path in written.figures:
        print(f"figure: {path}")
    return 0


def _report(key: str, out: Path | None) -> Written:
    from hpctrain.rundir import RunDir, Unreadable
    from hpctrain.runs.index import Index
    from hpctrain.sweep import plan as sweep

    path = Path(key)
    if key not in (".", "..") and path.is_dir():
        record = sweep.load(path)
        if isinstance(record, sweep.SweepRecord):
            return _report_sweep(path, record, out)
        if _looks_like_run(RunDir(path)):
            return _report_dir(RunDir(path), out, title=path.name, state="", job_id="", ended=True)
    index = Index()
    found = sweep.find(index, key)
    if found is not None:
        root, record = found
        if isinstance(record, Unreadable):
            raise SpecError(str(record))
        return _report_sweep(root, record, out)
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
    from hpctrain.report.build import Trial, report_run, report_trials
    from hpctrain.report.summary import Subject

    subject = Subject(root=str(run.root), **about)  # type: ignore[arg-type]
    folder = out or run.root / "report"
    elements = run.elements()
    if elements and rundir.METRICS not in run.names:
        trials = [Trial(f"element {i}", run.element(i)) for i in elements]
        return report_trials(trials, subject, folder)
    return report_run(run, subject, folder)


def _report_sweep(root: Path, record: SweepRecord, out: Path | None) -> Written:
    from hpctrain.cli.sweep_report import plot
    from hpctrain.report.build import Trial, report_trials
    from hpctrain.report.summary import Subject
    from hpctrain.runs.poll import TERMINAL_NAMES
    from hpctrain.sweep.grid import Value, describe
    from hpctrain.sweep.plan import trial_dir
    from hpctrain.sweep.status import survey

    (status,) = survey([(root, record)])

    def label(index: int, params: dict[str, Value]) -> str:
        return f"trial {index}: " + describe({k.removeprefix("train."): v for k, v in params.items()})

    trials = [
        Trial(label(t.index, t.params), trial_dir(root, t.index), t.state, t.metric, describe(t.params))
        for t in status.trials
    ]
    best = label(status.best.index, status.best.params) if status.best is not None else None
    subject = Subject(
        title=f"sweep {status.name}",
        run_id=status.sweep_id,
        job_id=", ".join(status.arrays),
        state=", ".join(f"{state} {n}" for state, n in status.counts.items()),
        ended=all(t.state in TERMINAL_NAMES for t in status.trials),
        root=str(root),
    )
    return report_trials(
        trials,
        subject,
        out or root / "report",
        best=best,
        extra=lambda path: plot(status, path),
        metric_name=status.metric,
    )
