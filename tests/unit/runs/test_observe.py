"""The straggler rule, its wording in `status`, and TensorBoard event files across a restart."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from hpctrain.cli.view.progress import ProgressView, duration
from hpctrain.rundir import EvalLine, EventLine, RankTimesLine, RunDir, TrainLine
from hpctrain.rundir.stragglers import SLOW_FRACTION, SLOW_INTERVALS, StragglerRule, describe, excess
from hpctrain.runs.index import Run
from hpctrain.runs.logs import LogMerger
from hpctrain.runs.poll import RunStatus, progress


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


def test_status_still_finds_the_eval_line_behind_per_rank_lines(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.append_metric(EvalLine(step=10, loss=0.5, accuracy=0.75))
    for step in range(11, 25):  # a ranks line after every train line: only the newest is decoded
        run.append_metric(TrainLine(step=step, steps=100))
        run.append_metric(RankTimesLine(step=step, compute_s=[1.0, float(step)], stragglers=[1]))
    found = progress(tmp_path)
    assert found.eval is not None and found.eval.accuracy == 0.75
    assert found.train is not None and found.ranks is not None and found.ranks.step == 24


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


# ---------------------------------------------------------------------------------------------
# Progress in the terminal, and merged logs
# ---------------------------------------------------------------------------------------------


def _status(tmp_path: Path, state: str, *lines: TrainLine) -> RunStatus:
    run = RunDir(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    for line in lines:
        run.append_metric(line)
    record = Run(
        run_id="r1",
        job_id="42",
        name="digits",
        site="local",
        backend="local",
        run_dir=tmp_path,
        submitted_at=0.0,
        state=state,
        state_at=0.0,
    )
    return RunStatus(record, None, progress(tmp_path))


def test_plain_lines_show_steps_rate_eta_and_only_changes(tmp_path: Path) -> None:
    out = io.StringIO()  # not a terminal: plain lines, whether or not rich is installed
    view = ProgressView(out)
    assert not view.fancy
    view.update([_status(tmp_path / "a", "PENDING")])
    view.update([_status(tmp_path / "a", "PENDING")])  # nothing moved: no line
    running = _status(tmp_path / "b", "RUNNING", TrainLine(step=120, steps=300, step_time_s=0.5))
    view.update([running])
    view.update([running])
    view.close()
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == ["42 digits PENDING", "42 digits RUNNING step 120/300 (40%), 2 steps/s, ETA 1:30"]


def test_rich_bars_carry_the_same_text(tmp_path: Path) -> None:
    pytest.importorskip("rich", reason="rich is optional (hpctrain[observe]); plain lines are tested above")
    out = io.StringIO()
    view = ProgressView(out, fancy=True)  # forced: a StringIO is no terminal
    view.update([_status(tmp_path, "RUNNING", TrainLine(step=120, steps=300, step_time_s=0.5))])
    view.close()
    drawn = out.getvalue()
    assert "42 digits" in drawn and "RUNNING step 120/300 (40%), 2 steps/s, ETA 1:30" in drawn


def test_eta_reads_in_hours_once_there_are_any() -> None:
    assert (duration(5), duration(754), duration(10930)) == ("0:05", "12:34", "3:02:10")


def test_the_cli_does_not_import_rich_to_start() -> None:
    code = "import sys, hpctrain.cli.main as m, hpctrain.cli.status_cmd, hpctrain.cli.view.progress;"
    code += "print('rich' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def _write_log(folder: Path, rank: int, node: str, lines: list[str], tail: str = "") -> None:
    path = RunDir(folder).rank_log(rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"2026-12-03 04:00:{s} [rank {rank}/2 {node}] INFO x: {m}\n" for s, m in lines)
    path.write_text(text + tail)


def test_merged_logs_interleave_by_time_and_keep_unstamped_lines_with_theirs(tmp_path: Path) -> None:
    _write_log(tmp_path, 0, "node1", [("01,000", "a"), ("03,000", "c")], tail="Traceback\n  boom\n")
    _write_log(tmp_path, 1, "node2", [("02,000", "b"), ("04,000", "d")], tail="no newline yet")
    merger = LogMerger(RunDir(tmp_path))
    got = [line.decode() for line in merger.drain()]
    assert [line[:9] + line[-1] for line in got] == [
        "[rank 0] a",
        "[rank 1] b",
        "[rank 0] c",
        "[rank 0] k",  # the traceback stays after its rank's last stamped line
        "[rank 0] m",
        "[rank 1] d",
    ]
    with RunDir(tmp_path).rank_log(1).open("a") as handle:
        handle.write("\n")
    assert [line.decode() for line in merger.drain()] == ["[rank 1] no newline yet"]  # follow: new lines


def test_merged_logs_filter_by_node_and_rank(tmp_path: Path) -> None:
    _write_log(tmp_path, 0, "node1", [("01,000", "a")])
    _write_log(tmp_path, 1, "node2", [("02,000", "b")])
    (only,) = LogMerger(RunDir(tmp_path), node="node2").drain()
    assert only.decode().startswith("[rank 1] ") and only.endswith(b"b")
    assert list(LogMerger(RunDir(tmp_path), ranks=[0], node="node2").drain()) == []
    assert list(LogMerger(RunDir(tmp_path / "none")).drain()) == []


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=3), st.integers(1, 64))
def test_merged_logs_lose_and_add_nothing_whatever_the_bytes(logs: list[bytes], chunk: int) -> None:
    """Hostile log content (no newlines, escapes, invalid UTF-8, fake timestamps), read in small
    rounds as `-f` would: each rank's lines come out whole, once, in their own order."""
    import tempfile

    from hpctrain.runs import logs as log_merge

    with tempfile.TemporaryDirectory() as folder:
        root = RunDir(folder)
        root.logs.mkdir()
        for rank, data in enumerate(logs):
            root.rank_log(rank).write_bytes(data)
        merger = LogMerger(root)
        original = log_merge.CHUNK
        log_merge.CHUNK = chunk
        try:
            got = list(merger.drain(final=True))
        finally:
            log_merge.CHUNK = original
    for rank, data in enumerate(logs):
        prefix = f"[rank {rank}] ".encode()
        expected = data.split(b"\n")
        if expected[-1] == b"":
            expected.pop()
        assert [line[len(prefix) :] for line in got if line.startswith(prefix)] == expected
