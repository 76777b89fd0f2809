"""A command job's log-parsed progress in TensorBoard: parsed lines become event files, one curve across
restarts, written from the wrapper's thread."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from hpctrain.command.event_files import event_files
from hpctrain.rundir import RunDir
from hpctrain.rundir.log_progress import PRESETS, LogProgress
from tests.unit.command.test_rank import finish, start


def scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    return [(event.step, round(event.value, 4)) for event in accumulator.Scalars(tag)]


def attempt(run_dir: Path, lines: list[str]) -> None:
    """One attempt of rank 0: its output parsed with the step-loss preset, the event files closed after."""
    sink = event_files(run_dir, 0, True)
    assert sink is not None
    parser = LogProgress(run_dir, re.compile(PRESETS["step-loss"]))
    parser.sinks.append(sink)
    for line in lines:
        parser.feed(line)
    parser.close()
    sink.close()


def test_parsed_lines_become_one_curve_across_a_restart_that_resumed_from_an_earlier_step(
    tmp_path: Path,
) -> None:
    # The first attempt logged to step 50 and saved at 30; the second resumes at 40 and logs 40 and 50 again.
    attempt(tmp_path, ["loading", *[f"step {s} loss {1 / s:.4f} lr 0.1" for s in (10, 20, 30, 40, 50)]])
    attempt(tmp_path, [f"step {s} loss {2 / s:.4f} lr 0.1" for s in (40, 50, 60)])
    board = RunDir(tmp_path).tensorboard
    assert len(list(board.iterdir())) == 2  # one event file per attempt, in the run's one log directory
    assert scalars(board, "train/loss") == [
        (10, 0.1),
        (20, 0.05),
        (30, 0.0333),
        (40, 0.05),
        (50, 0.04),
        (60, 0.0333),
    ]
    assert [step for step, _ in scalars(board, "train/lr")] == [10, 20, 30, 40, 50, 60]


def test_other_ranks_disabled_runs_and_runs_without_a_match_write_nothing(tmp_path: Path) -> None:
    assert event_files(tmp_path, 1, True) is None
    assert event_files(tmp_path, 0, False) is None
    attempt(tmp_path, ["no progress here"])
    assert not RunDir(tmp_path).tensorboard.exists()


def test_without_the_package_one_line_says_so_when_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("hpctrain.command.event_files.tensorboard_installed", lambda: False)
    assert event_files(tmp_path, 0, None) is None
    assert capsys.readouterr().err == ""
    assert event_files(tmp_path, 0, True) is None
    (line,) = capsys.readouterr().err.splitlines()
    assert "progress.tensorboard is on" in line and "pip install tensorboard" in line


def test_the_wrapper_writes_the_event_files_of_its_scripts_progress(tmp_path: Path) -> None:
    from hpctrain import spec

    script = "for step in range(1, 6):\n    print(f'step {step} loss {1 / step:.3f}', flush=True)\n"
    proc, run = start(tmp_path, script, progress=spec.Progress(preset="step-loss", tensorboard=True))
    code, out = finish(proc)
    assert code == 0, out
    assert scalars(run.tensorboard, "train/loss") == [(1, 1.0), (2, 0.5), (3, 0.333), (4, 0.25), (5, 0.2)]
