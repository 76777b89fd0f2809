"""`hpctrain submit --after`: the job waits for tracked runs or Slurm job ids, through the API's one path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpctrain.scheduler.base import JobState
from tests.conftest import JOBS
from tests.unit.fake_sbatch import directive, fake_sbatch
from tests.unit.tracked_runs import cli

JOB = str(JOBS / "digits-ddp.yaml")


@pytest.fixture
def sbatch(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    return fake_sbatch(monkeypatch, held={"77": JobState.RUNNING})


def test_after_names_a_tracked_run_by_its_run_id_or_an_untracked_job_by_its_id(
    hpctrain_home: Path, sbatch: list[Path]
) -> None:
    first = cli("submit", JOB, "--site", "local", "--backend", "slurm", "--json")
    assert first.code == 0, first.stderr
    run_id = json.loads(first.stdout)["run_id"]
    second = cli(
        "submit", JOB, "--site", "local", "--backend", "slurm", "--after", run_id, "--after", "77",
        "--after-kind", "afternotok",
    )  # fmt: skip
    assert second.code == 0, second.stderr
    assert directive(sbatch[1], "dependency") == ["#SBATCH --dependency=afternotok:4242:77"]


def test_after_a_job_that_is_no_slurm_job_is_one_line_and_submits_nothing(
    hpctrain_home: Path, sbatch: list[Path]
) -> None:
    outcome = cli("submit", JOB, "--site", "local", "--backend", "slurm", "--after", "nonsense")
    assert outcome.code == 2 and sbatch == []
    why = "nonsense is not a Slurm job id (a job of the local backend cannot be waited for)"
    assert outcome.stderr == f"hpctrain: error: after: {why}\n"
