"""Several runs on one figure: the trials of a sweep (or the elements of an array job), one colour each,
and a sweep's ranking metric against each swept parameter."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hpctrain.report.columns import by_step
from hpctrain.report.plotting import colormap, empty_panel, plain, save, sheet
from hpctrain.report.series import RunSeries, finite

if TYPE_CHECKING:
    from hpctrain.sweep.grid import Value
    from hpctrain.sweep.status import SweepStatus

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


def parameters_figure(sweep: SweepStatus, path: Path) -> Path:
    """One panel per swept parameter: every trial with a metric is a point, the best one is ringed."""
    done = [t for t in sweep.trials if finite(t.metric) is not None]
    params = list(sweep.trials[0].params) if sweep.trials else []
    panels = max(1, len(params))
    with sheet(4.2 * panels, 3.6, 1, panels) as drawing:
        for axis, param in zip(drawing.axes[0], params, strict=False):
            values = [t.params[param] for t in done]
            numeric = _numeric(values)
            labels = sorted({str(v) for v in values})

            def where(value: Value, numeric: bool = numeric, labels: list[str] = labels) -> float:
                return float(value) if numeric else float(labels.index(str(value)))  # type: ignore[arg-type]

            if numeric:
                positive = [v for v in values if v > 0]  # type: ignore[operator]
                if positive and len(positive) == len(values) and max(positive) / min(positive) >= 10:
                    axis.set_xscale("log")
            else:
                axis.set_xticks(range(len(labels)), [plain(label) for label in labels])
            axis.scatter([where(v) for v in values], [t.metric for t in done], color="tab:blue", alpha=0.8)
            if sweep.best is not None and sweep.best in done:
                best = where(sweep.best.params[param])
                axis.scatter([best], [sweep.best.metric], s=160, facecolors="none", edgecolors="tab:red")
            axis.set_xlabel(plain(param))
            axis.set_ylabel(plain(sweep.metric))
        better = "lower" if sweep.mode == "min" else "higher"
        drawing.fig.suptitle(
            f"sweep {plain(sweep.name)}: {len(done)}/{len(sweep.trials)} trials with {plain(sweep.metric)} "
            f"({better} is better; best ringed)",
            fontsize=10,
        )
        return save(drawing.fig, path)


def _numeric(values: list[Value]) -> bool:
    """Whether every value can be placed on a numeric axis; otherwise each is a category (a value
    beyond ±MAX_MAGNITUDE, NaN or infinity is then drawn as its own label)."""
    return all(finite(v) is not None for v in values)
