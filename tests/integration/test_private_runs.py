"""On the real local Slurm: a job's files (the logs slurmd creates included) are private to the user,
and a job carries its run id, by which `index check` finds it."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpctrain.scheduler.slurm.cli import SlurmCliBackend
from tests.conftest import JOBS
from tests.integration.cluster import require_cluster, run_dir, submit, wait_state

pytestmark = pytest.mark.cluster

QUICK = ["train.steps=20", "train.log_every=10", "train.eval_every=0", "train.checkpoint_every=0"]


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


@pytest.fixture
def usual_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_a_real_jobs_files_and_logs_are_private(hpctrain_home: Path, usual_umask: None) -> None:
    done = submit(JOBS / "digits-ddp.yaml", *QUICK)
    entry = wait_state(done["job_id"], {"COMPLETED"}, timeout=300)
    assert entry["state"] == "COMPLETED", entry
    root = run_dir(entry)
    paths = [root, *root.rglob("*")]
    names = {str(p.relative_to(root)) for p in paths}
    assert {"logs/batch.log", "logs/rank-0.log", "metrics.jsonl", "result.json", "job.sbatch"} <= names
    loose = {str(p.relative_to(root)): oct(stat.S_IMODE(p.lstat().st_mode)) for p in paths}
    loose = {name: mode for name, mode in loose.items() if int(mode, 8) & 0o077}
    assert loose == {}, f"readable by others: {loose}"
    assert stat.S_IMODE(hpctrain_home.stat().st_mode) == 0o700


def test_a_job_carries_its_run_id_and_is_found_by_it(hpctrain_home: Path) -> None:
    # Held at submission: the job sits in the queue for the test and never runs.
    done = submit(JOBS / "digits-ddp.yaml", *QUICK, "sbatch.hold=true")
    job_id, run_id = done["job_id"], Path(done["run_dir"]).name
    try:
        assert SlurmCliBackend().jobs_carrying([run_id, "20990101-000000-none-000000"]) == {run_id: job_id}
    finally:
        subprocess.run(["scancel", job_id], check=False)
