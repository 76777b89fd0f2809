"""`hpctrain status` over odd run directories: the cases of issue 9 that crashed or hung, arrays."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hpctrain.rundir import AttemptLine, FailureReport, Result, RunDir, WorkerStats, append_line, metric_line
from hpctrain.scheduler.base import JobInfo, JobState
from tests.conftest import run_cli
from tests.unit.tracked_runs import Outcome, cli, home_env, track


@pytest.fixture
def home(hpctrain_home: Path) -> Path:
    with home_env(hpctrain_home):
        yield hpctrain_home


def status(*args: str) -> Outcome:
    outcome = cli("status", *args)
    assert outcome.code in (0, 1, 2) and "Traceback" not in outcome.stderr, outcome
    return outcome


def with_neighbour(home: Path) -> RunDir:
    """A healthy completed job that every other case must leave visible."""
    good = track(home, "500", "COMPLETED", name="healthy")
    good.write_result(Result(step=5, steps=5, final_loss=0.125))
    return good


# (file, content) pairs of issue 9 that crashed or hung `hpctrain status`.
CASES = {
    "result-list": ("result.json", b"[1]"),
    "kind-list": ("metrics.jsonl", b'{"kind":["train"]}\n'),
    "samples-per-s-text": ("metrics.jsonl", b'{"kind":"train","step":3,"samples_per_s":"n/a"}\n'),
    "memory-rank-all": ("metrics.jsonl", b'{"kind":"memory","rank":"all","rank_bytes":{}}\n'),
    "deep-result": ("result.json", b"[" * 100_000),
    "deep-metrics": ("metrics.jsonl", b"[" * 100_000 + b"\n"),
    "failure-list": ("failures/0.json", b"[1, 2]"),
    "huge-range": ("logs/batch.log", b"srun: error: n1: tasks 0-99999999999: Killed\n"),
    "bad-range": ("logs/batch.log", b"srun: error: n1: tasks 1-2-3: Killed\n"),
    "not-utf8": ("result.json", b'{"step": 1, "steps": "\xff"}'),
    "exit-codes-garbage": ("exit-codes", b"\x00\xff 1 2 3\n"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_odd_files_are_reported_and_other_jobs_shown(home: Path, case: str) -> None:
    name, content = CASES[case]
    with_neighbour(home)
    odd = track(home, "501", "FAILED", name="odd")
    path = odd.root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    for args in ([], ["--json"], ["501"], ["501", "--json"]):
        outcome = status(*args)
        assert outcome.seconds < 5, (case, args, outcome.seconds)
        if "501" not in args:
            assert "healthy" in outcome.stdout and "0.125" in outcome.stdout
    assert "odd" in status().stdout


def test_a_result_that_is_a_directory_hides_no_job(home: Path) -> None:
    with_neighbour(home)
    odd = track(home, "502", "COMPLETED", name="odd")
    odd.result.mkdir()
    outcome = status()
    assert outcome.code == 0
    assert "healthy" in outcome.stdout and "odd" in outcome.stdout
    assert "result.json: unreadable (a directory, not a file)" in outcome.stdout


def test_huge_task_range_is_summarised_not_expanded(home: Path) -> None:
    odd = track(home, "503", "FAILED")
    odd.batch_log.write_text(
        "srun: error: n1: tasks 0-99999999999: Killed\nsrun: error: n2: tasks 1-2-3: Bad\n"
    )
    outcome = status("503")
    assert "rank 0-99999999999 on n1 failed: Killed" in outcome.stdout
    assert "rank 1-2-3 on n2 failed: Bad" in outcome.stdout


def test_a_thousand_dead_ranks_are_counted_not_all_printed(home: Path) -> None:
    odd = track(home, "511", "FAILED")
    odd.batch_log.write_text("srun: error: n1: tasks 0-999: Killed\n")
    outcome = status("511")
    assert outcome.stdout.count("failed: Killed") == 8
    assert "and 992 more failed tasks" in outcome.stdout
    assert len(json.loads(status("511", "--json").stdout)[0]["failed_tasks"]) == 1000


def test_ranks_the_watchdog_ended_after_a_hang_are_not_called_failed(home: Path) -> None:
    hung = track(home, "512", "FAILED")
    for line in (
        AttemptLine(attempt=0, event="start", time=1.0, nodes=["n1"]),
        AttemptLine(attempt=0, event="end", time=2.0, outcome="hang", reason="rank 1 on n1 at step 9"),
    ):
        append_line(hung.attempts, line)
    hung.batch_log.write_text("srun: error: n1: tasks 0-1: Killed\n")
    outcome = status("512")
    assert outcome.stdout.count("ended by the watchdog after the hang (Killed)") == 2, outcome.stdout
    assert "failed: Killed" not in outcome.stdout


def test_metrics_ending_in_40_mb_without_newline_is_fast(home: Path) -> None:
    odd = track(home, "504", "FAILED")
    with open(odd.metrics, "wb") as handle:
        handle.write(b'{"kind":"train","step":7,"steps":9,"loss":0.5}\n')
        handle.write(b"x" * (40 << 20))
    outcome = status("504")
    assert outcome.seconds < 5
    assert "7/9" in outcome.stdout


def test_status_shows_the_runtime_error_text(home: Path) -> None:
    """failures/rank-N.json carries error_type and message; status read a key `error` nobody wrote."""
    failed = track(home, "505", "FAILED")
    failed.write_failure(
        FailureReport(rank=1, hostname="node2", error_type="ValueError", message="bad shard")
    )
    failed.batch_log.write_text("srun: error: node2: task 1: Exited with exit code 1\n")
    failed.rank_log(1).write_text("Traceback ...\nValueError: bad shard\n")
    outcome = status("505")
    assert "rank 1 on node2 failed: ValueError: bad shard" in outcome.stdout
    assert "| ValueError: bad shard" in outcome.stdout
    reported = json.loads(status("505", "--json").stdout)[0]
    assert reported["progress"]["failures"][0]["message"] == "bad shard"
    assert reported["failed_tasks"] == [{"rank": "1", "node": "node2", "error": "Exited with exit code 1"}]


def test_one_result_shape_for_ddp_and_parameter_server(home: Path) -> None:
    ddp = track(home, "506", "COMPLETED", name="ddp")
    ddp.write_result(Result(step=10, steps=10, final_loss=0.25, eval_accuracy=0.75, layout="ddp"))
    ps = track(home, "507", "COMPLETED", name="ps")
    ps.write_result(
        Result(
            step=20,
            steps=20,
            final_loss=0.5,
            eval_accuracy=0.875,
            mode="async",
            staleness_mean=1.25,
            staleness_max=3,
            per_worker={"0": WorkerStats(status="finished", steps=20, samples=640, samples_per_s=80.0)},
        )
    )
    outcome = status("506", "507")
    assert "10/10" in outcome.stdout and "0.750" in outcome.stdout
    assert "20/20" in outcome.stdout and "0.875" in outcome.stdout
    assert "parameter server (async), staleness mean 1.25 max 3" in outcome.stdout
    assert "worker 0: finished, 80 samples/s" in outcome.stdout


def test_array_elements_have_their_own_progress_and_logs(home: Path) -> None:
    array = track(home, "508", "FAILED", name="sweep")
    for index, (code, step) in enumerate([("0", 5), ("1", 2)]):
        element = array.element(index)
        element.logs.mkdir(parents=True)
        element.append_metric(metric_line("train", step=step, steps=5, loss=0.5))
        element.exit_codes.write_text(f"508 {code}\n")
        element.rank_log(0).write_text(f"element {index} rank 0\n")
        element.batch_log.write_text(f"element {index} batch\n")
    outcome = status("508")
    assert "508_0" in outcome.stdout and "508_1" in outcome.stdout
    assert "5/5" in outcome.stdout and "2/5" in outcome.stdout
    assert [e["state"] for e in json.loads(status("508", "--json").stdout)[0]["elements"]] == [
        "COMPLETED",
        "FAILED",
    ]
    assert cli("logs", "508").stdout == "element 0 batch\n"
    assert cli("logs", "508", "--element", "1").stdout == "element 1 batch\n"
    assert cli("logs", "508", "--element", "1", "--rank", "0").stdout == "element 1 rank 0\n"


def test_a_few_real_processes_never_traceback(home: Path) -> None:
    odd = track(home, "510", "FAILED")
    odd.result.write_bytes(b"[" * 100_000)
    odd.metrics.write_bytes(b'{"kind":["train"]}\n\xff\xfe')
    odd.batch_log.write_text("srun: error: n1: tasks 0-99999999999: Killed\n")
    for args in (["status"], ["status", "--json"], ["status", "510"], ["list"], ["logs", "510"]):
        proc = run_cli(*args, env={"HPCTRAIN_HOME": str(home)}, timeout=30)
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, (args, proc.stderr)


class FakeSlurm:
    """A backend whose poll answers with the given states (sacct's raw state text in `extra`)."""

    def __init__(self, answers: dict[str, tuple[str, str]]) -> None:
        self.answers = answers

    def poll(self, job_ids: list[str]) -> dict[str, JobInfo]:
        return {
            job: JobInfo(job, JobState(state), extra={"slurm_state": raw}, source="sacct")
            for job in job_ids
            for state, raw in [self.answers[job]]
        }


def killed_ranks(run: RunDir) -> None:
    """What srun writes when a job is cancelled under it: every rank Killed."""
    run.batch_log.write_text("srun: error: n1: tasks 0-3: Killed\nsrun: error: n2: tasks 4-7: Killed\n")


def test_a_job_you_cancelled_is_one_line_that_says_so(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpctrain.tracking import poll
    from hpctrain.tracking.index import Index
    from hpctrain.tracking.poll import CANCEL_REQUESTED

    others = os.getuid() + 4242
    answers = {
        "600": ("CANCELLED", "CANCELLED"),  # squeue's word: no uid, but `hpctrain cancel` recorded it
        "601": ("CANCELLED", f"CANCELLED by {os.getuid()}"),  # a scancel of your own
        "602": ("CANCELLED", f"CANCELLED by {others}"),  # an admin's
        "603": ("TIMEOUT", "TIMEOUT"),
    }
    monkeypatch.setattr(poll, "select_backend", lambda name: FakeSlurm(answers))
    for job in answers:
        killed_ranks(track(home, job, "RUNNING", backend="slurm", name=f"job{job}"))
    index = Index(home)
    index.update_states((run, run.state, CANCEL_REQUESTED) for run in index.runs() if run.job_id == "600")
    for polled in (True, False):  # the first status polls; the second reads what the first recorded
        lines = status().stdout.splitlines()
        rows = {line.split()[0]: line for line in lines if line[:3].isdigit()}
        assert "CANCELLED (by you)" in rows["600"] and "CANCELLED (by you)" in rows["601"], polled
        assert f"CANCELLED (by uid {others})" in rows["602"]
        assert "TIMEOUT" in rows["603"]
        below = lines[len(answers) + 1 :]
        assert below == [
            "  job 603: TIMEOUT (the time limit was reached: rank 0 on n1); batch log: "
            + str(next(r.run_dir for r in index.runs() if r.job_id == "603"))
            + "/logs/batch.log"
        ], lines
    reported = {s["job_id"]: s for s in json.loads(status("--json").stdout)}
    assert reported["600"]["cancelled_by"] == "you" and reported["602"]["cancelled_by"] == f"uid {others}"
    assert len(reported["600"]["failed_tasks"]) == 8  # --json still has srun's word on every task


def test_a_long_reason_is_cut_at_a_word_and_kept_whole_in_json_and_record(home: Path) -> None:
    from hpctrain.scheduler.base import JobState
    from hpctrain.tracking.index import Index

    reason = (
        "sbatch failed: sbatch: error: Batch job submission failed: "
        "Invalid account or account/partition combination specified"
    )
    run = track(home, "", JobState.SUBMIT_FAILED)
    index = Index(home)
    index.update_states((r, JobState.SUBMIT_FAILED, reason) for r in index.runs())
    [row] = [
        line
        for line in status().stdout.splitlines()
        if "SUBMIT_FAILED" in line and "not submitted" not in line
    ]
    cell = row[row.index("sbatch failed") :].rsplit("  ", 1)[0].strip()
    assert cell.endswith("…") and reason.startswith(cell[:-1]) and reason[len(cell) - 1] == " ", cell
    assert json.loads(status("--json").stdout)[0]["reason"] == reason
    assert json.loads(run.record.read_text())["reason"] == reason


def test_the_goodput_split_is_read_only_where_it_is_shown(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpctrain.rundir import goodput
    from hpctrain.tracking import status as status_model

    done = track(home, "700", "COMPLETED")
    done.append_metric(metric_line("train", step=5, steps=5, loss=0.5))
    read: list[Path] = []

    def counted(run: RunDir, *args: float | None) -> goodput.GoodputSplit | None:
        read.append(run.root)
        return goodput.split(run, *args)

    monkeypatch.setattr(status_model, "split", counted)
    for shown_without in (["700"], ["700", "--watch"], [], ["--json"]):
        assert status(*shown_without).code == 0 and read == [], shown_without
    for shown_with in (["700", "--json"], ["700", "--watch", "--json"]):
        assert status(*shown_with).code == 0 and read == [done.root], shown_with
        read.clear()
