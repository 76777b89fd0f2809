"""Fields of many metrics lines as numpy columns for drawing (imported only when a figure is drawn).

A column is float64 with NaN wherever a line lacks the field or holds something no axis can show
(infinity, an integer of hundreds of digits, a value beyond ±series.MAX_MAGNITUDE). Building one is
a list comprehension and one numpy conversion: a 100,000-line run costs milliseconds per curve,
where a Python loop per value would cost seconds.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpctrain.report.series import MAX_MAGNITUDE, finite

# A curve of more points than this is thinned to the lowest and highest of each group of neighbours:
# the PNG has fewer pixels than that anyway.
MAX_POINTS = 4000
# Restarts that split curves (a run restarted more often than this is split at its first ones).
MAX_RESTARTS = 1000


def column(lines: list[Any], name: str) -> np.ndarray:
    """`name` of each line as floats; NaN where it is absent or not a finite number."""
    raw = [getattr(line, name, None) for line in lines]
    try:
        values = np.array(raw, dtype=float)
    except (OverflowError, TypeError, ValueError):  # a huge integer, or a value of the wrong type
        values = np.array([np.nan if (v := finite(x)) is None else v for x in raw], dtype=float)
    if values.ndim != 1:  # lists where numbers belong: not a column
        return np.full(len(lines), np.nan)
    return only_drawable(values)


def only_drawable(values: np.ndarray) -> np.ndarray:
    """`values` with NaN in place of infinities and anything beyond ±MAX_MAGNITUDE (in place)."""
    with np.errstate(invalid="ignore"):
        values[~(np.abs(values) <= MAX_MAGNITUDE)] = np.nan
    return values


@dataclass
class Points:
    """x and y of the lines where both are finite, thinned to at most MAX_POINTS."""

    x: np.ndarray
    y: np.ndarray

    @classmethod
    def of(cls, x: np.ndarray, y: np.ndarray) -> Points:
        with np.errstate(all="ignore"):
            keep = np.isfinite(x) & np.isfinite(y)
        x, y = x[keep], y[keep]
        chosen = envelope(y, MAX_POINTS)
        return cls(x[chosen], y[chosen]) if chosen is not None else cls(x, y)

    def __bool__(self) -> bool:
        return len(self.x) > 0


def envelope(y: np.ndarray, limit: int) -> np.ndarray | None:
    """Indices of at most about `limit` of `y`'s points that draw the same picture: the lowest and the
    highest of each group of neighbours, in order (a one-interval spike stays visible, where a stride
    would skip it); None when `y` is short enough to draw whole."""
    size = len(y)
    group = -(-2 * size // limit)
    if group <= 2:
        return None
    whole = size - size % group
    starts = np.arange(0, whole, group)
    groups = y[:whole].reshape(-1, group)
    chosen = np.concatenate(
        (starts + groups.argmin(axis=1), starts + groups.argmax(axis=1), np.arange(whole, size))
    )
    return np.unique(chosen)  # sorted, and a group whose lowest is its highest drawn once


def by_step(lines: list[Any], name: str) -> Points:
    return Points.of(column(lines, "step"), column(lines, name))


def seconds(lines: list[Any], start: float | None, divisor: float = 1.0) -> np.ndarray:
    """Each line's time as seconds (or minutes, hours: `divisor`) since `start`; NaN without one."""
    if start is None:
        return np.full(len(lines), np.nan)
    with np.errstate(all="ignore"):
        return (column(lines, "time") - start) / divisor


def by_time(lines: list[Any], name: str, start: float | None, divisor: float = 1.0) -> Points:
    return Points.of(seconds(lines, start, divisor), column(lines, name))


def segments(lines: list[Any], restarts: list[Any] = ()) -> list[tuple[int, int]]:  # type: ignore[assignment]
    """Index ranges [first, end) of `lines` (train or eval) between restarts, so no curve is drawn
    across one: a resumed run goes back to its checkpoint's step (a curve through that jump would fold
    back on itself), and a requeued one waited in the queue (a line over that gap would invent data).
    A range ends where the step does not grow, and where the time passes a `restarts` line's time."""
    if not lines:
        return []
    return split(column(lines, "step"), column(lines, "time"), column(restarts[:MAX_RESTARTS], "time"))


def split(steps: np.ndarray, times: np.ndarray, restart_times: np.ndarray) -> list[tuple[int, int]]:
    """`segments` of lines given as their step and time columns."""
    if not len(steps):
        return []
    with np.errstate(all="ignore"):
        cut = np.diff(steps) <= 0
        for moment in restart_times[:MAX_RESTARTS]:
            cut |= (times[:-1] < moment) & (times[1:] >= moment)
    bounds = [0, *(np.nonzero(cut)[0] + 1).tolist(), len(steps)]
    return list(itertools.pairwise(bounds))


def rank_table(lists: list[list[float]], width: int) -> np.ndarray:
    """Per-rank values of each interval as a (rank, interval) array, NaN where a line has no value."""
    if lists and (np.fromiter(map(len, lists), dtype=np.int64, count=len(lists)) == width).all():
        try:  # one pass over every value (a 2-D np.array of lists costs twice as much)
            values = itertools.chain.from_iterable(lists)
            table = np.fromiter(values, dtype=float, count=len(lists) * width).reshape(len(lists), width)
        except (OverflowError, TypeError, ValueError):  # a value that is not a number
            table = None
        if table is not None:
            return only_drawable(table).T
    table = np.full((len(lists), width), np.nan)
    for col, row in enumerate(lists):
        for rank, value in enumerate(row[:width]):
            found = finite(value)
            if found is not None:
                table[col, rank] = found
    return table.T
