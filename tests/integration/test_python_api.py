"""The Python API against the real local Slurm: submit, wait, result, metrics, logs, cancel, and a pipeline
of dependent jobs (`after=`) run by the example script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hpctrain
from hpctrain.rundir import EvalLine, TrainLine
from tests.conftest import REPO
from tests.integration.cluster import require_cluster, scontrol_job

pytestmark = pytest.mark.cluster

QUICK = ["train.steps=30", "train.log_every=10", "train.eval_every=30", "train.checkpoint_every=0"]


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def test_submit_wait_and_read_a_run_through_the_api(hpctrain_home: Path) -> None:
    run = hpctrain.submit("digits-ddp", "local", QUICK, backend="slurm")
    seen: list[str] = []
    final = run.wait(timeout=600, progress=lambda status: seen.append(status.state))
    assert final.state == "COMPLETED", final
    assert isinstance(final, hpctrain.RunStatus) and seen[-1] == "COMPLETED"
    result = run.result()
    assert isinstance(result, hpctrain.Result) and (result.step, result.steps) == (30, 30)
    assert result.eval_loss is not None
    metrics = run.metrics()
    train_steps = [line.step for line in metrics if isinstance(line, TrainLine)]
    assert train_steps[-1] == 30 and any(isinstance(line, EvalLine) for line in metrics)
    assert "rank 0" in run.logs(rank=0)
    assert hpctrain.find_run(run.job_id or "").run_id == run.run_id
    assert run.run_id in {r.run_id for r in hpctrain.list_runs()}


def test_a_job_waits_for_the_one_it_comes_after_and_a_cancel_ends_both(hpctrain_home: Path) -> None:
    first = hpctrain.submit("digits-ddp", "local", [*QUICK, "begin=now+1hour"], backend="slurm")
    second = hpctrain.submit("digits-ddp", "local", QUICK, backend="slurm", after=[first])
    try:
        assert f"Dependency=afterok:{first.job_id}" in scontrol_job(second.job_id or "")
        assert second.status().state == "PENDING"
    finally:
        hpctrain.cancel([first, second])
    for run in (first, second):
        assert run.wait(timeout=120).state == "CANCELLED"


def test_waiting_past_the_timeout_is_an_error_of_hpctrain(hpctrain_home: Path) -> None:
    run = hpctrain.submit("digits-ddp", "local", [*QUICK, "begin=now+1hour"], backend="slurm")
    try:
        with pytest.raises(hpctrain.WaitTimeout, match=f"job {run.job_id} \\(PENDING\\)"):
            run.wait(timeout=1)
    finally:
        run.cancel()
    assert run.wait(timeout=120).state == "CANCELLED"


def test_the_pipeline_example_runs_its_stages_one_after_the_other(hpctrain_home: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hpctrain.examples.pipeline", "--site", "local", "--steps", "30"],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "HPCTRAIN_BACKEND": "slurm"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    done = [line for line in proc.stdout.splitlines() if "eval loss" in line]
    assert [line.split(":")[0] for line in done] == ["smoke", "train", "seed 1"], proc.stdout
    runs = {r.name: r for r in hpctrain.list_runs(everything=True)}
    train = runs["digits-train"]
    smoke_id = runs["digits-smoke"].job_id
    # The training was submitted to wait for the smoke run, and Slurm started it only once that had ended.
    assert f"afterok:{smoke_id}" in (train.run_dir / "job.sbatch").read_text()
    assert train.result().steps == 30
    times = accounted_times([smoke_id or "", train.job_id or ""])
    assert times[train.job_id or ""][0] >= times[smoke_id or ""][1], times


def accounted_times(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """(start, end) of each job as accounting holds them (ISO times: they order as text)."""
    out = subprocess.run(
        ["sacct", "-n", "-X", "--parsable2", "-j", ",".join(job_ids), "-o", "JobID,Start,End"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split("|") for line in out.splitlines() if line.strip()]
    return {job: (start, end) for job, start, end in rows}
