"""Observability on the real local cluster: TensorBoard curves across requeues, a slowed rank flagged."""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import _runtime_job as job
import pytest
import yaml
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import REPO, run_cli
from tests.integration.cluster import require_cluster, run_dir, status
from tests.integration.test_runtime_cluster import SLOW, TERMINAL, finish, show_logs

pytestmark = pytest.mark.cluster


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def nodes_done_completing() -> bool:
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, check=False)
    return "comp" not in proc.stdout.lower()


def _requeue_now(job_id: str) -> None:
    """Let a job requeued from outside (Slurm holds it ~120 s) start at once, once its old steps are
    gone: a job released while its old steps are still torn down is killed by that teardown."""
    job.wait_state(job_id, {"PENDING"}, timeout=60)
    assert job.wait_for(nodes_done_completing, timeout=60)
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"jobid={job_id}", "starttime=now"], check=True)


def _resumed(run: Path) -> list[int]:
    return [m["step"] for m in job.metrics(run) if m.get("event") == "resumed"]


def _raw_steps(folder: Path, tag: str) -> list[list[int]]:
    """The steps of `tag` as each event file holds them, file by file (before TensorBoard purges)."""
    out = []
    for path in sorted(folder.iterdir()):
        loader = event_file_loader.EventFileLoader(str(path))
        out.append([e.step for e in loader.Load() for v in e.summary.value if v.tag == tag])
    return out


def test_tensorboard_curves_stay_one_run_across_a_preemption_and_a_hard_requeue(tmp_path: Path) -> None:
    """USR1 -> checkpoint -> requeue, then `scontrol requeue` (no checkpoint: the run goes back to its
    last periodic checkpoint and logs those steps again): TensorBoard's reader sees every step once."""
    # Memory checkpoints off: the hard requeue must go back to the disk checkpoint and log steps again.
    train = {**SLOW, "steps": 120, "checkpoint_every": 20, "eval_every": 20, "export_final": False}
    train["memory_checkpoint_every"] = 0
    run = job.write_run_dir(tmp_path / "run", train, nodes=2, tasks_per_node=2)
    job_id = job.submit(run)
    job.wait_state(job_id, {"RUNNING"} | TERMINAL, timeout=job.QUEUE_TIMEOUT)
    assert job.wait_for(lambda: job.latest_step(run) >= 30, timeout=120), show_logs(run)
    subprocess.run(["scancel", "--signal=USR1", job_id], check=True)
    assert job.wait_for(lambda: "preempted" in job.events(run), timeout=60), show_logs(run)
    # hpctrain's own requeue starts the job again by itself (no BeginTime hold to wait out).
    # Second attempt: wait until it has logged a step past a periodic checkpoint, then requeue hard.
    assert job.wait_for(lambda: len(_resumed(run)) == 1, timeout=job.QUEUE_TIMEOUT), show_logs(run)
    first_resume = _resumed(run)[0]
    hard_at = (first_resume // 20 + 1) * 20 + 10  # logged after the next checkpoint, before the one after
    assert job.wait_for(lambda: job.latest_step(run) >= hard_at, timeout=120), show_logs(run)
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    _requeue_now(job_id)
    assert finish(job_id, timeout=300) == "COMPLETED", show_logs(run)

    resumes = _resumed(run)
    assert len(resumes) == 2 and resumes[1] < job.latest_step(run), resumes
    board = run / "tensorboard"
    raw = _raw_steps(board, "train/loss")
    assert len(raw) == 3, raw  # one event file per attempt, all in one log directory
    # The third attempt really did log again steps the second had logged (what purging is for).
    assert set(raw[1]) & set(raw[2]), raw
    accumulator = EventAccumulator(str(board))
    accumulator.Reload()
    steps = [e.step for e in accumulator.Scalars("train/loss")]
    assert steps == list(range(10, 121, 10)), raw
    evals = [e.step for e in accumulator.Scalars("eval/accuracy")]
    assert evals == sorted(set(evals)) and evals[-1] == 120, evals
    # The curve is the run's own numbers: TensorBoard's last loss is metrics.jsonl's last loss.
    last_loss = [m["loss"] for m in job.metrics(run) if m["kind"] == "train"][-1]
    assert accumulator.Scalars("train/loss")[-1].value == pytest.approx(last_loss, rel=1e-5)


@dataclass
class SlowRankRun:
    job_id: str
    run_dir: Path
    waited: str
    """What `submit --wait` printed (not a terminal: plain progress lines, then the table)."""
    env: dict[str, str]


@pytest.fixture(scope="module")
def slow_rank(tmp_path_factory: pytest.TempPathFactory) -> SlowRankRun:
    """2 nodes x 2 ranks, rank 3 (the second on node2) computing 5x longer per forward, submitted
    with `submit --wait` through the CLI; several tests read the one run."""
    folder = tmp_path_factory.mktemp("slow-rank")
    env = {"HPCTRAIN_HOME": str(folder / "home")}
    job_file = folder / "slow-rank.yaml"
    job_file.write_text(
        yaml.safe_dump(
            {
                "name": "slow-rank",
                "resources": {
                    "nodes": 2,
                    "tasks_per_node": 2,
                    "partition": "cpu",
                    "mem": "2G",
                    "nodelist": ["node1", "node2"],
                },
                "train": {
                    "entrypoint": "tests.launcher:faulty",
                    "steps": 200,
                    "batch_size": 64,
                    "log_every": 5,
                    "options": {"delay_s": 0.01, "slow_worker": 3, "slow_factor": 5},
                },
                "env": {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": 1},
            }
        )
    )
    waited = run_cli(
        "submit", str(job_file), "--site", "local", "--wait", env=env, timeout=job.QUEUE_TIMEOUT + 300
    )
    found = re.search(r"Submitted job (\d+)", waited.stdout)
    assert found, waited.stdout + waited.stderr
    entry = status(found.group(1), env)
    run = run_dir(entry)
    assert waited.returncode == 0 and entry["state"] == "COMPLETED", waited.stdout + show_logs(run)
    return SlowRankRun(found.group(1), run, waited.stdout, env)


def test_a_slowed_rank_is_flagged_with_its_node_in_metrics_and_status(slow_rank: SlowRankRun) -> None:
    metrics = job.metrics(slow_rank.run_dir)
    lines = [m for m in metrics if m["kind"] == "ranks"]
    assert len(lines) == 40 and all(len(m["compute_s"]) == len(m["wait_s"]) == 4 for m in lines)
    nodes = lines[0]["nodes"]
    assert nodes == ["node1", "node1", "node2", "node2"], nodes  # srun's block distribution
    # Flagged from the third interval on, and nobody else ever.
    assert all(m.get("stragglers", []) in ([], [3]) for m in lines), lines
    assert lines[-1]["stragglers"] == [3]
    # The fast ranks' wait is the slow rank's extra compute: the split is what tells them apart.
    assert min(lines[-1]["wait_s"][:3]) > lines[-1]["wait_s"][3]
    flagged = [m for m in metrics if m.get("event") == "straggler"]
    assert [m["reason"].split(",")[0] for m in flagged] == ["rank 3 on node2"], flagged
    shown = run_cli("status", slow_rank.job_id, env=slow_rank.env)
    assert shown.returncode == 0, shown.stderr
    assert f"job {slow_rank.job_id}: straggler: rank 3 on node2, +" in shown.stdout, shown.stdout


def test_submit_wait_prints_plain_progress_lines_then_the_table(slow_rank: SlowRankRun) -> None:
    lines = slow_rank.waited.splitlines()
    label = f"{slow_rank.job_id} slow-rank"
    progress = [line for line in lines if label + " " in line and " step " in line]
    assert progress, slow_rank.waited
    # A line per change, each with the step of total; running ones with a rate and an ETA.
    assert re.search(r"RUNNING step \d+/200 \(\d+%\), [\d.e+]+ steps/s, ETA \d+:\d\d", slow_rank.waited)
    assert progress[-1].endswith("COMPLETED step 200/200 (100%)"), progress
    assert "STATE" in slow_rank.waited and "200/200" in slow_rank.waited.split("STATE", 1)[-1]


def test_logs_merge_every_rank_and_filter_by_rank_and_node(slow_rank: SlowRankRun) -> None:
    def logs(*options: str) -> list[str]:
        proc = run_cli("logs", slow_rank.job_id, *options, env=slow_rank.env)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()

    merged = logs("--all-ranks")
    prefixes = {line.split("]")[0] + "]" for line in merged}
    assert prefixes == {f"[rank {r}]" for r in range(4)}, prefixes
    # Interleaved by time: the runtime's timestamps never go back in the merged stream.
    stamps = [line.split("] ", 1)[1][:23] for line in merged if re.match(r"\[rank \d\] \d{4}-", line)]
    assert stamps == sorted(stamps)
    for rank in range(4):  # nothing lost, nothing added: each rank's lines, in its own order
        own = (slow_rank.run_dir / "logs" / f"rank-{rank}.log").read_text().splitlines()
        assert [line.split("] ", 1)[1] for line in merged if line.startswith(f"[rank {rank}] ")] == own
    on_node2 = logs("--node", "node2")
    assert {line.split("]")[0] for line in on_node2} == {"[rank 2", "[rank 3"}
    only3 = logs("--all-ranks", "--rank", "3")
    assert only3 and all(line.startswith("[rank 3] ") for line in only3)
    assert logs("--node", "node2", "-n", "3") == on_node2[-3:]
    assert logs("--node", "node9") == []  # a node the job never ran on: nothing, not an error
