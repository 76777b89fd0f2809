"""A report from start to end: read the run(s), draw each figure that has data, write the summary page."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from hpctrain.report import summary
from hpctrain.report.parallel import Job, draw_all
from hpctrain.report.series import RunSeries, read_run
from hpctrain.report.summary import Page, Subject
from hpctrain.rundir import RunDir, goodput
from hpctrain.rundir.io import private_like

SUMMARY = "report.md"
# Where a report goes unless told: this folder in the run directory.
FOLDER = "report"
Figure = Callable[[RunSeries, Path, str], "Path | None"]


@dataclass
class Written:
    summary: Path
    figures: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    time_split: list[str] = field(default_factory=list)
    """Where the run's time went, as plain-text lines (printed under the report's path)."""


def matplotlib_missing() -> str | None:
    """Why no figure can be drawn (matplotlib not installed), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install 'hpctrain[report]'): the summary has no figures"
    return None


def _can_draw(page: Page, notes: list[str]) -> bool:
    """Whether matplotlib is there; if not, the page and the command's warnings say so."""
    missing = matplotlib_missing()
    if missing:
        notes.append(missing)
        page.missing.append(missing)
    return missing is None


class RunFigure(NamedTuple):
    stem: str
    """The file: report-STEM.png."""
    heading: str
    draw: Figure
    absent: str
    """Why it may not be drawn."""
    weight: float
    """Its drawing time relative to the others' (measured on the 100,000-line run of bench_report.py)."""


def _run_figures() -> list[RunFigure]:
    """The figures of one run, in page order; imported only when drawing."""
    from hpctrain.report.curves import loss_figure, throughput_figure
    from hpctrain.report.ps import ps_figure
    from hpctrain.report.ranks import heatmap_figure, memory_figure

    return [
        RunFigure(
            "loss", "Loss and evaluation", loss_figure, "no train or eval lines in metrics.jsonl yet", 7
        ),
        RunFigure("throughput", "Throughput", throughput_figure, "no throughput in the train lines yet", 5.5),
        RunFigure(
            "ranks",
            "Per-rank step time",
            heatmap_figure,
            "no per-rank times (`ranks` lines) in metrics.jsonl: the runtime that wrote it records none",
            6.5,
        ),
        RunFigure(
            "memory",
            "Memory per rank",
            memory_figure,
            "no memory lines (written after the first optimizer step)",
            4,
        ),
        RunFigure("ps", "Parameter server", ps_figure, "not a parameter-server run", 1),
    ]


def _draw(page: Page, out: Path, figures: list[RunFigure], series: RunSeries) -> list[Path]:
    jobs = [
        Job(
            f.stem,
            functools.partial(f.draw, series, out / f"report-{f.stem}.png", page.subject.title),
            f.weight,
        )
        for f in figures
    ]
    drawn = []
    for figure, path in zip(figures, draw_all(jobs), strict=True):
        if path is None:
            if figure.stem != "ps" or series.workers:
                page.missing.append(f"{figure.heading}: {figure.absent}")
            continue
        page.figures.append((figure.heading, path.name))
        drawn.append(path)
    return drawn


def report_run(run: RunDir, subject: Subject, out: Path) -> Written:
    """Figures and report.md of one run directory into `out`, as private as the run directory."""
    with private_like(run.root):
        return _report_run(run, subject, out)


def _report_run(run: RunDir, subject: Subject, out: Path) -> Written:
    series = read_run(run)
    page = Page(subject)
    notes: list[str] = []
    figures = _draw(page, out, _run_figures(), series) if _can_draw(page, notes) else []
    result = run.read_result()  # the key numbers after the figures: a forked child need not wait for them
    split = goodput.split(run, now=goodput.now_if_running(subject.ended))
    page.rows = summary.run_rows(series, result) + summary.goodput_row(split) + summary.ps_rows(result)
    failures = run.read_failures()
    page.sections = [
        ("Where the time went", summary.goodput_lines(split)),
        ("Timeline", summary.timeline(series)),
        ("Failures", summary.failure_lines(failures)),
    ]
    page.problems = series.problems.lines()
    if series.lines == 0:
        page.problems.insert(0, "metrics.jsonl has no lines yet (or is absent)")
    written = Written(summary.write(page, out / SUMMARY), figures, notes)
    written.time_split = goodput.table(split) if split is not None else []
    return written


@dataclass
class Trial:
    label: str
    run: RunDir
    state: str = ""
    metric: float | None = None
    params: str = ""


def report_trials(
    trials: list[Trial],
    subject: Subject,
    out: Path,
    best: str | None = None,
    extra: Callable[[Path], Path] | None = None,
    metric_name: str = "metric",
) -> Written:
    """One figure of every trial's curves (and `extra`, the sweep's own metric-per-parameter plot),
    as private as the run directory of the subject (the sweep's, the array job's)."""
    with private_like(Path(subject.root) if subject.root else None):
        return _report_trials(trials, subject, out, best, extra, metric_name)


def _report_trials(
    trials: list[Trial],
    subject: Subject,
    out: Path,
    best: str | None,
    extra: Callable[[Path], Path] | None,
    metric_name: str,
) -> Written:
    read = [(t.label, read_run(t.run)) for t in trials]
    page = Page(subject)
    notes: list[str] = []
    figures: list[Path] = []
    if _can_draw(page, notes):
        from hpctrain.report.trials import trials_figure

        path = trials_figure(read, out / "report-trials.png", subject.title, best)
        if path is None:
            page.missing.append("Trials: no trial has train or eval lines yet")
        else:
            page.figures.append(("Loss of every trial", path.name))
            figures.append(path)
        if extra is not None:
            path = extra(out / "report-sweep.png")
            page.figures.append((f"{metric_name} against each swept parameter", path.name))
            figures.append(path)
    rows = []
    for trial, (_, series) in zip(trials, read, strict=True):
        last = series.train[-1] if series.train else None
        step = f"{last.step}/{last.steps or '?'}" if last else "-"
        cells = [
            summary.md(trial.label.split(":")[0], 40),
            summary.md(trial.state, 20),
            summary.number(trial.metric),
        ]
        cells += [step, summary.md(trial.params, 120)]
        rows.append("| " + " | ".join(cells) + " |")
        page.problems += [f"{trial.label}: {p}" for p in series.problems.lines()]
    header = [
        f"| trial | state | {summary.md(metric_name, 40)} | step | parameters |",
        "|---|---|---|---|---|",
    ]
    page.sections = [("Trials", header + rows)]
    return Written(summary.write(page, out / SUMMARY), figures, notes)
