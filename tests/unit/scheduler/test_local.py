"""The local backend's poll when the job ends between its two looks (file, then process)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hpctrain.rundir import RunDir
from hpctrain.scheduler import local
from hpctrain.scheduler.base import JobState


def _submit(tmp_path: Path, body: str) -> tuple[local.LocalBackend, str, RunDir]:
    run = RunDir(tmp_path / "run")
    run.root.mkdir(parents=True)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    backend = local.LocalBackend()
    return backend, backend.submit(script, run.root), run


def _wait_for_end(backend: local.LocalBackend, job_id: str) -> JobState:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = backend.poll([job_id])[job_id].state
        if state is not JobState.RUNNING:
            return state
        time.sleep(0.05)
    raise AssertionError(f"{job_id} still running after 30 s")


@pytest.mark.usefixtures("hpctrain_home")
def test_a_job_that_ends_while_being_polled_is_completed_not_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race CI met: the exit file appears after poll found it missing, and then the process is gone."""
    backend, job_id, run = _submit(tmp_path, "sleep 30")
    real_alive = local._alive

    def ends_during_the_look(pid: int) -> bool:
        # The wrapper's last two acts, done right at the moment poll asks: write the code, then end.
        if not run.local_exit_code.exists():
            run.local_exit_code.write_text("0\n")
        return False

    monkeypatch.setattr(local, "_alive", ends_during_the_look)
    info = backend.poll([job_id])[job_id]
    assert info.state is JobState.COMPLETED, info
    assert info.exit_code == "0"
    monkeypatch.setattr(local, "_alive", real_alive)
    run.local_exit_code.unlink()
    backend.cancel([job_id])
    assert _wait_for_end(backend, job_id) is JobState.CANCELLED


@pytest.mark.usefixtures("hpctrain_home")
@pytest.mark.parametrize(
    ("body", "state", "code"), [("true", JobState.COMPLETED, "0"), ("exit 3", JobState.FAILED, "3")]
)
def test_a_short_job_ends_in_the_state_its_exit_code_says(
    tmp_path: Path, body: str, state: JobState, code: str
) -> None:
    backend, job_id, _ = _submit(tmp_path, body)
    assert _wait_for_end(backend, job_id) is state
    assert backend.poll([job_id])[job_id].exit_code == code


USER_MODULE = """
from hpctrain.examples import digits


def build(train):
    return digits.build(train)
"""


@pytest.mark.usefixtures("hpctrain_home")
def test_a_local_run_imports_the_users_module_from_the_submit_directory(tmp_path: Path) -> None:
    """`--backend local` starts the ranks where `submit` ran, as sbatch does: a module beside the
    spec, which the submit check finds there, must import in every rank too (it once failed there)."""
    import json

    from tests.conftest import run_cli

    (tmp_path / "my_model.py").write_text(USER_MODULE)
    (tmp_path / "job.yaml").write_text(
        "name: mine\nresources: {nodes: 1, tasks_per_node: 2, mem: 1G}\n"
        "train: {entrypoint: 'my_model:build', parallel: ddp, steps: 3, batch_size: 8, log_every: 1,\n"
        "        eval_every: 0, checkpoint_every: 0}\nenv: {OMP_NUM_THREADS: 1}\n"
    )
    proc = run_cli(
        "submit", "job.yaml", "--site", "local", "--backend", "local", "--wait", cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = json.loads(run_cli("status", "--json", cwd=tmp_path).stdout)
    assert [s["state"] for s in status] == ["COMPLETED"], status
    log = (Path(status[0]["run_dir"]) / "logs" / "batch.log").read_text()
    assert "ModuleNotFoundError" not in log
