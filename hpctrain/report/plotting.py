"""What every figure of a report shares: matplotlib (imported here, lazily, Agg), labels, event marks.

Only `hpctrain report` imports this module, so no other verb pays for matplotlib. Text that comes
from a run directory (event names, node names, parameters) is drawn as plain text: mathtext is off,
because a `$` in a hostile file would otherwise make matplotlib raise while it draws.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hpctrain.report.columns import column, seconds
from hpctrain.report.series import RunSeries

STYLE = {
    "text.parse_math": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "font.size": 9,
    "axes.titlesize": 10,
    "legend.fontsize": 8,
    "legend.framealpha": 0.85,
}
DPI = 100
# Event lines of one kind drawn at most (by a stride): 2,000 checkpoint lines in a 500-pixel panel
# are grey noise, and cost matplotlib seconds.
MAX_MARKS = 150

# Events drawn as vertical lines: colour, line style, legend label.
MARKS: dict[str, tuple[str, str, str]] = {
    "checkpoint": ("tab:gray", ":", "checkpoint"),
    "resumed": ("tab:blue", "--", "restart / requeue (resumed)"),
    "preempted": ("tab:orange", "--", "preempted"),
    "failed": ("tab:red", "-", "failed"),
    "checkpoint_corrupt": ("tab:red", ":", "corrupt checkpoint"),
    "worker_dropped": ("tab:purple", "--", "worker dropped"),
    "straggler": ("black", ":", "straggler flagged"),
}
ATTEMPT_ENDED = ("tab:red", "-.", "attempt ended, not completed (attempts.jsonl)")
ATTEMPT_STARTED = ("tab:green", "-.", "attempt started (attempts.jsonl)")


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def figure_style() -> Iterator[Any]:
    """pyplot inside the report's style; matplotlib's warnings (a glyph a font lacks) stay quiet."""
    plt = pyplot()
    with plt.rc_context(STYLE), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield plt


def save(fig: Any, path: Path) -> Path:
    plt = pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
    return path


def plain(text: object, limit: int = 40) -> str:
    """Text from a run directory as one short printable line."""
    line = "".join(c if c.isprintable() else " " for c in str(text))
    return line if len(line) <= limit else line[: limit - 1] + "…"


def time_scale(span_s: float) -> tuple[float, str]:
    """Divisor and axis label for seconds since the start: seconds, minutes or hours."""
    if span_s <= 300:
        return 1.0, "wall time since start (s)"
    if span_s <= 3 * 3600:
        return 60.0, "wall time since start (min)"
    return 3600.0, "wall time since start (h)"


def _vlines(axis: Any, positions: Any, style: tuple[str, str, str], labelled: set[str]) -> None:
    import numpy as np

    xs = positions[np.isfinite(positions)]
    if not len(xs):
        return
    stride = max(1, -(-len(xs) // MAX_MARKS))
    colour, dash, text = style
    if stride > 1:
        xs, text = xs[::stride], f"{text} (every {stride}th of {len(xs)})"
    axis.vlines(
        xs,
        0,
        1,
        transform=axis.get_xaxis_transform(),
        colors=colour,
        linestyles=dash,
        linewidth=1.0,
        alpha=0.7,
        label=None if text in labelled else text,
    )
    labelled.add(text)


def mark_events(
    axis: Any, series: RunSeries, on: str, start: float | None = None, divisor: float = 1.0
) -> None:
    """Vertical lines at restarts, checkpoints, preemptions and failures; `on` is "step" or "time".

    On a wall-time axis the attempts of attempts.jsonl are marked too (they have no step)."""
    labelled: set[str] = set()
    for kind, style in MARKS.items():
        chosen = [e for e in series.events if e.event == kind]
        xs = column(chosen, "step") if on == "step" else seconds(chosen, start, divisor)
        _vlines(axis, xs, style, labelled)
    if on != "step":
        later = [a for a in series.attempts if a.event == "start" and a.attempt > 0]
        failed = [a for a in series.attempts if a.event == "end" and a.outcome not in ("", "completed")]
        _vlines(axis, seconds(later, start, divisor), ATTEMPT_STARTED, labelled)
        _vlines(axis, seconds(failed, start, divisor), ATTEMPT_ENDED, labelled)


def figure_legend(fig: Any, axes: list[Any], columns: int = 4) -> None:
    """One legend for the figure, below the panels (over them it would hide curves), each label once."""
    seen: dict[str, Any] = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncol=min(columns, len(seen)))


def empty_panel(axis: Any, text: str) -> None:
    axis.text(0.5, 0.5, text, ha="center", va="center", transform=axis.transAxes, color="0.4")
    axis.set_xticks([])
    axis.set_yticks([])
    axis.grid(False)
