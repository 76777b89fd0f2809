"""What every figure of a report shares: matplotlib (imported here, lazily, Agg), layout, labels, marks.

Only `hpctrain report` imports this module, so no other verb pays for matplotlib. Text that comes
from a run directory (event names, node names, parameters) is drawn as plain text: mathtext is off,
because a `$` in a hostile file would otherwise make matplotlib raise while it draws.

Figures are `matplotlib.figure.Figure`s on an Agg canvas (pyplot keeps a registry of figures a
report has no use for) with margins fixed in inches (`Margins`): matplotlib's constrained layout
measures every tick label and cost a third of each figure's time.
"""

from __future__ import annotations

import contextlib
import math
import textwrap
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hpctrain.report.columns import seconds
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
# zlib level of the PNGs: 1 writes them in a fraction of the default's (6) time, files about a third larger.
PNG_COMPRESSION = 1
# Event lines of one kind drawn at most (by a stride): 2,000 checkpoint lines in a 500-pixel panel
# are grey noise, and cost matplotlib seconds.
MAX_MARKS = 150
# Height of one row of a legend below the panels (8-point text and its spacing), inches.
LEGEND_ROW = 0.2

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


@dataclass(frozen=True)
class Margins:
    """Space around and between the panels, inches. The defaults fit 9-point tick labels of up to seven
    characters (matplotlib switches to an offset or 1e7 beyond), an axis label, and a panel title."""

    left: float = 0.85
    right: float = 0.25
    top: float = 0.7
    """The figure's title and the panels' titles."""
    bottom: float = 0.55
    wspace: float = 0.85
    hspace: float = 0.75
    legend_rows: int = 0


@dataclass
class Sheet:
    """A figure, its panels (a rows x columns array) and the margins they are placed by."""

    fig: Any
    axes: Any
    margins: Margins = field(default_factory=Margins)

    def arrange(self) -> None:
        """Place the panels by the margins (fractions of the figure, as matplotlib takes them); on a
        figure too small for them the margins and gaps shrink, so the panels always keep some room."""
        m = self.margins
        width, height = self.fig.get_size_inches()
        rows, cols = self.axes.shape
        legend = m.legend_rows * LEGEND_ROW + 0.15 if m.legend_rows else 0.0
        left, right = min(m.left, 0.4 * width), min(m.right, 0.25 * width)
        top, bottom = min(m.top, 0.25 * height), min(m.bottom + legend, 0.4 * height)
        panel_width, wspace = _panels(width - left - right, cols, m.wspace)
        panel_height, hspace = _panels(height - top - bottom, rows, m.hspace)
        self.fig.subplots_adjust(
            left=left / width,
            right=1 - right / width,
            top=1 - top / height,
            bottom=bottom / height,
            wspace=wspace / panel_width,
            hspace=hspace / panel_height,
        )

    def legend(self, axes: list[Any], columns: int = 4) -> None:
        """One legend for the figure, below the panels (over them it would hide curves), each label once."""
        seen: dict[str, Any] = {}
        for axis in axes:
            for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
                seen.setdefault(label, handle)
        if not seen:
            return
        ncol = min(columns, len(seen))
        self.fig.legend(
            list(seen.values()), list(seen), loc="lower center", bbox_to_anchor=(0.5, 0.005), ncol=ncol
        )
        self.margins = replace(self.margins, legend_rows=math.ceil(len(seen) / ncol))
        self.arrange()


def _panels(room: float, count: int, gap: float) -> tuple[float, float]:
    """(size of each of `count` panels, gap between them) in `room` inches; gaps take at most half."""
    gap = min(gap, room / 2 / max(1, count - 1))
    return (room - (count - 1) * gap) / count, gap


@contextlib.contextmanager
def sheet(
    width: float, height: float, rows: int = 1, cols: int = 1, margins: Margins | None = None, **kwargs: Any
) -> Iterator[Sheet]:
    """A figure of rows x cols panels inside the report's style; matplotlib's warnings (a glyph a font
    lacks) stay quiet. `kwargs` go to `Figure.subplots` (sharex)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context(STYLE), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fig = Figure(figsize=(width, height), dpi=DPI)
        FigureCanvasAgg(fig)
        drawn = Sheet(fig, fig.subplots(rows, cols, squeeze=False, **kwargs), margins or Margins())
        drawn.arrange()
        yield drawn


def colormap(name: str) -> Any:
    import matplotlib

    return matplotlib.colormaps[name]


def text_inches(fig: Any, texts: list[str], size: float) -> float:
    """The width of the widest of `texts` at `size` points, inches (a margin that fits tick labels)."""
    from matplotlib.font_manager import FontProperties

    renderer = fig.canvas.get_renderer()
    font = FontProperties(size=size)
    widths = [renderer.get_text_width_height_descent(t, font, ismath=False)[0] for t in texts]
    return max(widths, default=0.0) / fig.dpi


def save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, pil_kwargs={"compress_level": PNG_COMPRESSION})
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
    import numpy as np

    names = series.cached(
        ("events", "names"), lambda: np.array([e.event for e in series.events], dtype=object)
    )
    if on == "step":
        xs = series.column("events", "step")
    elif start is None:
        xs = np.full(len(series.events), np.nan)
    else:
        xs = (series.column("events", "time") - start) / divisor
    labelled: set[str] = set()
    for kind, style in MARKS.items():
        _vlines(axis, xs[names == kind], style, labelled)
    if on != "step":
        later = [a for a in series.attempts if a.event == "start" and a.attempt > 0]
        failed = [a for a in series.attempts if a.event == "end" and a.outcome not in ("", "completed")]
        _vlines(axis, seconds(later, start, divisor), ATTEMPT_STARTED, labelled)
        _vlines(axis, seconds(failed, start, divisor), ATTEMPT_ENDED, labelled)


def empty_panel(axis: Any, text: str) -> None:
    """`text` in the middle of a panel without data, in lines short enough for a narrow panel."""
    text = textwrap.fill(text, 44)
    axis.text(0.5, 0.5, text, ha="center", va="center", transform=axis.transAxes, color="0.4")
    axis.set_xticks([])
    axis.set_yticks([])
    axis.grid(False)
