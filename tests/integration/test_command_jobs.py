"""Command jobs on the real local Slurm: the DDP example script (no hpctrain in it), 2 nodes x 2 ranks, gloo.

Each test fails without its mechanism: progress needs the log parser, the restart after kill -9 needs the
wrapper's failure report and the resume arguments, the hang needs the wrapper's heartbeats (the script
calls nothing), the requeue needs resume.args in the next allocation.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpctrain.rundir import HangReport, RunDir, TrainLine, read_json
from hpctrain.rundir.attempts import History
from hpctrain.tracking.index import Index
from tests.conftest import REPO, run_cli
from tests.integration.cluster import make_eligible, require_cluster, run_dir, status, submit, wait_state
from tests.integration.faults import signal_rank

pytestmark = pytest.mark.cluster

JOB = REPO / "jobs" / "ddp-script.yaml"
FSDP_JOB = REPO / "jobs" / "fsdp-script.yaml"
LONG_STEPS = 600
HANG_DETECTION_S = 60


def longer(steps: int = LONG_STEPS) -> list[str]:
    """A run long enough to be hit mid-training (about 30 s of steps), checkpointing every 50."""
    command = f"python -m hpctrain.examples.ddp_script --steps {steps} --checkpoint_every 50 --step_time 0.03"
    return [f"command={command}", f"progress.total_steps={steps}"]


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


@pytest.fixture
def submitted() -> Iterator[list[str]]:
    jobs: list[str] = []
    yield jobs
    subprocess.run(["scancel", *jobs], check=False)


@pytest.fixture(scope="module")
def trained() -> Iterator[dict[str, Any]]:
    """One finished run of the example as shipped, shared by the tests that only read it."""
    require_cluster()
    entry = submit(JOB)
    try:
        yield wait_state(entry["job_id"], {"COMPLETED"}, timeout=300)
    finally:
        subprocess.run(["scancel", entry["job_id"]], check=False)


def train_steps(run: RunDir) -> list[int]:
    return [line.step for line in run.read_metrics(head=0, tail=400) if isinstance(line, TrainLine)]


def wait_for_step(run: RunDir, job_id: str, step: int, saved: str = "ckpt.pt", timeout: float = 240) -> None:
    """Until the script has logged `step` and saved `saved` (in HPCTRAIN_CHECKPOINT_DIR)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if max(train_steps(run), default=0) >= step and (run.checkpoints / saved).exists():
            return
        time.sleep(0.5)
    pytest.fail(f"job {job_id} never reached step {step}: {status(job_id)}")


def rank_log(run: RunDir, rank: int) -> str:
    return run.rank_log(rank).read_text(errors="replace")


def test_the_script_trains_to_the_end_on_four_ranks(trained: dict[str, Any]) -> None:
    run = RunDir(run_dir(trained))
    assert trained["state"] == "COMPLETED", trained
    assert "done: 300 steps" in rank_log(run, 0)
    for rank in range(4):  # every rank ran the command with torchrun's contract, under the wrapper
        assert f"hpctrain.command: rank {rank} on node" in rank_log(run, rank)
    assert (run.checkpoints / "ckpt.pt").exists(), "the script saved into HPCTRAIN_CHECKPOINT_DIR"


def test_status_shows_step_and_loss_from_the_progress_pattern(trained: dict[str, Any]) -> None:
    entry = status(trained["job_id"])
    progress = entry["progress"]["train"]
    assert progress["step"] == 300 and progress["steps"] == 300, entry
    assert progress["loss"] is not None and progress["loss"] > 0, entry


def test_tensorboard_gets_the_parsed_step_and_loss(trained: dict[str, Any]) -> None:
    accumulators = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    run = RunDir(run_dir(trained))
    board = accumulators.EventAccumulator(str(run.tensorboard))
    board.Reload()
    curve = [(event.step, event.value) for event in board.Scalars("train/loss")]
    assert [step for step, _ in curve] == list(range(10, 301, 10)), curve
    printed = {  # the losses rank 0 printed, read back here independently of the parser
        int(words[1]): float(words[3])
        for words in (line.split() for line in rank_log(run, 0).splitlines() if line.startswith("step "))
    }
    assert all(value == pytest.approx(printed[step], rel=1e-6) for step, value in curve), curve


def test_a_rank_killed_with_sigkill_restarts_from_its_own_checkpoint(submitted: list[str]) -> None:
    entry = submit(JOB, *longer())
    submitted.append(entry["job_id"])
    run = RunDir(run_dir(entry))
    wait_for_step(run, entry["job_id"], 120)
    signal_rank(run.root, 1, signal.SIGKILL)
    done = wait_state(entry["job_id"], {"COMPLETED"}, timeout=300)
    assert done["state"] == "COMPLETED", done
    ends = History.read(run).ends
    assert ends[0].outcome == "rank_failure", ends
    assert "rank 1 on node1" in ends[0].reason and "Killed" in ends[0].reason, ends[0].reason
    log = rank_log(run, 0)
    assert "resuming: adding --resume" in log
    resumed = [
        int(line.rsplit(" ", 1)[1]) for line in log.splitlines() if line.startswith("rank 0: resumed from")
    ]
    assert resumed and resumed[-1] >= 100, log[-2000:]
    assert f"done: {LONG_STEPS} steps" in log


def test_a_stopped_rank_is_named_hung_within_a_minute_and_the_job_restarts(submitted: list[str]) -> None:
    entry = submit(JOB, *longer())
    submitted.append(entry["job_id"])
    run = RunDir(run_dir(entry))
    wait_for_step(run, entry["job_id"], 100)
    stopped_at = time.time()
    signal_rank(run.root, 2, signal.SIGSTOP)
    deadline = time.monotonic() + HANG_DETECTION_S + 30
    hang: HangReport | None = None
    while time.monotonic() < deadline and hang is None:
        for path in [run.hang_report, *run.failures.glob("attempt-*/hang.json")]:
            found = read_json(path, HangReport)
            if isinstance(found, HangReport):
                hang = found
        time.sleep(0.5)
    assert hang is not None, f"no hang report: {status(entry['job_id'])}"
    assert hang.time - stopped_at <= HANG_DETECTION_S, (hang.time - stopped_at, hang.summary)
    assert [(r.rank, r.node) for r in hang.hung] == [(2, "node2")], hang.summary
    done = wait_state(entry["job_id"], {"COMPLETED"}, timeout=300)
    assert done["state"] == "COMPLETED", done
    assert History.read(run).ends[0].outcome == "hang"
    assert "rank 0: resumed from step" in rank_log(run, 0)


def test_after_a_requeue_the_script_resumes_with_the_resume_args(submitted: list[str]) -> None:
    entry = submit(JOB, *longer())
    job_id = entry["job_id"]
    submitted.append(job_id)
    run = RunDir(run_dir(entry))
    wait_for_step(run, job_id, 100)
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "PENDING" not in status(job_id)["state"]:
        time.sleep(0.5)
    make_eligible(job_id)
    done = wait_state(job_id, {"COMPLETED"}, timeout=300)
    assert done["state"] == "COMPLETED", done
    log = rank_log(run, 0)
    assert "resuming: adding --resume" in log and "rank 0: resumed from step" in log, log[-2000:]
    assert "restart 1" in Path(run.batch_log).read_text()


def test_the_fsdp2_script_resumes_by_itself_from_its_dcp_checkpoint_after_a_kill(
    submitted: list[str],
) -> None:
    steps = 400
    command = (
        f"python -m hpctrain.examples.fsdp_script --steps {steps} --checkpoint_every 50 --step_time 0.03"
    )
    entry = submit(FSDP_JOB, f"command={command}", f"progress.total_steps={steps}")
    submitted.append(entry["job_id"])
    run = RunDir(run_dir(entry))
    wait_for_step(run, entry["job_id"], 120, saved="step-100/.metadata")
    signal_rank(run.root, 3, signal.SIGKILL)
    done = wait_state(entry["job_id"], {"COMPLETED"}, timeout=300)
    assert done["state"] == "COMPLETED", done
    assert History.read(run).ends[0].outcome == "rank_failure"
    log = rank_log(run, 0)
    resumed = [line for line in log.splitlines() if line.startswith("resumed from step")]
    assert resumed and int(resumed[-1].split()[3]) >= 100, log[-2000:]
    assert "resuming: adding" not in log, "the script resumed by itself: no resume arguments"
    assert f"done: {steps} steps" in log


def test_an_optuna_sweep_over_a_script_argument_ranks_trials_by_their_parsed_loss() -> None:
    pytest.importorskip("optuna", reason="sweep.sampler optuna needs the `sweep` extra (optuna)")
    proc = run_cli("sweep", str(REPO / "jobs" / "ddp-script-optuna.yaml"), "--site", "local", timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mine = [
        s for s in json.loads(run_cli("sweep", "status", "--json").stdout) if s["name"] == "ddp-script-optuna"
    ]
    found = max(mine, key=lambda s: s["sweep_id"])
    root = Index().root / "runs" / found["sweep_id"]
    trials = found["trials"]
    assert len(trials) == 4 and all(t["state"] == "COMPLETED" for t in trials), trials
    losses = {}
    for trial in trials:  # the loss each trial's own log printed last, parsed here independently
        log = RunDir(root).element(trial["index"]).rank_log(0).read_text()
        last = [line for line in log.splitlines() if line.startswith("step ") and " loss " in line][-1]
        losses[trial["index"]] = float(last.rsplit(" ", 1)[1])
        assert trial["metric"] == pytest.approx(losses[trial["index"]]), trial
    assert found["best"]["index"] == min(losses, key=losses.__getitem__), (found["best"], losses)


def test_the_preemption_signal_reaches_the_script_and_the_job_requeues_and_resumes(
    submitted: list[str],
) -> None:
    entry = submit(JOB, *longer(), "preemption.grace=5")
    job_id = entry["job_id"]
    submitted.append(job_id)
    run = RunDir(run_dir(entry))
    wait_for_step(run, job_id, 100)
    subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], check=True)
    done = wait_state(job_id, {"COMPLETED"}, timeout=400)
    assert done["state"] == "COMPLETED", done
    assert History.read(run).ends[0].outcome == "preempted", History.read(run).ends
    log = rank_log(run, 0)
    assert "preemption: sending SIGUSR1 to the command" in log, log[-2000:]
    assert "rank 0: resumed from step" in log and f"done: {LONG_STEPS} steps" in log
