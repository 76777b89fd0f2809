"""Values no axis can show (NaN, infinity, ±1e308, subnormals) in a run's metrics: a report is still drawn."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctrain.report.columns import Points, column, envelope, rank_table, split
from hpctrain.report.series import MAX_MAGNITUDE, finite, read_run
from tests.unit.report_runs import write_extreme_run
from tests.unit.tracked_runs import cli

pytest.importorskip("matplotlib", reason="hpctrain report draws with matplotlib (the test extra has it)")

EXTREMES = [1e308, -1e308, 1.7976931348623157e308, 5e-324, -5e-324, 2.2e-308, float("inf"), float("nan"), 0.0]
ANY_FLOAT = st.floats() | st.sampled_from(EXTREMES)


def test_a_loss_and_a_time_of_1e308_are_left_out_of_the_figures_not_a_crash(tmp_path: Path) -> None:
    run = write_extreme_run(tmp_path / "run", [1.0, 2.0, 1e308, 3.0, -1e308, 4.0])
    outcome = cli("report", str(run.root), "-o", str(tmp_path / "out"))
    assert outcome.code == 0, outcome.stderr
    assert (tmp_path / "out" / "report-loss.png").is_file()
    series = read_run(run)
    for name in ("loss", "time", "samples_per_s"):
        values = series.column("train", name)
        assert not (np.abs(values) > MAX_MAGNITUDE).any(), name


def test_out_of_range_values_are_not_data() -> None:
    assert finite(1e308) is None and finite(-1e101) is None and finite(10**400) is None
    assert finite(1e100) == 1e100 and finite(5e-324) == 5e-324
    assert rank_table([[1e308, 1.0]], 2)[:, 0].tolist()[1] == 1.0
    assert np.isnan(rank_table([[1e308, 1.0]], 2)[0, 0])


@settings(max_examples=25, deadline=None)
@given(values=st.lists(ANY_FLOAT, min_size=1, max_size=12))
def test_any_float_in_any_field_gives_a_report(values: list[float]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        run = write_extreme_run(Path(folder) / "run", values)
        outcome = cli("report", str(run.root), "-o", str(Path(folder) / "out"))
        assert outcome.code == 0, outcome.stderr
        assert (Path(folder) / "out" / "report.md").is_file()
        train = read_run(run).train
        assert all(not (np.abs(column(train, name)) > MAX_MAGNITUDE).any() for name in ("loss", "time"))


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=3000), limit=st.integers(10, 500))
def test_thinning_keeps_every_group_s_lowest_and_highest_in_order(values: list[float], limit: int) -> None:
    y = np.array(values)
    chosen = envelope(y, limit)
    if chosen is None:
        assert len(y) <= limit
        return
    assert chosen.tolist() == sorted(set(chosen.tolist()))
    group = -(
        -2 * len(y) // limit
    )  # the neighbours each pair stands for; a tail shorter than that is kept whole
    assert len(chosen) < len(y) and len(chosen) <= limit + group
    assert y.min() in y[chosen] and y.max() in y[chosen]


def test_points_keep_only_pairs_where_both_are_finite() -> None:
    points = Points.of(np.array([1.0, np.nan, 3.0, 4.0]), np.array([1.0, 2.0, np.inf, 4.0]))
    assert points.x.tolist() == [1.0, 4.0] and points.y.tolist() == [1.0, 4.0]
    assert not Points.of(np.array([np.nan]), np.array([1.0]))


def test_curves_are_cut_where_the_step_goes_back_and_at_a_restart() -> None:
    steps = np.array([10.0, 20.0, 30.0, 10.0, 20.0, 30.0, 40.0])
    times = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 50.0, 51.0])
    assert split(steps, times, np.array([40.0])) == [(0, 3), (3, 5), (5, 7)]
    assert split(np.array([]), np.array([]), np.array([])) == []
