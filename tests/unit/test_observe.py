"""The straggler rule, its wording in `status`, and TensorBoard event files across a restart."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from hpctrain.rundir import EvalLine, EventLine, RankTimesLine, RunDir, TrainLine
from hpctrain.stragglers import SLOW_FRACTION, SLOW_INTERVALS, StragglerRule, describe, excess
from hpctrain.watch import progress


def test_a_rank_slow_three_intervals_in_a_row_is_flagged_once() -> None:
    rule = StragglerRule()
    slow = [1.0, 1.0, 1.0, 1.45]
    assert rule.update(slow) == ([], [])
    assert rule.update(slow) == ([], [])
    assert rule.update(slow) == ([3], [3])  # the third interval in a row flags it, with an event
    assert rule.update(slow) == ([3], [])  # still flagged, no second event
    assert rule.update([1.0, 1.0, 1.0, 1.1]) == ([], [])  # a normal interval clears it


def test_a_hiccup_interval_resets_the_count() -> None:
    rule = StragglerRule()
    for times in ([1, 1, 1, 2], [1, 1, 1, 2], [1, 1, 1, 1], [1, 1, 1, 2], [1, 1, 1, 2]):
        assert rule.update(times) == ([], [])


def test_twenty_percent_is_not_yet_slow_and_no_peers_no_straggler() -> None:
    rule = StragglerRule()
    for _ in range(5):
        assert rule.update([1.0, 1.0, 1.2])[0] == []
    single = StragglerRule()
    for _ in range(5):
        assert single.update([3.0]) == ([], [])
    assert excess([0.0, 0.0]) == [0.0, 0.0]  # nothing measured: nobody is slower


@given(st.lists(st.lists(st.floats(0.0, 1e6), min_size=3, max_size=3), max_size=12))
def test_flagged_means_slow_in_each_of_the_last_three_intervals(intervals: list[list[float]]) -> None:
    rule = StragglerRule()
    history: list[list[bool]] = []
    for times in intervals:
        flagged, newly = rule.update(times)
        history.append([amount > SLOW_FRACTION for amount in excess(times)])
        recent = history[-SLOW_INTERVALS:]
        expected = [r for r in range(3) if len(recent) == SLOW_INTERVALS and all(h[r] for h in recent)]
        assert flagged == expected
        assert set(newly) <= set(flagged)


def test_status_wording_names_rank_node_and_excess(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.append_metric(TrainLine(step=30, steps=100, loss=1.0))
    run.append_metric(
        RankTimesLine(
            step=30,
            compute_s=[1.0, 1.0, 1.0, 1.45],
            wait_s=[0.45, 0.45, 0.45, 0.0],
            nodes=["node1", "node1", "node2", "node2"],
            stragglers=[3],
        )
    )
    assert describe(progress(tmp_path).ranks) == ["straggler: rank 3 on node2, +45%"]
    assert describe(None) == []


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
