"""Against the real local Slurm: a requeued job's pending reason, and dependencies that can never be met
refused before sbatch (Slurm drops a dependency on a job it has forgotten and starts the job at once)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

import hpctrain
from hpctrain.rundir import RunDir
from tests.integration.cluster import require_cluster

pytestmark = pytest.mark.cluster

HELD = ["train.steps=30", "begin=now+1hour"]


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def test_afterok_on_a_cancelled_run_and_on_a_job_slurm_never_had_are_refused(hpctrain_home: Path) -> None:
    held = hpctrain.submit("digits-ddp", "local", HELD, backend="slurm")
    hpctrain.cancel([held])
    assert held.wait(timeout=120).state == "CANCELLED"
    with pytest.raises(
        hpctrain.InputError, match=f"job {held.job_id} .*ended CANCELLED, so afterok can never"
    ):
        hpctrain.submit("digits-ddp", "local", HELD, backend="slurm", after=[held])
    with pytest.raises(hpctrain.InputError, match="job 987654321 is neither tracked by hpctrain nor known"):
        hpctrain.submit("digits-ddp", "local", HELD, backend="slurm", after="987654321")
    assert len(hpctrain.list_runs(everything=True)) == 1  # nothing else was submitted


def test_a_requeued_job_says_why_it_pends_and_which_attempt_comes_next(hpctrain_home: Path) -> None:
    run = hpctrain.submit(
        "digits-ddp", "local", ["train.steps=100000", "train.checkpoint_every=0"], backend="slurm"
    )
    try:
        attempts = RunDir(run.run_dir).attempts
        deadline = time.monotonic() + 180
        while not (attempts.exists() and b'"start"' in attempts.read_bytes()):
            assert time.monotonic() < deadline, run.status()
            time.sleep(1)
        subprocess.run(["scontrol", "requeue", run.job_id or ""], check=True, capture_output=True)
        deadline = time.monotonic() + 60
        while (status := run.status()).state != "PENDING":
            assert time.monotonic() < deadline, status
            time.sleep(0.5)
        assert status.reason.startswith("attempt 1 next, requeued after"), status.reason
    finally:
        hpctrain.cancel([run])
