"""`hpctrain doctor`'s preflight job as the scheduler seam renders it: the script, its options as data."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from hpctrain import spec
from hpctrain.errors import BackendError
from hpctrain.scheduler.local import LocalBackend
from hpctrain.scheduler.render import DoctorJob, doctor_options
from hpctrain.scheduler.slurm import pyslurm as pb
from hpctrain.scheduler.slurm.cli import SlurmCliBackend
from tests.conftest import SITES
from tests.unit.scheduler.test_render import shellcheck


def doctor_job(site: Path, gpus: int = 0) -> DoctorJob:
    profile = spec.load_site(site)
    partition, _ = profile.partition(None)
    return DoctorJob(profile, partition, ["node1", "node2"], gpus, 0.5)


@pytest.mark.parametrize("site", sorted(SITES.glob("*.yaml")), ids=lambda p: p.stem)
def test_the_doctors_job_renders_shellcheck_clean_for_every_shipped_site(site: Path, tmp_path: Path) -> None:
    request = SlurmCliBackend().prepare(doctor_job(site, gpus=2), tmp_path / "run")
    assert request.path == tmp_path / "run" / "job.sbatch"
    for directive in request.batch[0]:  # the #SBATCH lines are the options the backend hands on
        assert f"#SBATCH {directive.text}\n" in request.script
    assert "-m hpctrain.runtime.preflight --tolerance 0.5" in request.script
    shellcheck(request.script, tmp_path)


def test_its_options_ask_for_one_task_on_each_named_node_and_the_gpus_they_have(tmp_path: Path) -> None:
    (options,) = doctor_options(doctor_job(SITES / "local.yaml", gpus=2), tmp_path / "run-1")
    given = {d.option: d.value for d in options}
    assert given["nodes"] == "2" and given["nodelist"] == "node1,node2" and given["ntasks-per-node"] == "1"
    assert given["gres"] == "gpu:2" and given["comment"] == "hpctrain-run=run-1"
    assert given["output"] == f"{tmp_path}/run-1/logs/batch.log"
    (without,) = doctor_options(doctor_job(SITES / "local.yaml"), tmp_path / "run-1")
    assert "gres" not in {d.option for d in without}


def test_pyslurm_submits_the_doctors_job_from_its_options(tmp_path: Path) -> None:
    batch = doctor_options(doctor_job(SITES / "local.yaml", gpus=1), tmp_path)
    assert pb.unsupported_options(batch) == [] and pb.sbatch_only(batch) is None
    description = SimpleNamespace()
    pb.apply_options(description, batch)
    assert description.required_nodes == "node1,node2" and description.ntasks_per_node == 1


def test_the_local_backend_refuses_the_doctors_job(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="checks a Slurm cluster"):
        LocalBackend().prepare(doctor_job(SITES / "local.yaml"), tmp_path)
