"""Faults injected into real parameter-server hetjobs on the local cluster: the job completes by itself.

A worker killed with kill -9 is dropped and training goes on with the workers left (async and
sync); a server killed with kill -9 ends the step, and the supervisor restarts servers and workers
in the same allocation from the parameter-server checkpoint. Status names the component that
failed. The jobs import ``tests.launcher:faulty`` (a slower digits step, so that the kill lands
mid-training) from the repository, which the submitting environment's PYTHONPATH carries into the job.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hpctrain.rundir import Result, RunDir
from hpctrain.rundir.attempts import History
from tests.conftest import JOBS, run_cli
from tests.integration import faults
from tests.integration.cluster import require_cluster, run_dir, submit, wait_state
from tests.launcher import metrics, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

PS_JOB = JOBS / "digits-ps-async.yaml"
QUEUE_S = 600  # a test job may wait this long behind other helpers' jobs on the shared cluster
STEPS = 240
SERVER, WORKER_1 = 0, 2  # 1 server (rank 0), then workers 0 and 1 (ranks 1 and 2)


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def latest_step(run: Path) -> int:
    return max((m["step"] for m in metrics(run) if m.get("kind") == "train"), default=0)


def logs(run: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted((run / "logs").glob("*.log")))


def status_text(job_id: str) -> str:
    proc = run_cli("status", job_id)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def kill_mid_training(
    mode: str, rank: int, at_step: int, sig: signal.Signals = signal.SIGKILL, *overrides: str
) -> tuple[dict[str, Any], Path]:
    """Submit the digits PS hetjob, send `sig` to `rank` once the servers are at `at_step`, wait
    for the job's end."""
    done = submit(
        PS_JOB,
        f"train.steps={STEPS}",
        f"train.parallel.ps.mode={mode}",
        "resources.tasks_per_node=2",
        "train.parallel.ps.worker_timeout=15",
        "train.timeout_s=60",
        "train.checkpoint_every=20",
        "train.entrypoint=tests.launcher:faulty",
        "train.options.delay_s=0.03",
        *overrides,
    )
    job_id = done["job_id"]
    try:
        entry = wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        run = run_dir(entry)
        assert wait_for(lambda: latest_step(run) >= at_step, timeout=300), logs(run)
        faults.signal_rank(run, rank, sig)
        final = wait_state(job_id, set(), timeout=400)
        assert final["state"] == "COMPLETED", logs(run)
        return final, run
    finally:
        subprocess.run(["scancel", job_id], check=False)


def result_of(run: Path) -> Result:
    result = RunDir(run).read_result()
    assert isinstance(result, Result), result
    assert (result.status, result.step, result.steps) == ("completed", STEPS, STEPS), result
    return result


def worker_node(result: Result) -> str:
    assert result.nodes is not None
    (node,) = set(result.nodes["workers"])
    return node


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_killed_worker_is_dropped_and_the_others_finish(
    mode: str, hpctrain_home: Path, tmp_path: Path
) -> None:
    final, run = kill_mid_training(mode, WORKER_1, at_step=40)
    result = result_of(run)
    assert result.per_worker is not None and result.per_worker["1"].status == "dropped", result.per_worker
    assert result.per_worker["0"].status == "finished", result.per_worker
    # Status names the component, its node and what happened to it.
    text = status_text(final["job_id"])
    assert f"worker 1: dropped (lost on {worker_node(result)} at its step" in text, text
    # One attempt, watched by the supervisor: the step went on without the worker, no restart.
    assert [line.outcome for line in History.read(RunDir(run)).ends] == ["completed"], logs(run)


def test_a_killed_server_restarts_from_its_checkpoint_and_the_workers_carry_on(
    hpctrain_home: Path, tmp_path: Path
) -> None:
    final, run = kill_mid_training("async", SERVER, at_step=60)
    result_of(run)
    history = History.read(RunDir(run))
    assert [line.outcome for line in history.ends] == ["rank_failure", "completed"], logs(run)
    assert {line.job_id for line in history.lines} == {final["job_id"]}  # the same allocation
    first_end = history.ends[0]
    assert first_end.reason.startswith("server 0 (rank 0) on "), first_end.reason
    resumed = [m for m in metrics(run) if m.get("event") == "resumed"]
    assert resumed and resumed[-1]["step"] >= 40, resumed  # from the checkpoint, not from step 0
    # Both workers carried on to the end in the second attempt.
    result = RunDir(run).read_result()
    assert isinstance(result, Result) and result.per_worker is not None
    assert {w.status for w in result.per_worker.values()} == {"finished"}, result.per_worker
    text = status_text(final["job_id"])
    assert "restarts: 1 of 3 (rank_failure" in text and "server 0 (rank 0) on " in text, text


def test_a_stopped_server_is_a_hang_named_by_its_role_and_restarts_from_its_checkpoint(
    hpctrain_home: Path, tmp_path: Path
) -> None:
    """kill -STOP of the server: the watchdog names it hung, ends the step, and the next attempt
    resumes from the checkpoint (before the workers' own timeout would have given up on it)."""
    # Slower steps and fresher node files: the server is stopped mid-training, seen at its step.
    slower = ("watchdog.hang_timeout=10", "watchdog.heartbeat_interval=1", "train.options.delay_s=0.1")
    final, run = kill_mid_training("async", SERVER, 100, signal.SIGSTOP, *slower)
    result_of(run)
    history = History.read(RunDir(run))
    assert [line.outcome for line in history.ends] == ["hang", "completed"], logs(run)
    assert history.ends[0].reason.startswith("server 0 (rank 0) on "), history.ends[0].reason
    assert "hung at step" in history.ends[0].reason, history.ends[0].reason
    assert "server 0 (rank 0) on " in status_text(final["job_id"])
