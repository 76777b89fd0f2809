"""A sweep's report: every trial's curves, the metric against each swept parameter, and a page of trials.

`hpctrain report SWEEP` and `hpctrain sweep report SWEEP` both write it through `report_sweep`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hpctrain.report.build import FOLDER, Trial, Written, report_trials
from hpctrain.report.summary import Subject
from hpctrain.sweep.grid import Value, describe
from hpctrain.sweep.plan import trial_dir
from hpctrain.sweep.status import survey
from hpctrain.tracking.poll import TERMINAL_NAMES

if TYPE_CHECKING:
    from hpctrain.rundir import SweepRecord


def report_sweep(root: Path, record: SweepRecord, out: Path | None = None) -> Written:
    """The report of the sweep whose run directory is `root`, into `out` (default: report/ in it).

    An `out` that names a .png file is where the metric-per-parameter figure goes; the rest of the
    report is written beside it (`sweep report --out FILE.png` of earlier versions keeps working).
    """
    from hpctrain.report.trials import parameters_figure

    figure = out if out is not None and out.suffix.lower() == ".png" else None
    folder = figure.parent if figure is not None else (out or root / FOLDER)
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
        folder,
        best=best,
        extra=lambda default: parameters_figure(status, figure or default),
        metric_name=status.metric,
    )
