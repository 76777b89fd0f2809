"""Progress of waited-on jobs in the terminal: plain lines, rich bars, ETA; rich not imported to start."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from hpctrain.cli.view.progress import ProgressView, duration
from hpctrain.rundir import RunDir, TrainLine
from hpctrain.scheduler.base import Blocked
from hpctrain.tracking.status import RunStatus
from tests.unit.tracked_runs import assembled


def _status(tmp_path: Path, state: str, *lines: TrainLine) -> RunStatus:
    run = RunDir(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    for line in lines:
        run.append_metric(line)
    return assembled(tmp_path, state, "digits")


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


def test_a_job_that_can_never_run_says_so_while_waited_on(tmp_path: Path) -> None:
    out = io.StringIO()
    view = ProgressView(out)
    pending = _status(tmp_path, "PENDING")
    pending.blocked = Blocked("its ExcNodeList node1 leaves 0 of the 1 nodes", "`hpctrain cancel 42`")
    view.update([pending])
    view.close()
    assert out.getvalue().split(" ", 1)[1] == "42 digits PENDING (can never run: `hpctrain status 42`)\n"


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
