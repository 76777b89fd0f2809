"""The pipeline example builds a valid job in Python and chains its stages with after=."""

from __future__ import annotations

from pathlib import Path

import pytest

import hpctrain
from hpctrain.examples import pipeline
from hpctrain.scheduler.slurm.cli import SlurmCliBackend


def test_the_job_built_in_python_validates_and_renders_for_the_local_site() -> None:
    request = hpctrain.render(pipeline.digits_job(30), "local", ["name=digits-train"], backend="slurm")
    assert request.resolved.job.train.steps == 30 and request.resolved.job.resources.gpus_per_node == 2
    assert "#SBATCH --job-name=digits-train" in request.script


def test_each_stage_waits_for_the_one_before(hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scripts: list[str] = []

    def submit(self: SlurmCliBackend, script: Path, run_dir: Path, batch: object = None) -> str:
        scripts.append(script.read_text())
        return str(100 + len(scripts))

    def wait(self: hpctrain.Run, timeout: float | None = None, progress: object = None) -> object:
        raise hpctrain.WaitTimeout("stop here")

    monkeypatch.setattr(SlurmCliBackend, "submit", submit)
    monkeypatch.setattr(SlurmCliBackend, "cancel", lambda self, ids: None)
    monkeypatch.setattr(hpctrain.Run, "wait", wait)
    assert pipeline.main(["--site", "local", "--backend", "slurm", "--steps", "30"]) == 1
    dependencies = [[line for line in s.splitlines() if "--dependency" in line] for s in scripts]
    assert dependencies == [[], ["#SBATCH --dependency=afterok:101"], ["#SBATCH --dependency=afterok:102"]]
