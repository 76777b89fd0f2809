"""The goodput split of a real run on the local cluster: a 2 x 2 digits job with one rank killed.

The split that `status --json` carries adds up to the run's wall time, and puts the steps after the
last checkpoint in rollback and the time from the kill to the supervisor's decision in detection.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hpctrain.rundir import EventLine, RunDir, TrainLine
from hpctrain.rundir.attempts import History
from hpctrain.rundir.goodput import PARTS, read_metric_events
from tests.conftest import run_cli
from tests.integration.cluster import require_cluster, wait_state
from tests.integration.test_restarts import QUEUE_S, latest_step, logs, submit_two_by_two
from tests.launcher import wait_for

pytestmark = pytest.mark.cluster
# The kill's moment as the run's records date it (failure reports, heartbeats) against the test's
# own clock: the same host, so only the evidence's granularity (a heartbeat tick) lies between.
EVIDENCE_S = 2.5


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def checkpointed(run: Path, step: int) -> bool:
    return any(
        isinstance(line, EventLine) and line.event == "checkpoint" and line.step == step
        for line in read_metric_events(RunDir(run))
    )


def test_a_killed_rank_splits_into_rollback_and_detection(hpctrain_home: Path, tmp_path: Path) -> None:
    # Memory checkpoints off: the restart loads the disk checkpoint, so logged steps are rolled back
    # (from memory it resumes at the killed step and nothing is; test_recovery.py covers that).
    train = {"steps": 300, "checkpoint_every": 50, "log_every": 10, "memory_checkpoint_every": 0}
    job_id, run = submit_two_by_two(tmp_path, "goodput-kill", train)
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        # Killed between two checkpoints, some logged steps past the last one: they are the rollback.
        between = lambda: checkpointed(run, 50) and 10 <= latest_step(run) % 50 <= 30  # noqa: E731
        assert wait_for(between, timeout=240), logs(run)
        os.kill(int((run / "pids" / "rank-1").read_text()), signal.SIGKILL)
        killed = time.time()
        final = wait_state(job_id, set(), timeout=400)
        assert final["state"] == "COMPLETED", logs(run)
    finally:
        subprocess.run(["scancel", job_id], check=False)
    proc = run_cli("status", job_id, "--json")
    assert proc.returncode == 0, proc.stderr
    (entry,) = json.loads(proc.stdout)
    split = entry["goodput"]
    history = History.read(RunDir(run))
    first_end, second_start = history.ends[0], history.lines[2]
    metrics = read_metric_events(RunDir(run))
    print(f"\nthe split: {json.dumps({k: v for k, v in split.items() if k != 'attempts'})}")

    # Every second in one part, and the parts add up to the wall time (within their rounding).
    parts = [split.get(f"{part}_s", 0.0) for part in PARTS]
    assert all(part >= 0 for part in parts) and math.isclose(sum(parts), split["wall_s"], abs_tol=0.01)
    assert split["wall_s"] == pytest.approx(history.lines[-1].time - entry["submitted_at"], abs=0.01)
    shares = [sum(a.get(f"{p}_s", 0.0) for p in PARTS) for a in split["attempts"]]
    assert math.isclose(sum(shares), split["wall_s"], abs_tol=0.05)

    # The supervisor dated the fault by its evidence, close to the kill.
    assert first_end.outcome == "rank_failure" and first_end.fault_time is not None, first_end
    assert abs(first_end.fault_time - killed) < EVIDENCE_S, (first_end.fault_time, killed)
    # Detection: from the kill to the supervisor's decision; the killed attempt's share holds it all.
    attempt0, attempt1 = split["attempts"]
    assert attempt0["outcome"] == "rank_failure" and attempt1["outcome"] == "completed"
    assert split["detection_s"] == pytest.approx(first_end.time - killed, abs=EVIDENCE_S)
    assert attempt0["detection_s"] == split["detection_s"] and attempt1.get("detection_s", 0.0) == 0.0
    # Rollback: the steps after the resume step (the checkpoint loaded), up to the kill.
    resumed = next(e for e in metrics if isinstance(e, EventLine) and e.event == "resumed")
    assert resumed.step is not None and resumed.step >= 50
    logged = [t for t in metrics if isinstance(t, TrainLine) and t.time is not None and t.time < killed]
    at_resume_step = next(t for t in logged if t.step == resumed.step)
    assert at_resume_step.time is not None
    lost_steps = max(t.step for t in logged) - resumed.step
    assert split["rolled_back_steps"] == lost_steps > 0
    saves = [e for e in metrics if isinstance(e, EventLine) and e.event == "checkpoint"]
    blocked = sum(e.save_s or 0.0 for e in saves if e.step == resumed.step)
    expected = killed - at_resume_step.time - blocked
    assert attempt0["rollback_s"] == pytest.approx(expected, abs=EVIDENCE_S), (attempt0, expected)
    assert attempt1.get("rollback_s", 0.0) == 0.0
    # The restart's start-up: from the decision to the resumed event, in the second attempt's share.
    assert attempt1["startup_s"] >= (resumed.time or 0.0) - second_start.time > 0

    # `report` shows the same split.
    shown = run_cli("report", job_id, "-o", str(tmp_path / "report"))
    assert shown.returncode == 0, shown.stderr
    page = (tmp_path / "report" / "report.md").read_text()
    assert (
        "## Where the time went" in page and f"| steps lost to rollback | {split['rollback_s']:.1f} |" in page
    )
