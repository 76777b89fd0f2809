"""The pipeline example builds a valid job in Python and chains its stages with after=."""

from __future__ import annotations

from pathlib import Path

import pytest

import hpctrain
from hpctrain.examples import pipeline
from hpctrain.scheduler.slurm.cli import SlurmCliBackend
from tests.unit.fake_sbatch import directive, fake_sbatch


def test_the_job_built_in_python_validates_and_renders_for_the_local_site() -> None:
    request = hpctrain.render(pipeline.digits_job(30), "local", ["name=digits-train"], backend="slurm")
    assert request.resolved.job.train.steps == 30 and request.resolved.job.resources.gpus_per_node == 2
    assert "#SBATCH --job-name=digits-train" in request.script


def test_each_stage_waits_for_the_one_before(hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scripts = fake_sbatch(monkeypatch)

    def wait(self: hpctrain.Run, timeout: float | None = None, progress: object = None) -> object:
        raise hpctrain.WaitTimeout("stop here")

    monkeypatch.setattr(SlurmCliBackend, "cancel", lambda self, ids: None)
    monkeypatch.setattr(hpctrain.Run, "wait", wait)
    assert pipeline.main(["--site", "local", "--backend", "slurm", "--steps", "30"]) == 1
    dependencies = [directive(script, "dependency") for script in scripts]
    assert dependencies == [[], ["#SBATCH --dependency=afterok:4242"], ["#SBATCH --dependency=afterok:4243"]]
