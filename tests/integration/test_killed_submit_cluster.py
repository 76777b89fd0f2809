"""The job of a killed submit is found by the run id its comment carries, also once it left the queue."""

from __future__ import annotations

import subprocess
import time

import pytest

from hpctrain.scheduler.job_comment import carrying_comment
from hpctrain.scheduler.slurm.cli import SlurmCliBackend
from tests.integration.cluster import require_cluster

pytestmark = pytest.mark.cluster


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def accounted_state(job_id: str) -> str:
    out = subprocess.run(
        ["sacct", "-j", job_id, "--allocations", "--noheader", "--parsable2", "--format=State"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return out.strip().split("\n")[0] if out.strip() else ""


def test_accounting_names_the_run_of_a_job_that_left_the_queue() -> None:
    """Issue 23: sacct stored no job comments on the local cluster, so a killed submit's job was found
    only while squeue still listed it (MinJobAge), and its run was marked SUBMIT_FAILED after 300 s.
    Once a job leaves the queue, recovery asks accounting: its comment must be there."""
    run_id = f"20991231-235959-killed-{time.time_ns() % 16**6:06x}"
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--time=1", f"--comment={carrying_comment(run_id, None)}", "--wrap", "true"],
        capture_output=True,
        text=True,
        check=True,
    )
    job_id = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 240
    while accounted_state(job_id) not in ("COMPLETED", "FAILED") and time.monotonic() < deadline:
        time.sleep(1)
    assert accounted_state(job_id) == "COMPLETED", accounted_state(job_id)
    # What recovery asks once squeue no longer lists the job (after MinJobAge, 600 s here). slurmdbd
    # may record the comment a moment after the state.
    backend = SlurmCliBackend()
    deadline = time.monotonic() + 60
    while not backend.accounted_jobs_carrying({run_id}) and time.monotonic() < deadline:
        time.sleep(1)
    assert backend.accounted_jobs_carrying({run_id}) == {run_id: job_id}
    assert SlurmCliBackend().jobs_carrying([run_id]) == {run_id: job_id}
