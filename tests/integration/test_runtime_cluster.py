"""The runtime on the real local Slurm cluster: 2 nodes x 2 tasks, gloo, srun --kill-on-bad-exit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import _runtime_job as job
import pytest
import torch

from hpctrain.tracking.poll import failed_tasks
from tests.integration.cluster import require_cluster

pytestmark = pytest.mark.cluster


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


DIGITS = dict(steps=150, batch_size=64, lr=0.003, log_every=10, deterministic=True, export_final=True)
SLOW = {**DIGITS, "entrypoint": "_runtime_job:slow_digits", "options": {"delay_s": 0.05}}


TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def finish(job_id: str, timeout: float = 120) -> str:
    """The job's end state: queue time (other tests' jobs) does not count against ``timeout``."""
    job.wait_state(job_id, {"RUNNING"} | TERMINAL, timeout=job.QUEUE_TIMEOUT)
    return job.wait_state(job_id, TERMINAL, timeout=timeout)


def final_model(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "final_model.pt")


def show_logs(run_dir: Path) -> str:
    logs = sorted((run_dir / "logs").glob("*.log"))
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs)


def test_ddp_on_two_nodes_learns_and_matches_one_process(tmp_path: Path) -> None:
    run = job.write_run_dir(tmp_path / "ddp", DIGITS, nodes=2, tasks_per_node=2)
    job_id = job.submit(run)
    single = job.write_run_dir(tmp_path / "single", DIGITS)
    assert job.run_local(single, 1) == [0]  # meanwhile, the one-process reference
    assert finish(job_id) == "COMPLETED", show_logs(run)

    result = json.loads((run / "result.json").read_text())
    assert result["world_size"] == 4 and result["eval_accuracy"] >= 0.90
    start = next(m for m in job.metrics(run) if m.get("event") == "start")
    assert start["launcher"] == "srun" and start["job_id"] == job_id
    a, b = final_model(single), final_model(run)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-5, msg=key)


def test_preempted_job_checkpoints_requeues_resumes_and_matches(tmp_path: Path) -> None:
    train = {**SLOW, "steps": 120}
    run = job.write_run_dir(tmp_path / "run", train, nodes=2, tasks_per_node=2)
    job_id = job.submit(run)
    # The uninterrupted reference runs alongside, with the same 2 x 2 layout: gloo's reduction
    # order depends on it, so a local 4-process run may differ in the last bit.
    reference = job.write_run_dir(tmp_path / "reference", train, nodes=2, tasks_per_node=2)
    reference_id = job.submit(reference)
    job.wait_state(job_id, {"RUNNING"} | TERMINAL, timeout=job.QUEUE_TIMEOUT)
    assert job.wait_for(lambda: job.latest_step(run) >= 30, timeout=90), show_logs(run)
    subprocess.run(["scancel", "--signal=USR1", job_id], check=True)
    assert job.wait_for(lambda: "preempted" in job.events(run), timeout=60), show_logs(run)
    # The batch script requeues with StartTime=now (requeuehold, update, release): there is no
    # ~120 s BeginTime hold to wait out, and the new allocation starts once the old one has ended.
    assert finish(job_id) == "COMPLETED", show_logs(run)

    assert finish(reference_id) == "COMPLETED", show_logs(reference)
    preempted = next(m for m in job.metrics(run) if m.get("event") == "preempted")
    resumed = next(m for m in job.metrics(run) if m.get("event") == "resumed")
    assert resumed["step"] == preempted["step"] < 120 and resumed["restart_count"] == 1
    a, b = final_model(reference), final_model(run)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_killed_rank_fails_the_job_quickly(tmp_path: Path) -> None:
    # restart.max 0: the first fault ends the job (restarts are tests/integration/test_restarts.py's).
    run = job.write_run_dir(
        tmp_path, {**SLOW, "steps": 2000, "timeout_s": 30}, nodes=2, tasks_per_node=2, restart={"max": 0}
    )
    job_id = job.submit(run)
    job.wait_state(job_id, {"RUNNING"} | TERMINAL, timeout=job.QUEUE_TIMEOUT)
    assert job.wait_for(lambda: job.latest_step(run) >= 10, timeout=90), show_logs(run)
    pid = int((run / "pids" / "rank-1").read_text())
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    state = job.wait_state(job_id, TERMINAL, timeout=60)
    assert state == "FAILED", f"{state} after {time.monotonic() - killed:.0f} s\n{show_logs(run)}"
    assert time.monotonic() - killed < 60
    # What `hpctrain status` reports: srun's own line names the dead rank and its node.
    dead = [t for t in failed_tasks(run) if t.rank == "1"]
    assert dead and dead[0].node in ("node1", "node2"), show_logs(run)


def test_corrupt_newest_checkpoint_falls_back(tmp_path: Path) -> None:
    train = {**DIGITS, "steps": 40, "checkpoint_every": 20, "export_final": False}
    run = job.write_run_dir(tmp_path, train, nodes=2, tasks_per_node=2)
    assert finish(job.submit(run)) == "COMPLETED", show_logs(run)
    newest = run / "checkpoints" / "step-00000040"
    victim = max(newest.glob("*.distcp"), key=lambda p: p.stat().st_size)
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])

    data = json.loads((run / "spec.json").read_text())
    data["job"]["train"]["steps"] = 50
    (run / "spec.json").write_text(json.dumps(data))
    assert finish(job.submit(run)) == "COMPLETED", show_logs(run)
    corrupt = [m for m in job.metrics(run) if m.get("event") == "checkpoint_corrupt"]
    assert len(corrupt) == 1 and corrupt[0]["path"] == str(newest)
    assert [m["step"] for m in job.metrics(run) if m.get("event") == "resumed"] == [20]
    assert "step-00000040 is corrupt" in (run / "logs" / "rank-0.log").read_text()
