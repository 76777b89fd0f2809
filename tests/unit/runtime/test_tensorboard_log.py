"""TensorBoard event files: each step once across a restart, rank 0 only, optional package."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from hpctrain.rundir import EvalLine, EventLine, RunDir, TrainLine


def _steps(folder: Path, tag: str) -> list[int]:
    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    return [event.step for event in accumulator.Scalars(tag)]


def test_a_restart_from_an_older_checkpoint_shows_each_step_once(tmp_path: Path) -> None:
    from hpctrain.runtime.tensorboard_log import open_log

    first = open_log(tmp_path, 0, True, 0)
    assert first is not None
    for step in (10, 20, 30, 40, 50):  # the last checkpoint was at 30; 40 and 50 are logged again
        first(TrainLine(step=step, loss=1.0 / step, lr=0.1, time=1000.0 + step))
    first(EvalLine(step=40, loss=0.5, accuracy=0.9))
    first.close()
    second = open_log(tmp_path, 0, True, 30)
    assert second is not None
    for step in (40, 50, 60):
        second(TrainLine(step=step, loss=2.0 / step, lr=0.1, time=2000.0 + step))
    second(EventLine(event="done", step=60))
    second.close()
    board = RunDir(tmp_path).tensorboard
    assert len(list(board.iterdir())) == 2  # one event file per attempt, one log directory
    assert _steps(board, "train/loss") == [10, 20, 30, 40, 50, 60]
    accumulator = EventAccumulator(str(board))
    accumulator.Reload()
    assert [round(e.value, 4) for e in accumulator.Scalars("train/loss")][3:] == [0.05, 0.04, 0.0333]
    assert accumulator.Scalars("eval/loss") == []  # step 40's eval came before the restart: purged


def test_other_ranks_and_disabled_runs_write_nothing(tmp_path: Path) -> None:
    from hpctrain.runtime.tensorboard_log import open_log

    assert open_log(tmp_path, 1, True, 0) is None
    assert open_log(tmp_path, 0, False, 0) is None
    assert not RunDir(tmp_path).tensorboard.exists()


def test_without_the_package_one_warning_and_training_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from hpctrain.runtime.tensorboard_log import open_log

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import now raises ImportError
    with caplog.at_level(logging.WARNING):
        assert open_log(tmp_path, 0, True, 0) is None
    (record,) = caplog.records
    assert "pip install tensorboard" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # left unset: on where installed, and no warning elsewhere
        assert open_log(tmp_path, 0, None, 0) is None
    assert not caplog.records
