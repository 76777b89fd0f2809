"""Whole runtime runs on this host (no Slurm): ranks as local processes over gloo, like torchrun."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
import _runtime_job as job

DIGITS = dict(steps=60, batch_size=32, lr=0.003, log_every=10, deterministic=True, export_final=True)


def final_model(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "final_model.pt")


def assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float) -> None:
    assert list(a) == list(b)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=atol, msg=key)


def test_two_rank_ddp_equals_one_process_with_the_same_global_batch(tmp_path: Path) -> None:
    single = job.write_run_dir(tmp_path / "single", DIGITS)
    ddp = job.write_run_dir(tmp_path / "ddp", {**DIGITS, "grad_accum": 2}, tasks_per_node=2)
    assert job.run_local(single, 1) == [0]
    assert job.run_local(ddp, 2) == [0, 0]
    assert_close(final_model(single), final_model(ddp), atol=1e-5)

    result = json.loads((ddp / "result.json").read_text())
    assert result["step"] == 60 and result["layout"] == "ddp" and result["world_size"] == 2
    lines = job.metrics(ddp)
    kinds = [m["kind"] for m in lines]
    assert kinds.count("memory") == 2 and kinds.count("train") == 6 and "eval" in kinds
    train_line = next(m for m in lines if m["kind"] == "train")
    expected = {"step", "steps", "loss", "lr", "samples_per_s", "step_time_s", "peak_mem_mb", "time"}
    assert expected <= set(train_line)
    # The data-loader wait share: a fraction of each interval, above zero (fetching takes time).
    assert all(0 < m["data_share"] <= 1 for m in lines if m["kind"] == "train")
    assert job.events(ddp)[0] == "start" and job.events(ddp)[-1] == "done"
    assert (ddp / "logs" / "rank-1.log").read_text().count("step 60/60") == 1
    assert (ddp / "pids" / "rank-1").exists()


def test_preempted_run_resumes_bitwise_equal(tmp_path: Path) -> None:
    train = {**DIGITS, "steps": 80, "entrypoint": "_runtime_job:slow_digits", "options": {"delay_s": 0.02}}
    reference = job.write_run_dir(tmp_path / "reference", train, tasks_per_node=2)
    assert job.run_local(reference, 2) == [0, 0]

    run = job.write_run_dir(tmp_path / "run", train, tasks_per_node=2)
    procs = job.start_local(run, 2)
    assert job.wait_for(lambda: job.latest_step(run) >= 20, timeout=60)
    os.kill(procs[1].pid, signal.SIGUSR1)  # one rank only: the all-reduce makes both stop
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    preempted = [m for m in job.metrics(run) if m.get("event") == "preempted"]
    assert len(preempted) == 1 and preempted[0]["step"] < 80
    assert (run / "requeue.request").exists()
    assert not (run / "result.json").exists()

    assert job.run_local(run, 2) == [0, 0]  # the "requeued" run
    resumed = [m for m in job.metrics(run) if m.get("event") == "resumed"]
    assert resumed and resumed[0]["step"] == preempted[0]["step"]
    assert not (run / "requeue.request").exists()
    assert_close(final_model(reference), final_model(run), atol=0)


def test_flag_file_stops_the_run(tmp_path: Path) -> None:
    train = {**DIGITS, "entrypoint": "_runtime_job:slow_digits", "options": {"delay_s": 0.02}}
    run = job.write_run_dir(tmp_path, train, preemption={"requeue": False})
    (run / "preempt.flag").touch()  # stale: must be ignored
    procs = job.start_local(run, 1)
    assert job.wait_for(lambda: job.latest_step(run) >= 10, timeout=60)
    (run / "preempt.flag").touch()
    assert procs[0].wait(timeout=60) == 0
    assert job.events(run)[-1] == "preempted"
    assert not (run / "preempt.flag").exists() and not (run / "requeue.request").exists()


def test_corrupt_checkpoint_falls_back_and_says_so(tmp_path: Path) -> None:
    run = job.write_run_dir(tmp_path, {**DIGITS, "steps": 40, "checkpoint_every": 20, "keep_checkpoints": 3})
    assert job.run_local(run, 1) == [0]
    newest = run / "checkpoints" / "step-00000040"
    data_file = next(newest.glob("*.distcp"))
    data_file.write_bytes(data_file.read_bytes()[:100])  # truncated

    spec_path = run / "spec.json"
    data = json.loads(spec_path.read_text())
    data["job"]["train"]["steps"] = 50
    spec_path.write_text(json.dumps(data))
    assert job.run_local(run, 1) == [0]
    corrupt = [m for m in job.metrics(run) if m.get("event") == "checkpoint_corrupt"]
    assert corrupt and corrupt[0]["path"] == str(newest) and "bytes" in corrupt[0]["problem"]
    resumed = [m for m in job.metrics(run) if m.get("event") == "resumed"]
    assert resumed[-1]["step"] == 20


def test_exception_writes_failure_report_and_exits_nonzero(tmp_path: Path) -> None:
    run = job.write_run_dir(tmp_path, {**DIGITS, "batch_size": 5000})  # more than the dataset
    codes = job.run_local(run, 1)
    assert codes[0] != 0
    report = json.loads((run / "failures" / "rank-0.json").read_text())
    assert report["rank"] == 0 and report["error_type"] == "ValueError"
    assert "fewer than one global batch" in report["message"] and report["where"]
    assert job.events(run)[-1] == "failed"


@pytest.mark.parametrize("schedule", ["cosine"])
def test_lr_schedule_reaches_the_metrics(tmp_path: Path, schedule: str) -> None:
    run = job.write_run_dir(
        tmp_path, {**DIGITS, "steps": 20, "log_every": 5, "warmup_steps": 5, "lr_schedule": schedule}
    )
    assert job.run_local(run, 1) == [0]
    lrs = [m["lr"] for m in job.metrics(run) if m["kind"] == "train"]
    assert lrs[0] == pytest.approx(0.003) and lrs[-1] < lrs[1] < lrs[0] + 1e-12


@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="no mpiexec")
def test_mpi_bootstrap_with_mpiexec(tmp_path: Path) -> None:
    run = job.write_run_dir(tmp_path, {**DIGITS, "steps": 20}, tasks_per_node=2)
    done = subprocess.run(
        ["mpiexec", "-n", "2", sys.executable, "-m", "hpctrain.runtime"],
        env=job.task_env(run),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    start = next(m for m in job.metrics(run) if m.get("event") == "start")
    assert start["launcher"] == "mpi" and start["world_size"] == 2
    assert json.loads((run / "result.json").read_text())["step"] == 20
