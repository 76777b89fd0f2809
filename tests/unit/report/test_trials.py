"""A sweep's parameters figure with metrics and parameter values no axis can show: drawn, not a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctrain.report.series import RunSeries
from hpctrain.report.trials import LABELLED, parameters_figure, trials_figure
from hpctrain.rundir import TrainLine
from hpctrain.sweep.status import SweepStatus, TrialStatus
from tests.unit.report.conftest import Saved

pytest.importorskip("matplotlib", reason="hpctrain report draws with matplotlib (the test extra has it)")

EXTREMES = [1e308, -1e308, 5e-324, float("inf"), float("nan"), 0.0, 1.0]
NUMBERS = st.floats() | st.sampled_from(EXTREMES)


def sweep_of(metrics: list[float], params: list[float], mode: str) -> SweepStatus:
    trials = [
        TrialStatus(index=i, params={"lr": p}, state="COMPLETED", job_id=str(i), metric=m)
        for i, (m, p) in enumerate(zip(metrics, params, strict=False))
    ]
    best = max(trials, key=lambda t: t.metric if t.metric == t.metric else -1.0) if trials else None
    counts = {"COMPLETED": len(trials)}
    return SweepStatus(
        sweep_id="s", name="s", metric="loss", mode=mode, counts=counts, best=best, trials=trials, arrays=[]
    )


def test_a_best_trial_of_1e308_is_left_out_not_a_crash(tmp_path: Path) -> None:
    path = parameters_figure(sweep_of([1.0, 1e308, 2.0], [0.1, 1e308, 0.01], "max"), tmp_path / "p.png")
    assert path.is_file() and path.stat().st_size > 1000


@settings(max_examples=30, deadline=None)
@given(
    pairs=st.lists(st.tuples(NUMBERS, NUMBERS), min_size=1, max_size=6), mode=st.sampled_from(["min", "max"])
)
def test_any_metric_and_parameter_values_give_a_figure(pairs: list[tuple[float, float]], mode: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        metrics, params = [m for m, _ in pairs], [p for _, p in pairs]
        assert parameters_figure(sweep_of(metrics, params, mode), Path(folder) / "p.png").is_file()


def test_a_parameter_spanning_ten_times_is_drawn_on_a_log_axis_and_the_best_ringed(
    tmp_path: Path, saved: Saved
) -> None:
    sweep = sweep_of([0.5, 0.25, 0.75], [1.0, 0.1, 0.01], "min")
    sweep.best = sweep.trials[1]
    parameters_figure(sweep, tmp_path / "p.png")
    (axis,) = saved[0].axes
    assert axis.get_xscale() == "log"
    points, ring = axis.collections
    assert points.get_offsets().tolist() == [[1.0, 0.5], [0.1, 0.25], [0.01, 0.75]]
    assert ring.get_offsets().tolist() == [[0.1, 0.25]]
    assert "3/3 trials with loss (lower is better; best ringed)" in saved[0].texts[0].get_text()


def test_values_that_are_not_all_numbers_are_categories(tmp_path: Path, saved: Saved) -> None:
    sweep = sweep_of([1.0, 2.0], [0.0, 0.0], "max")
    sweep.trials[0].params = {"opt": "sgd"}
    sweep.trials[1].params = {"opt": "adam"}
    sweep.best = None
    parameters_figure(sweep, tmp_path / "p.png")
    (axis,) = saved[0].axes
    assert [t.get_text() for t in axis.get_xticklabels()] == ["adam", "sgd"]
    assert axis.collections[0].get_offsets().tolist() == [[1.0, 1.0], [0.0, 2.0]]


def test_trials_beyond_the_labelled_are_grey_and_the_best_is_black(tmp_path: Path, saved: Saved) -> None:
    lines = [TrainLine(step=s, loss=1.0 / s) for s in range(1, 5)]
    trials = [(f"trial {i}", RunSeries(train=lines)) for i in range(LABELLED + 3)]
    path = trials_figure(trials, tmp_path / "t.png", "sweep", best="trial 14")
    assert path == tmp_path / "t.png"
    train = saved[0].axes[0]
    colours = [line.get_color() for line in train.lines]
    assert colours[LABELLED : LABELLED + 2] == ["0.7", "0.7"] and colours[-1] == "black"
    assert train.lines[-1].get_label() == "trial 14 (best)" and train.lines[LABELLED].get_label().startswith(
        "_"
    )
    assert "15 trials (3 more in grey)" in saved[0].texts[0].get_text()
    assert trials_figure([("t", RunSeries())], tmp_path / "none.png", "sweep") is None
