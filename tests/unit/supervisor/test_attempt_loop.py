"""The attempt loop's steps (hpctrain.supervisor.attempt_loop): the srun command line each launcher
gets, the rank program in each of them, and the job's end as the batch shell's guard reads it."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from hpctrain import spec
from hpctrain.rundir import RunDir
from hpctrain.scheduler.rank_program import rank_program
from hpctrain.supervisor.attempt_loop import AttemptLoop
from hpctrain.supervisor.supervise import Job
from tests.conftest import JOBS, SITES

NODES = ["node1", "node2"]


def loop_of(
    tmp_path: Path, job_file: str = "digits-ddp.yaml", overrides: list[str] | None = None
) -> AttemptLoop:
    resolved = spec.resolve(
        spec.load_job(JOBS / job_file, overrides or []), spec.load_site(SITES / "local.yaml")
    )
    run = RunDir(tmp_path)
    job = Job(
        run, "42", resolved.job.restart, resolved.job.resources.nodes, resolved.job.resources.ntasks_per_node
    )
    return AttemptLoop(run, tmp_path, resolved, job, "42")


def test_srun_ranks_run_the_rank_program_on_the_attempts_nodes(tmp_path: Path) -> None:
    loop = loop_of(tmp_path)
    argv = loop.rank_step(NODES)
    assert argv[:3] == ["srun", "--overlap", "--kill-on-bad-exit=1"]
    assert "--nodes=2" in argv and "--ntasks=4" in argv and "--nodelist=node1,node2" in argv
    assert f"--output={tmp_path}/logs/rank-%t.log" in argv
    assert argv[-len(loop.program) - 2 :] == [sys.executable, "-m", *loop.program]


@pytest.mark.parametrize("preflight", [True, False])
def test_the_rank_program_checks_the_nodes_first_only_with_preflight(preflight: bool) -> None:
    resolved = spec.resolve(spec.load_job(JOBS / "digits-ddp.yaml"), spec.load_site(SITES / "local.yaml"))
    program = rank_program(resolved, preflight)
    assert program == (["hpctrain.runtime.preflight", "--then-train"] if preflight else ["hpctrain.runtime"])


def test_fork_runs_one_task_per_node_that_forks_the_ranks(tmp_path: Path) -> None:
    loop = loop_of(tmp_path, overrides=["launcher=fork"])
    argv = loop.rank_step(NODES)
    assert "--ntasks=2" in argv and "--ntasks-per-node=1" in argv and "--cpus-per-task=2" in argv
    assert argv[-len(loop.program) - 3 :] == ["-m", "hpctrain.runtime.fork_ranks", "2", *loop.program]


def test_mpi_passes_the_sites_plugin(tmp_path: Path) -> None:
    loop = loop_of(tmp_path, overrides=["launcher=mpi"])
    assert f"--mpi={loop.ctx['mpi']}" in loop.rank_step(NODES)


def test_torchrun_starts_one_agent_per_node_with_a_rendezvous_per_attempt(tmp_path: Path) -> None:
    loop = loop_of(tmp_path, overrides=["launcher=torchrun"])
    argv = loop.torchrun_step(NODES, 3, "node1:20001")
    assert "--ntasks=2" in argv and "--nproc-per-node=2" in argv and "--rdzv-backend=c10d" in argv
    assert "--rdzv-endpoint=node1:20001" in argv and "--rdzv-id=42-3" in argv and "--max-restarts=0" in argv
    assert argv[-2:] == ["-m", "hpctrain.runtime"]  # torchrun's preflight is a step of its own


def test_a_parameter_server_job_runs_one_step_over_both_components(tmp_path: Path) -> None:
    loop = loop_of(tmp_path, job_file="digits-ps-async.yaml")
    assert loop.ctx["heterogeneous"]
    assert loop.rank_step(NODES)[:3] == ["srun", "--overlap", "--kill-on-bad-exit=0"]


def test_the_warm_standby_steps_run_the_rank_program_per_node(tmp_path: Path) -> None:
    loop = loop_of(tmp_path, overrides=["restart.warm_standby=true", "preemption.signal=USR2"])
    assert loop.standby is not None and loop.standby.go_signal.name == "SIGUSR1"
    argv = loop.standby_step("@NODE@", "/s/@NODE@-%t.log")
    assert "--nodes=1" in argv and "--nodelist=@NODE@" in argv and "--ntasks=2" in argv
    assert argv[-len(loop.program) - 2 :] == ["-m", "hpctrain.runtime.standby", *loop.program]
    assert loop_of(tmp_path, overrides=["restart.warm_standby=true", "launcher=torchrun"]).standby is None


def test_the_job_end_is_appended_for_the_shells_guard(tmp_path: Path) -> None:
    loop = loop_of(tmp_path)
    assert loop.finish(3) == 3
    assert RunDir(tmp_path).exit_codes.read_text() == "42 3\n"


def test_a_requeue_that_slurm_refuses_ends_the_job_with_a_code_the_guard_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reported as a requeue, the job would end for good while its log said it was coming back."""
    from hpctrain.errors import BackendError
    from hpctrain.supervisor import attempt_loop

    def refused(job_ref: str, exclude: list[str]) -> list[str]:
        raise BackendError(f"scontrol requeuehold {job_ref} failed: Requested operation is disabled")

    monkeypatch.setattr(attempt_loop, "requeue_now", refused)
    monkeypatch.setattr(attempt_loop, "excluded_nodes", lambda ref: [])
    loop = loop_of(tmp_path)
    try:
        code = loop.requeue(["node2"])
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert code == attempt_loop.REQUEUE_REFUSED != 0
    assert RunDir(tmp_path).exit_codes.read_text() == f"42 {code}\n"
    assert "Slurm refused the requeue (scontrol requeuehold 42 failed" in capsys.readouterr().out
