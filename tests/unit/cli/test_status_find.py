"""`hpctrain status` finds runs by name, id prefix and state; without keys it is one line per run and a
failed run's detail waits for `status JOBID` (issue 36 item 16)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hpctrain import api
from hpctrain.rundir import (
    ArrayChunk,
    AttemptLine,
    FailureReport,
    SweepRecord,
    Trial,
    append_line,
    write_json,
)
from hpctrain.scheduler.base import JobState
from tests.unit.fake_sbatch import fake_sbatch
from tests.unit.tracked_runs import cli, home_env, track


@pytest.fixture
def home(hpctrain_home: Path) -> Iterator[Path]:
    with home_env(hpctrain_home):
        yield hpctrain_home


def job_ids(stdout: str) -> list[str]:
    return [line.split()[0] for line in stdout.splitlines()[1:] if line and not line.startswith(" ")]


def test_a_name_shows_every_run_of_it_and_a_state_narrows_them(home: Path) -> None:
    track(home, "1", "COMPLETED", name="digits")
    track(home, "2", "FAILED", name="digits")
    track(home, "3", "COMPLETED", name="other")
    shown = cli("status", "digits")
    assert shown.code == 0, shown.stderr
    assert sorted(job_ids(shown.stdout)) == ["1", "2"]
    failed = cli("status", "digits", "--state", "failed")
    assert job_ids(failed.stdout) == ["2"]
    assert job_ids(cli("status", "--state", "COMPLETED,FAILED").stdout) == ["3", "2", "1"]
    refused = cli("status", "--state", "DONE")
    assert refused.code == 2 and "--state: DONE is not a state" in refused.stderr


def test_a_run_id_prefix_names_its_run(home: Path) -> None:
    run = track(home, "4", "COMPLETED", name="digits")
    prefix = run.root.name[: len("YYYYMMDD-HHMMSS-dig")]
    assert job_ids(cli("status", prefix).stdout) == ["4"]


def test_the_default_table_says_a_failure_in_one_line_and_status_jobid_has_the_detail(home: Path) -> None:
    failed = track(home, "5", "FAILED", name="broken")
    failed.write_failure(FailureReport(rank=1, hostname="node2", error_type="ValueError", message="bad"))
    failed.batch_log.write_text(
        "srun: error: node2: task 1: Exited with exit code 1\nsrun: error: node1: task 0: Terminated\n"
    )
    failed.rank_log(1).write_text("Traceback (most recent call last):\n  File x\nValueError: bad\n")
    compact = cli("status").stdout
    notes = [line for line in compact.splitlines() if line.startswith("  ")]
    assert notes == [
        "  job 5: FAILED: rank 1 on node2: ValueError: bad and 1 more (`hpctrain status 5` for the logs)"
    ]
    detail = cli("status", "5").stdout
    assert "| Traceback (most recent call last):" in detail and "rank 0 on node1 failed: Terminated" in detail


def test_sweep_status_takes_the_sweeps_name(home: Path) -> None:
    for job_id in ("6", "7"):
        root = track(home, job_id, "COMPLETED", name="lr-sweep")
        chunk = ArrayChunk(offset=0, count=1, job_id=job_id)
        record = SweepRecord(
            sweep_id=root.root.name,
            name="lr-sweep",
            site="local",
            backend="local",
            submitted_at=0.0,
            metric="loss",
            mode="min",
            params=["train.lr"],
            trials=[Trial(index=0, params={"train.lr": 0.1})],
            arrays=[chunk],
        )
        write_json(root.sweep, record)
    for verb in (["sweep", "status", "lr-sweep"], ["status", "lr-sweep"]):
        shown = cli(*verb)
        assert shown.code == 0, shown.stderr
        assert len([line for line in shown.stdout.splitlines() if "1 trials" in line]) == 2, shown.stdout
    assert cli("sweep", "cancel", "lr-sweep").code == 2  # a name is not enough to cancel


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        (
            [AttemptLine(attempt=0, event="start", time=1.0, nodes=["node1"])],
            "attempt 1 next, requeued after its allocation ended mid-attempt (a node failure or a requeue)",
        ),
        (
            [
                AttemptLine(attempt=0, event="start", time=1.0, nodes=["node1"]),
                AttemptLine(attempt=0, event="end", time=2.0, outcome="preempted"),
            ],
            "attempt 1 next, requeued after the preemption or time-limit signal (checkpointed)",
        ),
    ],
    ids=["node-failure", "preempted"],
)
def test_a_requeued_pending_run_says_why_and_which_attempt_comes_next(
    lines: list[AttemptLine], said: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_sbatch(monkeypatch, held={"8": JobState.PENDING, "9": JobState.PENDING})
    run = track(home, "8", "PENDING", backend="slurm", name="again")
    for line in lines:
        append_line(run.attempts, line)
    (status,) = api.statuses(api.list_runs("8"))
    assert status.reason == said
    assert f"job 8: pending: {said}" in cli("status", "8").stdout
    assert "attempt 1 next" in cli("status").stdout  # the table's cell starts with it
    never = track(home, "9", "PENDING", backend="slurm", name="fresh")
    assert never.attempts.exists() is False and api.find_run("9").status().reason == ""
