"""Curves of one run: loss and evaluation metrics against step and wall time, and throughput."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hpctrain.report import plotting
from hpctrain.report.columns import Points, column, split
from hpctrain.report.plotting import Margins, empty_panel, mark_events, save, time_scale
from hpctrain.report.series import RunSeries, finite


def _span(series: RunSeries, start: float | None) -> float:
    if start is None:
        return 0.0
    last = [finite(g[-1].time) for g in (series.train, series.evals, series.events) if g]
    found = [t - start for t in last if t is not None]
    return max(found, default=0.0)


def _xs(series: RunSeries, kind: str, on: str, start: float | None, divisor: float) -> np.ndarray:
    """The x of every line of `kind`: its step (`on` "step"), or its wall time since `start`."""
    if on == "step":
        return series.column(kind, "step")
    times = series.column(kind, "time")
    if start is None:
        return np.full_like(times, np.nan)
    with np.errstate(all="ignore"):
        return (times - start) / divisor


def _points(series: RunSeries, kind: str, name: str, on: str, start: float | None, divisor: float) -> Points:
    return Points.of(_xs(series, kind, on, start, divisor), series.column(kind, name))


def _curve(
    axis: Any, series: RunSeries, which: str, name: str, on: str, start: float | None, divisor: float
) -> bool:
    """`name` of the run's train or eval lines (`which`), one line per segment between restarts (one
    colour, one legend label)."""
    kind = "train" if which == "train" else "evals"
    style: dict[str, Any] = (
        {"color": "tab:blue", "linewidth": 1.2}
        if which == "train"
        else {"color": "tab:red", "marker": "o", "markersize": 4, "linewidth": 1}
    )
    steps, times = series.column(kind, "step"), series.column(kind, "time")
    xs, ys = _xs(series, kind, on, start, divisor), series.column(kind, name)
    drawn = False
    for first, end in split(steps, times, column(series.restarts, "time")):
        points = Points.of(xs[first:end], ys[first:end])
        if not points:
            continue
        axis.plot(points.x, points.y, label=None if drawn else f"{which} {name}", **style)
        drawn = True
    return drawn


def loss_figure(series: RunSeries, path: Path, title: str) -> Path | None:
    """Loss (train and eval) and eval accuracy, against step (left) and wall time (right)."""
    has_accuracy = np.isfinite(series.column("evals", "accuracy")).any()
    if not series.train and not series.evals:
        return None
    start = series.start_time
    divisor, time_label = time_scale(_span(series, start))
    rows = 2 if has_accuracy else 1
    with plotting.sheet(11, 0.6 + 3.4 * rows, rows, 2, Margins(top=0.45, hspace=0.5)) as sheet:
        axes = sheet.axes
        for col, on in enumerate(("step", "time")):
            axis = axes[0][col]
            drawn = _curve(axis, series, "train", "loss", on, start, divisor)
            drawn = _curve(axis, series, "eval", "loss", on, start, divisor) or drawn
            if not drawn:
                empty_panel(axis, "no loss with a " + ("step" if on == "step" else "time"))
                continue
            axis.set_ylabel("loss")
            if rows == 2:
                _curve(axes[1][col], series, "eval", "accuracy", on, start, divisor)
                axes[1][col].set_ylabel("eval accuracy")
            for panel in (axes[r][col] for r in range(rows)):
                mark_events(panel, series, on, start, divisor)
                panel.set_xlabel("step" if on == "step" else time_label)
        sheet.legend([axes[0][0], axes[0][1]])
        sheet.fig.suptitle(f"{title}: loss and evaluation (restarts, checkpoints and failures marked)")
        return save(sheet.fig, path)


def _rate(series: RunSeries) -> tuple[str, str]:
    """The throughput field to draw: tokens/s for a language model, else samples/s."""
    if np.isfinite(series.column("train", "tokens_per_s")).any():
        return "tokens_per_s", "tokens/s"
    return "samples_per_s", "samples/s"


# Panels against step: (y label, title, colour).
STEP_PANELS = {
    "step time": ("seconds per step", "step time (mean over each log interval)", "tab:brown"),
    "MFU": ("model FLOPs utilisation", "MFU", "tab:green"),
    "data": ("share of the time", "data-loader wait (rank 0: fetching batches)", "tab:purple"),
}


def throughput_figure(series: RunSeries, path: Path, title: str) -> Path | None:
    """Throughput against wall time, step time against step, and MFU when the GPU's peak is known."""
    name, unit = _rate(series)
    start = series.start_time
    divisor, time_label = time_scale(_span(series, start))
    rate = _points(series, "train", name, "time", start, divisor)
    step_time, mfu, data_share = (
        _points(series, "train", field, "step", start, divisor)
        for field in ("step_time_s", "mfu", "data_share")
    )
    panels = [
        p for p in ((rate, "rate"), (step_time, "step time"), (mfu, "MFU"), (data_share, "data")) if p[0]
    ]
    if not panels:
        return None
    with plotting.sheet(5.2 * len(panels), 4.0, 1, len(panels)) as sheet:
        for axis, (points, what) in zip(sheet.axes[0], panels, strict=True):
            xs, ys = points.x, points.y
            if what == "rate":
                axis.plot(xs, ys, color="tab:green", linewidth=1.2)
                axis.set_xlabel(time_label)
                axis.set_ylabel(unit)
                axis.set_title(f"throughput ({unit}, whole job)")
                mark_events(axis, series, "time", start, divisor)
            else:
                label, heading, color = STEP_PANELS[what]
                axis.plot(xs, ys, color=color, linewidth=1.2)
                axis.set_xlabel("step")
                axis.set_ylabel(label)
                axis.set_title(heading)
                mark_events(axis, series, "step")
            axis.set_ylim(bottom=0)
        sheet.legend(list(sheet.axes[0]))
        sheet.fig.suptitle(f"{title}: throughput")
        return save(sheet.fig, path)
