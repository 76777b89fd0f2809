"""On the real local Slurm: a job's files (the logs slurmd creates included) are private to the user,
and a job carries its run id, by which `index check` finds it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpctrain.scheduler.slurm.cli import SlurmCliBackend
from tests.conftest import JOBS, run_cli
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


def test_every_writer_of_an_optuna_sweep_keeps_its_files_private(
    hpctrain_home: Path, usual_umask: None
) -> None:
    """The submit, a later round (array-2/, array-3/ with their specs and swept env), the study's lock
    and journal, `hpctrain report` and `hpctrain sweep report`: nothing any of them wrote is open to
    others. The CLI runs under the test's umask 022."""
    pytest.importorskip("optuna", reason="sweep.sampler optuna needs the `sweep` extra (optuna)")
    quick = ["--set", "train.steps=20", "--set", "train.eval_every=10", "--set", "env.SWEPT_NOTE=x"]
    args = ["--site", "local", "--budget", "4", "--round-size", "2", *quick, "--json"]
    swept = ["--grid", "env.SWEPT_NOTE=a,b"]  # a swept env value: each trial gets a trial-env.sh
    proc = run_cli("sweep", str(JOBS / "digits-optuna.yaml"), *args, *swept, timeout=600)
    assert proc.returncode == 0, proc.stderr
    submitted = json.loads(proc.stdout)
    root = Path(submitted["run_dir"])
    for verb in (["report"], ["sweep", "report"]):
        report = run_cli(*verb, submitted["sweep_id"], timeout=300)
        assert report.returncode == 0, report.stderr
    paths = [root, *root.rglob("*")]
    names = {str(p.relative_to(root)) for p in paths}
    later_round = {"array-2", "array-2/spec.json", "array-2/trial-env.sh", "array-3/spec.json"}
    assert later_round | {"study.lock", "study.journal", "report", "report/report.md"} <= names, names
    loose = {str(p.relative_to(root)): oct(stat.S_IMODE(p.lstat().st_mode)) for p in paths}
    loose = {name: mode for name, mode in loose.items() if int(mode, 8) & 0o077}
    assert loose == {}, f"readable by others: {loose}"
