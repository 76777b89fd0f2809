"""Command jobs on the real local Slurm: the DDP and FSDP2 example scripts (no hpctrain in them), 2 nodes x
2 ranks, gloo.

Each test fails without its mechanism: progress and its TensorBoard curve need the log parser, the restart
after kill -9 needs the wrapper's failure report and the resume arguments (the FSDP2 script finds its own
checkpoint), the hang needs the wrapper's heartbeats (the scripts call nothing), the requeue needs
resume.args (or the script's own checkpoint) in the next allocation.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
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
LONG_STEPS = 300
PREEMPTED_STEPS = 600
"""The preemption test's run is longer: the script trains on through the grace after the signal."""
HANG_DETECTION_S = 60


@dataclass(frozen=True)
class Example:
    """One shipped example script, as the fault tests run it."""

    job: Path
    module: str
    steps: int
    """Steps of a run long enough to be hit mid-training, checkpointing every 50."""
    saved: str
    """What its checkpoint at step 100 leaves in HPCTRAIN_CHECKPOINT_DIR (a file of it)."""
    resumed: str
    """The start of the line rank 0 prints after loading its checkpoint: `<resumed> N...`."""
    resume_args: bool
    """It resumes through the job's resume.args (else by itself, finding its own checkpoint)."""
    step_time: float = 0.03
    """Seconds each step also sleeps (FSDP2's steps on gloo are slow enough without)."""


DDP = Example(JOB, "ddp_script", LONG_STEPS, "ckpt.pt", "rank 0: resumed from step", True)
FSDP = Example(FSDP_JOB, "fsdp_script", 250, "step-100/.metadata", "resumed from step", False, step_time=0)
EXAMPLES = [pytest.param(DDP, id="ddp"), pytest.param(FSDP, id="fsdp2")]


def longer(example: Example = DDP) -> list[str]:
    """A run of the example long enough to be hit mid-training, checkpointing every 50 steps."""
    command = (
        f"python -m hpctrain.examples.{example.module} --steps {example.steps} --checkpoint_every 50"
        f" --step_time {example.step_time}"
    )
    return [f"command={command}", f"progress.total_steps={example.steps}"]


def resumed_steps(log: str, example: Example) -> list[int]:
    """The steps rank 0 said it resumed from, in order."""
    return [
        int(line.removeprefix(example.resumed).split()[0])
        for line in log.splitlines()
        if line.startswith(example.resumed)
    ]


def assert_resumed_from_its_checkpoint(run: RunDir, example: Example, at_least: int = 100) -> None:
    """Rank 0 loaded a checkpoint of `at_least` steps or more (through resume.args for an example that
    takes them, by itself otherwise) and then trained to the end."""
    log = rank_log(run, 0)
    resumed = resumed_steps(log, example)
    assert resumed and resumed[-1] >= at_least, log[-2000:]
    assert ("resuming: adding" in log) == example.resume_args, log[-2000:]
    assert f"done: {example.steps} steps" in log, log[-2000:]


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


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_stopped_rank_is_named_hung_within_a_minute_and_the_job_restarts(
    submitted: list[str], example: Example
) -> None:
    entry = submit(example.job, *longer(example))
    submitted.append(entry["job_id"])
    run = RunDir(run_dir(entry))
    wait_for_step(run, entry["job_id"], 100, saved=example.saved)
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
    assert_resumed_from_its_checkpoint(run, example)


@pytest.mark.parametrize("example", EXAMPLES)
def test_after_a_requeue_the_script_resumes_from_its_checkpoint(
    submitted: list[str], example: Example
) -> None:
    entry = submit(example.job, *longer(example))
    job_id = entry["job_id"]
    submitted.append(job_id)
    run = RunDir(run_dir(entry))
    wait_for_step(run, job_id, 100, saved=example.saved)
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "PENDING" not in status(job_id)["state"]:
        time.sleep(0.5)
    make_eligible(job_id)
    done = wait_state(job_id, {"COMPLETED"}, timeout=300)
    assert done["state"] == "COMPLETED", done
    assert_resumed_from_its_checkpoint(run, example)
    assert "restart 1" in Path(run.batch_log).read_text()


def test_the_fsdp2_script_resumes_by_itself_from_its_dcp_checkpoint_after_a_kill(
    submitted: list[str],
) -> None:
    entry = submit(FSDP.job, *longer(FSDP))
    submitted.append(entry["job_id"])
    run = RunDir(run_dir(entry))
    wait_for_step(run, entry["job_id"], 120, saved=FSDP.saved)
    signal_rank(run.root, 3, signal.SIGKILL)
    done = wait_state(entry["job_id"], {"COMPLETED"}, timeout=300)
    assert done["state"] == "COMPLETED", done
    assert History.read(run).ends[0].outcome == "rank_failure"
    assert_resumed_from_its_checkpoint(run, FSDP)  # by itself: no resume arguments


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
    entry = submit(JOB, *longer(replace(DDP, steps=PREEMPTED_STEPS)), "preemption.grace=5")
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
    assert "rank 0: resumed from step" in log and f"done: {PREEMPTED_STEPS} steps" in log
