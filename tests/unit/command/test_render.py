"""The batch script of a command job: its ranks run the wrapper, under srun and torchrun alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain import spec
from hpctrain.scheduler.render import render

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_a_command_jobs_ranks_run_the_wrapper_without_preflight_or_standby(
    launcher: str, tmp_path: Path
) -> None:
    overrides = [
        f"launcher={launcher}",
        "preflight=true",
        "restart.warm_standby=true",
        "resources.gpus_per_node=2",
    ]
    job = spec.load_job(ROOT / "jobs" / "ddp-script.yaml", overrides)
    script = render(spec.resolve(job, spec.load_site(ROOT / "site-configs" / "local.yaml")), tmp_path / "run")
    assert "-m hpctrain.command" in script or "(hpctrain.command)" in script
    assert "hpctrain.runtime.preflight" not in script and "standby" not in script.split("plan begin")[1]
    assert "hpctrain.runtime " not in script and "hpctrain.runtime)" not in script


def test_a_train_job_still_runs_the_runtime(tmp_path: Path) -> None:
    job = spec.load_job(ROOT / "jobs" / "digits-ddp.yaml")
    script = render(spec.resolve(job, spec.load_site(ROOT / "site-configs" / "local.yaml")), tmp_path / "run")
    assert "HPCTRAIN_RANK_MODULE=(hpctrain.runtime" in script and "hpctrain.command" not in script
