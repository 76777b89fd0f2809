"""report.plotting: time axes, plain labels, margins that always leave room, one legend, event marks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain.report.plotting import (
    MARKS,
    MAX_MARKS,
    Margins,
    mark_events,
    plain,
    save,
    sheet,
    time_scale,
)
from hpctrain.report.series import RunSeries
from hpctrain.rundir import AttemptLine, EventLine

pytest.importorskip("matplotlib", reason="hpctrain report draws with matplotlib (the test extra has it)")


@pytest.mark.parametrize(
    ("span", "divisor", "unit"),
    [
        (0, 1.0, "(s)"),
        (300, 1.0, "(s)"),
        (301, 60.0, "(min)"),
        (10800, 60.0, "(min)"),
        (10801, 3600.0, "(h)"),
    ],
)
def test_the_time_axis_unit_follows_the_span(span: float, divisor: float, unit: str) -> None:
    found, label = time_scale(span)
    assert found == divisor and label.endswith(unit)


@given(st.text(), st.integers(2, 80))
def test_plain_is_one_printable_line_within_the_limit(text: str, limit: int) -> None:
    line = plain(text, limit)
    assert line.isprintable() and len(line) <= limit
    assert line == "".join(c if c.isprintable() else " " for c in text) or line.endswith("…")


@given(st.floats(1.0, 20.0), st.floats(1.0, 12.0), st.integers(1, 4), st.integers(1, 4))
def test_panels_keep_room_on_any_figure_size(width: float, height: float, rows: int, cols: int) -> None:
    with sheet(width, height, rows, cols, Margins(left=3, right=3, top=3, bottom=3)) as drawn:
        params = drawn.fig.subplotpars
        assert 0 < params.left < params.right < 1 and 0 < params.bottom < params.top < 1
        boxes = [axis.get_position() for axis in drawn.axes.flat]
        assert all(box.width > 0 and box.height > 0 for box in boxes)


def test_the_legend_lists_each_label_once_and_makes_room_below(tmp_path: Path) -> None:
    with sheet(8, 4, 1, 2) as drawn:
        left, right = drawn.axes[0]
        left.plot([0, 1], [0, 1], label="loss")
        right.plot([0, 1], [1, 0], label="loss")
        right.plot([0, 1], [1, 1], label="eval")
        bottom = drawn.fig.subplotpars.bottom
        drawn.legend([left, right])
        (legend,) = drawn.fig.legends
        assert [t.get_text() for t in legend.get_texts()] == ["loss", "eval"]
        assert drawn.margins.legend_rows == 1 and drawn.fig.subplotpars.bottom > bottom
        path = save(drawn.fig, tmp_path / "sub" / "f.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_events_are_marked_and_thinned_to_max_marks() -> None:
    events = [EventLine(event="checkpoint", step=s, time=100.0 + s) for s in range(1000)]
    events += [EventLine(event="failed", step=5, time=105.0), EventLine(event="nothing", step=6, time=106.0)]
    attempts = [
        AttemptLine(attempt=0, event="start", time=100.0),
        AttemptLine(attempt=0, event="end", time=110.0, outcome="node_fail"),
        AttemptLine(attempt=1, event="start", time=120.0),
    ]
    series = RunSeries(events=events, attempts=attempts)
    with sheet(6, 4) as drawn:
        axis = drawn.axes[0][0]
        mark_events(axis, series, "step")
        labels = [c.get_label() for c in axis.collections]
        assert labels == [f"{MARKS['checkpoint'][2]} (every 7th of 1000)", MARKS["failed"][2]]
        assert len(axis.collections[0].get_segments()) <= MAX_MARKS
    with sheet(6, 4) as drawn:
        axis = drawn.axes[0][0]
        mark_events(axis, series, "time", start=100.0)
        xs = [[seg[0][0] for seg in c.get_segments()] for c in axis.collections]
        assert xs[1] == [5.0] and xs[2] == [20.0] and xs[3] == [10.0]
