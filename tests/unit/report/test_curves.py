"""report.curves: loss split at restarts, accuracy when there is some, and the throughput panels."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain.report.curves import loss_figure, throughput_figure
from hpctrain.report.series import RunSeries, read_run
from hpctrain.rundir import EvalLine, TrainLine
from tests.unit.report.conftest import Saved
from tests.unit.report_runs import write_run

pytest.importorskip("matplotlib", reason="hpctrain report draws with matplotlib (the test extra has it)")


def titles(fig: object) -> list[str]:
    return [axis.get_title() for axis in fig.axes]  # type: ignore[attr-defined]


def test_the_loss_of_a_resumed_run_is_two_curves_and_accuracy_a_second_row(
    tmp_path: Path, saved: Saved
) -> None:
    series = read_run(write_run(tmp_path / "run", intervals=50))
    assert loss_figure(series, tmp_path / "loss.png", "run") == tmp_path / "loss.png"
    (fig,) = saved
    assert len(fig.axes) == 4  # loss and accuracy, against step and time
    by_step = fig.axes[0]
    train = [line for line in by_step.lines if line.get_color() == "tab:blue"]
    assert len(train) == 2 and train[0].get_label() == "train loss" and train[1].get_label().startswith("_")
    drawn = [x for line in train for x in line.get_xdata()]
    assert drawn == [t.step for t in series.train]
    assert by_step.get_xlabel() == "step" and fig.axes[1].get_xlabel() == "wall time since start (s)"


def test_no_accuracy_no_second_row_and_no_lines_no_figure(tmp_path: Path, saved: Saved) -> None:
    series = RunSeries(train=[TrainLine(step=s, loss=1.0 / s, time=100.0 + s) for s in range(1, 20)])
    loss_figure(series, tmp_path / "loss.png", "run")
    assert len(saved[0].axes) == 2
    assert loss_figure(RunSeries(), tmp_path / "none.png", "run") is None
    assert not (tmp_path / "none.png").exists()


def test_a_run_without_times_says_so_on_the_time_panel(tmp_path: Path, saved: Saved) -> None:
    series = RunSeries(
        train=[TrainLine(step=s, loss=1.0) for s in range(1, 5)], evals=[EvalLine(step=2, loss=1.0)]
    )
    loss_figure(series, tmp_path / "loss.png", "run")
    texts = [t.get_text() for t in saved[0].axes[1].texts]
    assert texts == ["no loss with a time"]


def test_throughput_draws_tokens_when_there_are_some_and_only_panels_with_data(
    tmp_path: Path, saved: Saved
) -> None:
    series = RunSeries(
        train=[
            TrainLine(step=s, tokens_per_s=1000.0 + s, samples_per_s=10.0, step_time_s=0.5, time=100.0 + s)
            for s in range(1, 30)
        ]
    )
    throughput_figure(series, tmp_path / "t.png", "run")
    assert titles(saved[0]) == ["throughput (tokens/s, whole job)", "step time (mean over each log interval)"]
    assert list(saved[0].axes[0].lines[0].get_ydata()) == [1000.0 + s for s in range(1, 30)]


def test_samples_per_second_mfu_and_data_share_of_a_full_run(tmp_path: Path, saved: Saved) -> None:
    series = read_run(write_run(tmp_path / "run", intervals=20))
    throughput_figure(series, tmp_path / "t.png", "run")
    assert titles(saved[0])[0] == "throughput (samples/s, whole job)"
    assert "data-loader wait (rank 0: fetching batches)" in titles(saved[0])
    assert "MFU" not in titles(saved[0])  # the made-up run records no MFU


def test_no_throughput_no_figure(tmp_path: Path) -> None:
    series = RunSeries(train=[TrainLine(step=1, loss=1.0)])
    assert throughput_figure(series, tmp_path / "t.png", "run") is None
