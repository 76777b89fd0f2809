"""The batch shell's last-resort guard on the real local cluster: a supervisor (the Python attempt
loop) killed with SIGKILL mid-training leaves no job stuck RUNNING. With preemption.requeue the job
is requeued and resumes from its checkpoint; without it the job fails, with one line in the batch log."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.integration.cluster import require_cluster, wait_state
from tests.integration.test_restarts import QUEUE_S, job_file, latest_step, logs, submit
from tests.launcher import wait_for

pytestmark = pytest.mark.cluster
LOOP = b"hpctrain.supervisor.attempt_loop"


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def supervisor_pid(run: Path) -> int | None:
    """The attempt loop of the run (the local cluster's nodes are processes of this host)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if LOOP in command and f"HPCTRAIN_RUN_DIR={run}".encode() in environ:
            return int(entry.name)
    return None


@pytest.mark.parametrize("requeue", [True, False])
def test_a_killed_supervisor_requeues_or_fails_the_job_cleanly(
    requeue: bool, hpctrain_home: Path, tmp_path: Path
) -> None:
    train = {"steps": 200, "checkpoint_every": 40}
    path = job_file(tmp_path, "guard", train, preemption={"requeue": requeue})
    entry = submit(path)
    job_id = entry["job_id"]
    run = Path(entry["run_dir"])
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        assert wait_for(lambda: latest_step(run) >= 50, timeout=180), logs(run)
        pid = supervisor_pid(run)
        assert pid is not None, logs(run)
        os.kill(pid, signal.SIGKILL)
        final = wait_state(job_id, set(), timeout=400)
        batch = (run / "logs" / "batch.log").read_text()
        if requeue:
            assert f"hpctrain: the supervisor died (exit code 137): requeued job {job_id}" in batch, logs(run)
            assert final["state"] == "COMPLETED", logs(run)
        else:
            assert f"hpctrain: the supervisor died (exit code 137): job {job_id} fails" in batch, logs(run)
            assert final["state"] == "FAILED", logs(run)
    finally:
        subprocess.run(["scancel", job_id], check=False)
