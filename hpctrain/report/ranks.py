"""Per-rank figures: step-time heat map over time (a straggler stands out) and memory per rank."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from hpctrain.report.columns import column, rank_table
from hpctrain.report.plotting import Margins, colormap, empty_panel, plain, save, sheet, text_inches
from hpctrain.report.series import RunSeries, finite

# Beyond these the heat map bins: columns by the slowest rank of the interval group (a straggler
# still shows), rows by the slowest rank of each group of ranks.
MAX_COLUMNS = 1200
MAX_ROWS = 128
# A rank list longer than this in one line is a hostile or broken line; its tail is not drawn.
MAX_RANKS = 8192
MAX_MEMORY_RANKS = 256
NAMED_ROWS = 32


def rank_matrices(series: RunSeries) -> tuple[Any, Any, list[int]]:
    """(compute time ÷ the interval's median over ranks, wait share, step) as rank x interval arrays."""
    import numpy as np

    lines = series.ranks
    width = min(MAX_RANKS, max((len(line.compute_s) for line in lines), default=0))
    compute = rank_table([line.compute_s for line in lines], width)
    wait = rank_table([line.wait_s for line in lines], width)
    compute[compute < 0] = np.nan
    wait[wait < 0] = np.nan
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an interval without any rank's time has no median
        median = np.nanmedian(compute, axis=0) if width else np.full(len(lines), np.nan)
        relative = compute / np.where(median > 0, median, np.nan)
        share = wait / (compute + wait)
    steps = np.nan_to_num(column(lines, "step")).astype(np.int64).tolist()
    return relative, share, steps


def _bin(matrix: Any, axis: int, limit: int, worst: bool) -> tuple[Any, int]:
    """Groups of consecutive rows or columns folded to at most `limit`: their max (`worst`) or mean."""
    import numpy as np

    size = matrix.shape[axis]
    group = max(1, -(-size // limit))
    if group == 1:
        return matrix, 1
    pad = (-size) % group
    widths = [(0, 0), (0, 0)]
    widths[axis] = (0, pad)
    padded = np.pad(matrix, widths, constant_values=np.nan)
    if axis == 1:
        folded = padded.reshape(padded.shape[0], -1, group)
        reduce_axis = 2
    else:
        folded = padded.reshape(-1, group, padded.shape[1])
        reduce_axis = 1
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an all-NaN group is NaN, drawn grey
        out = np.nanmax(folded, axis=reduce_axis) if worst else np.nanmean(folded, axis=reduce_axis)
    return out, group


def heatmap_figure(series: RunSeries, path: Path, title: str) -> Path | None:
    """Top: each rank's compute time over each log interval, relative to the median rank (1.0 is the
    median; a straggler is a red row). Bottom: the share of each rank's time spent waiting."""
    if not any(line.compute_s for line in series.ranks):
        return None
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    relative, share, steps = rank_matrices(series)
    relative, col_group = _bin(relative, 1, MAX_COLUMNS, worst=True)
    share, _ = _bin(share, 1, MAX_COLUMNS, worst=False)
    relative, row_group = _bin(relative, 0, MAX_ROWS, worst=True)
    share, _ = _bin(share, 0, MAX_ROWS, worst=False)
    rows, cols = relative.shape
    finite_values = relative[np.isfinite(relative)]
    high = float(np.percentile(finite_values, 99.5)) if finite_values.size else 1.5
    low = float(np.percentile(finite_values, 0.5)) if finite_values.size else 0.5
    norm = TwoSlopeNorm(vmin=min(0.8, max(0.0, low)), vcenter=1.0, vmax=max(1.25, min(high, 10.0)))
    ticks, names = _rank_names(series, rows, row_group)
    # Room on the right for the colour bars (drawn in inset axes: their label and ticks).
    margins = Margins(left=0.85, right=1.1, top=0.75, bottom=0.55, hspace=0.45)
    with sheet(11, 3.6 + min(rows, 40) * 0.3, 2, 1, margins, sharex=True) as drawing:
        (top,), (bottom,) = drawing.axes
        drawing.margins = replace(margins, left=0.45 + text_inches(drawing.fig, names, 9))
        drawing.arrange()
        cmap = colormap("RdBu_r").with_extremes(bad="0.85")
        image = top.imshow(relative, aspect="auto", interpolation="nearest", cmap=cmap, norm=norm)
        drawing.fig.colorbar(image, cax=_colour_bar_axes(top), label="÷ median rank")
        flagged = _mark_stragglers(top, series, col_group, row_group)
        dots = "; black dots: stragglers the runtime flagged" if flagged else ""
        top.set_title(f"compute time per log interval ÷ the median rank's (red: slower){dots}")
        waits = colormap("viridis").with_extremes(bad="0.85")
        image = bottom.imshow(share, aspect="auto", interpolation="nearest", cmap=waits, vmin=0, vmax=1)
        drawing.fig.colorbar(image, cax=_colour_bar_axes(bottom), label="wait share")
        bottom.set_title(
            "wait share: wait ÷ (compute + wait) in collectives (the others wait for a straggler)"
        )
        for axis in (top, bottom):
            axis.set_yticks(ticks, names)
            axis.set_ylabel("rank")
            axis.grid(False)
        columns = np.linspace(0, cols - 1, num=min(cols, 8)).astype(int)
        bottom.set_xticks(columns, [str(steps[min(len(steps) - 1, c * col_group)]) for c in columns])
        bottom.set_xlabel("step at the end of the log interval")
        drawing.fig.suptitle(f"{title}: per-rank step time ({len(series.ranks)} log intervals)")
        return save(drawing.fig, path)


def _colour_bar_axes(axis: Any) -> Any:
    """A thin panel just right of `axis`, its full height, for its colour bar."""
    return axis.inset_axes((1.012, 0.0, 0.016, 1.0))


def _mark_stragglers(axis: Any, series: RunSeries, col_group: int, row_group: int) -> bool:
    """A black dot where the runtime flagged a straggler (RankTimesLine.stragglers)."""
    cells = {
        (col // col_group, rank // row_group)  # one dot per drawn cell, however many intervals it folds
        for col, line in enumerate(series.ranks)
        for rank in line.stragglers[:MAX_RANKS]
        if 0 <= rank < MAX_RANKS
    }
    if cells:
        xs, ys = zip(*sorted(cells), strict=True)
        axis.scatter(xs, ys, s=10, c="black", marker="o")
    return bool(cells)


def _rank_names(series: RunSeries, rows: int, row_group: int) -> tuple[list[int], list[str]]:
    """The heat map's labelled rows: each rank and its node, or some folded rows and the ranks they hold."""
    if rows <= NAMED_ROWS and row_group == 1:
        nodes = next((line.nodes for line in reversed(series.ranks) if line.nodes), [])
        names = [f"rank {r}" + (f" {plain(nodes[r], 16)}" if r < len(nodes) else "") for r in range(rows)]
        return list(range(rows)), names
    ticks = list(range(0, rows, max(1, rows // 16)))
    return ticks, [f"ranks {t * row_group}-{(t + 1) * row_group - 1}" for t in ticks]


MEMORY_ORDER = ("params", "grads", "optimizer")
MEMORY_COLOURS = {"params": "tab:blue", "grads": "tab:orange", "optimizer": "tab:green"}


def memory_figure(series: RunSeries, path: Path, title: str) -> Path | None:
    """Left: bytes each rank holds for parameters, gradients and optimizer state (stacked, MiB).
    Right: each rank's peak memory (device memory on GPU, resident set on CPU)."""
    if not series.memory:
        return None
    ranks = sorted(series.memory)[:MAX_MEMORY_RANKS]
    lines = [series.memory[r] for r in ranks]
    parts = [k for k in MEMORY_ORDER if any(k in m.rank_bytes for m in lines)]
    parts += sorted({k for m in lines for k in m.rank_bytes} - set(parts))[:8]
    peaks = [finite(m.peak_mem_mb) for m in lines]
    positions = list(range(len(ranks)))
    with sheet(11, 3.8, 1, 2) as drawing:
        held, peak = drawing.axes[0]
        bottom = [0.0] * len(ranks)
        for part in parts:
            mib = [max(0.0, finite(m.rank_bytes.get(part)) or 0.0) / 2**20 for m in lines]
            held.bar(positions, mib, bottom=bottom, label=plain(part, 20), color=MEMORY_COLOURS.get(part))
            bottom = [b + v for b, v in zip(bottom, mib, strict=True)]
        held.set_ylabel("MiB held by the rank")
        held.set_title("parameters, gradients, optimizer state")
        if parts:
            held.legend(loc="lower right")
        else:
            empty_panel(held, "no byte counts in the memory lines")
        drawn = [(x, p) for x, p in zip(positions, peaks, strict=True) if p is not None and p >= 0]
        if drawn:
            peak.bar([x for x, _ in drawn], [p for _, p in drawn], color="tab:purple")
            peak.set_ylabel("peak MiB")
            peak.set_title("peak memory (GPU: allocated; CPU: resident set)")
        else:
            empty_panel(peak, "no peak memory recorded")
        for axis in (held, peak):
            _memory_ticks(axis, ranks)
        shown = (
            f" (first {MAX_MEMORY_RANKS} of {len(series.memory)} ranks)"
            if len(series.memory) > len(ranks)
            else ""
        )
        drawing.fig.suptitle(f"{title}: memory per rank after the first optimizer step{shown}")
        return save(drawing.fig, path)


def _memory_ticks(axis: Any, ranks: list[int]) -> None:
    step = max(1, len(ranks) // 32)
    chosen = list(range(0, len(ranks), step))
    axis.set_xticks(chosen, [plain(ranks[i], 8) for i in chosen])
    axis.set_xlabel("rank")
