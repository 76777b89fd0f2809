"""The status model: typed run statuses from made-up run directories (failed, cancelled, restarted, array)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from hpctrain.rundir import (
    ArrayChunk,
    AttemptLine,
    FailureReport,
    HangReport,
    Result,
    RunDir,
    SweepRecord,
    append_line,
    metric_line,
    write_json,
)
from hpctrain.scheduler.slurm.task_errors import FailedTask
from hpctrain.tracking.index import Index
from hpctrain.tracking.status import (
    HANG_KILLED,
    SHOWN_FAILURES,
    FailedRank,
    NotTracked,
    RunStatus,
    reconcile_statuses,
    select,
)
from tests.unit.tracked_runs import home_env, track

# The keys of one `status --json` entry before the model existed: scripts read them.
KEYS = [
    "job_id",
    "run_id",
    "name",
    "site",
    "backend",
    "state",
    "reason",
    "submitted_at",
    "run_dir",
    "nodes",
    "elapsed",
    "exit_code",
    "source",
    "progress",
]


@pytest.fixture
def home(hpctrain_home: Path) -> Iterator[Path]:
    with home_env(hpctrain_home):
        yield hpctrain_home


def statuses(home: Path, *job_ids: str, brief: bool = False) -> list[RunStatus]:
    return reconcile_statuses(select(list(job_ids), index=Index(home)), brief=brief, index=Index(home))


def attempts(run: RunDir, *lines: AttemptLine) -> None:
    for line in lines:
        append_line(run.attempts, line)


def test_a_completed_run_keeps_the_json_keys_of_before(home: Path) -> None:
    done = track(home, "600", "COMPLETED", name="done")
    done.write_result(Result(step=5, steps=5, final_loss=0.125))
    (status,) = statuses(home, "600")
    encoded = msgspec.to_builtins(status)
    assert list(encoded) == KEYS  # nothing more: no elements, restarts, failures or health to tell
    assert (encoded["state"], encoded["source"], encoded["nodes"]) == ("COMPLETED", "cache", "")
    assert encoded["progress"]["result"]["final_loss"] == 0.125
    assert status.failed_tasks is None and status.failed_ranks is None and status.health is None


def test_a_failed_run_joins_srun_and_the_runtime_report_with_the_log_tail(home: Path) -> None:
    failed = track(home, "601", "FAILED")
    failed.write_failure(FailureReport(rank=1, hostname="node2", error_type="ValueError", message="bad"))
    failed.batch_log.write_text("srun: error: node2: task 1: Exited with exit code 1\n")
    failed.rank_log(1).write_text("Traceback ...\nValueError: bad\n")
    (status,) = statuses(home, "601")
    assert status.failed_tasks == [FailedTask("1", "node2", "Exited with exit code 1")]
    assert status.failed_ranks is not None
    assert status.failed_ranks.named == [
        FailedRank("1", "node2", "ValueError: bad", ["Traceback ...", "ValueError: bad"])
    ]
    assert status.failed_ranks.reported == [] and status.failed_ranks.more == 0
    encoded = msgspec.to_builtins(status)
    assert encoded["failed_tasks"] == [{"rank": "1", "node": "node2", "error": "Exited with exit code 1"}]
    assert encoded["progress"]["failures"][0]["message"] == "bad"


def test_many_dead_ranks_are_counted_and_ranks_only_the_runtime_saw_are_kept(home: Path) -> None:
    failed = track(home, "602", "NODE_FAIL")
    failed.batch_log.write_text("srun: error: n1: tasks 0-99: Killed\n")
    failed.write_failure(FailureReport(rank=500, hostname="n9", message="lost"))
    (status,) = statuses(home, "602")
    assert status.failed_ranks is not None
    assert len(status.failed_ranks.named) == SHOWN_FAILURES
    assert status.failed_ranks.more == 100 - SHOWN_FAILURES
    assert status.failed_ranks.reported == [FailedRank("500", "n9", "lost")]
    assert status.failed_tasks is not None and len(status.failed_tasks) == 100


def test_a_cancelled_run_with_nobody_named_points_at_the_batch_log(home: Path) -> None:
    cancelled = track(home, "603", "CANCELLED")
    (status,) = statuses(home, "603")
    assert status.state == "CANCELLED"
    assert status.failed_tasks == []
    assert status.failed_ranks is not None and not status.failed_ranks.named
    assert status.failed_ranks.batch_log == str(cancelled.batch_log)
    assert msgspec.to_builtins(status)["failed_tasks"] == []  # the key stays, empty, as before


def test_a_restarted_run_carries_its_restarts_and_the_hang(home: Path) -> None:
    run = track(home, "604", "FAILED")
    attempts(
        run,
        AttemptLine(attempt=0, event="start", time=1.0, nodes=["n1", "n2"]),
        AttemptLine(attempt=0, event="end", time=2.0, outcome="hang", reason="rank 1 on n2 at step 9"),
        AttemptLine(attempt=1, event="start", time=3.0, nodes=["n1"]),
        AttemptLine(attempt=1, event="end", time=4.0, outcome="hang", reason="rank 0 on n1 at step 12"),
    )
    run.batch_log.write_text("srun: error: n1: task 0: Killed\n")
    run.hang_report.parent.mkdir(parents=True, exist_ok=True)
    run.hang_report.write_bytes(msgspec.json.encode(HangReport(time=4.0, summary="rank 0 on n1 at step 12")))
    (status,) = statuses(home, "604")
    assert status.restarts is not None and status.restarts.restarts == 2
    assert status.restarts.last_outcome == "hang"
    assert status.failed_ranks is not None
    assert [r.cause for r in status.failed_ranks.named] == [HANG_KILLED]
    assert status.health is not None and status.health.hung == "rank 0 on n1 at step 12"
    assert msgspec.to_builtins(status)["restarts"]["restarts"] == 2


def test_an_array_run_is_explained_by_its_elements(home: Path) -> None:
    array = track(home, "605", "FAILED", name="sweep")
    for index, code in enumerate(["0", "1"]):
        element = array.element(index)
        element.logs.mkdir(parents=True)
        element.append_metric(metric_line("train", step=index + 1, steps=5, loss=0.5))
        element.exit_codes.write_text(f"605 {code}\n")
    array.element(1).batch_log.write_text("srun: error: n1: task 0: Exited with exit code 3\n")
    (status,) = statuses(home, "605")
    assert [(e.index, e.state) for e in status.elements] == [(0, "COMPLETED"), (1, "FAILED")]
    assert status.elements[0].failed_ranks is None
    failed = status.elements[1].failed_ranks
    assert failed is not None and failed.named == [FailedRank("0", "n1", "Exited with exit code 3")]
    assert status.failed_ranks is None  # the array's own directory holds no training
    assert [e["progress"]["train"]["step"] for e in msgspec.to_builtins(status)["elements"]] == [1, 2]


def test_brief_reads_an_ended_run_no_further_than_its_result(home: Path) -> None:
    done = track(home, "606", "COMPLETED")
    done.write_result(Result(step=5, steps=5))
    done.append_metric(metric_line("train", step=5, steps=5, loss=0.5))
    attempts(done, AttemptLine(attempt=0, event="start", time=1.0, nodes=["n1"]))
    done.element(0).root.mkdir(parents=True)
    (brief,) = statuses(home, "606", brief=True)
    assert brief.progress.train is None and brief.elements == [] and brief.restarts is None
    (full,) = statuses(home, "606")
    assert full.progress.train is not None and [e.index for e in full.elements] == [0]
    assert full.restarts is not None


def test_unknown_keys_are_an_error_only_when_none_is_known(home: Path) -> None:
    track(home, "607", "COMPLETED")
    unknown = "20990101-000000-unknown"
    with pytest.raises(NotTracked, match=f"not tracked by hpctrain: {unknown}"):
        select([unknown], index=Index(home))
    assert [r.job_id for r in select(["607", unknown], index=Index(home))] == ["607"]


def test_status_json_carries_the_goodput_split(tmp_path: Path) -> None:
    from hpctrain.rundir.goodput import compute
    from tests.unit.rundir.test_goodput import KILLED_ONCE
    from tests.unit.tracked_runs import assembled

    run = RunDir(tmp_path)
    lines, metrics = KILLED_ONCE
    for line in [*lines, *metrics]:
        append_line(run.attempts if isinstance(line, AttemptLine) else run.metrics, line)
    status = assembled(tmp_path, "COMPLETED")
    assert status.goodput == compute(lines, metrics, 0.0)
    encoded = msgspec.to_builtins(status)["goodput"]
    assert encoded["rollback_s"] == 7.0 and encoded["detection_s"] == 5.0 and encoded["wall_s"] == 57.0


def test_each_array_of_a_sweep_shows_only_its_own_trials(home: Path) -> None:
    first = track(home, "55", "COMPLETED", name="sweep")
    record = SweepRecord(
        sweep_id=first.root.name,
        name="sweep",
        site="local",
        backend="local",
        submitted_at=0.0,
        metric="loss",
        mode="min",
        params=[],
        trials=[],
        arrays=[ArrayChunk(offset=0, count=3, job_id="55"), ArrayChunk(offset=3, count=3, job_id="56")],
    )
    write_json(first.sweep, record)
    index = Index(home)
    (entry,) = index.runs()
    second = msgspec.structs.replace(entry, run_id=f"{entry.run_id}+3", job_id="56")
    index.add(second)
    for trial in range(6):
        first.element(trial).logs.mkdir(parents=True)
        first.element(trial).exit_codes.write_text(f"{55 if trial < 3 else 56} {trial % 2}\n")
    by_job = {s.job_id: s for s in statuses(home, "55", "56")}
    assert [(e.index, e.state) for e in by_job["55"].elements] == [
        (0, "COMPLETED"),
        (1, "FAILED"),
        (2, "COMPLETED"),
    ]
    assert [(e.index, e.state) for e in by_job["56"].elements] == [
        (3, "FAILED"),
        (4, "COMPLETED"),
        (5, "FAILED"),
    ]
