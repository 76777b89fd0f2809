"""Several runs on one figure: the trials of a sweep (or the elements of an array job), one colour each."""

from __future__ import annotations

from pathlib import Path

from hpctrain.report.columns import by_step
from hpctrain.report.plotting import colormap, empty_panel, plain, save, sheet
from hpctrain.report.series import RunSeries

# Trials drawn with a legend entry; the others are drawn in grey, unlabelled.
LABELLED = 12


def trials_figure(
    trials: list[tuple[str, RunSeries]], path: Path, title: str, best: str | None = None
) -> Path | None:
    """Train loss (left) and eval loss (right) of every trial against step; `best` (a label) is drawn
    thick and on top, so the winner is found at a glance among many."""
    if not any(s.train or s.evals for _, s in trials):
        return None
    with sheet(12, 4.2, 1, 2) as drawing:
        train, evals = drawing.axes[0]
        colours = colormap("tab10")
        for n, (label, series) in enumerate(trials):
            winner = label == best
            named = winner or n < LABELLED
            style = {
                "color": "black" if winner else (colours(n % 10) if named else "0.7"),
                "linewidth": 2.2 if winner else 1.0,
                "zorder": 3 if winner else 2,
                "label": plain(label + (" (best)" if winner else ""), 60) if named else None,
            }
            points = by_step(series.train, "loss")
            if points:
                train.plot(points.x, points.y, **style)
            points = by_step(series.evals, "loss")
            if points:
                evals.plot(points.x, points.y, "o-", markersize=3, **style)
        for axis, what in ((train, "train loss"), (evals, "eval loss")):
            axis.set_xlabel("step")
            axis.set_ylabel(what)
            axis.set_title(what + " of each trial")
            if not axis.lines:
                empty_panel(axis, f"no {what} yet")
        drawing.legend([evals if evals.lines else train], columns=3)
        unlabelled = max(0, len(trials) - LABELLED)
        more = f" ({unlabelled} more in grey)" if unlabelled else ""
        drawing.fig.suptitle(f"{title}: {len(trials)} trials{more}")
        return save(drawing.fig, path)
