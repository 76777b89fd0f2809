"""Ranks as parameter-server components: their names, which the job can lose, and the watchdog's
rules for them (a dead worker is given up on alone, a hung server is a hang, named by its role)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from hpctrain.rundir import FailureReport, HangReport, Heartbeat, RankBeat, Result, RunDir, read_json
from hpctrain.spec import ParameterServer
from hpctrain.spec.job import Watchdog
from hpctrain.supervisor import watchdog
from hpctrain.supervisor.components import Components
from hpctrain.supervisor.hang_rule import Seen
from hpctrain.supervisor.watchdog import Context

PS = Components(ParameterServer(servers=1))


def test_ranks_are_named_by_their_role_in_a_parameter_server_job() -> None:
    assert [PS.name(rank) for rank in (0, 1, 2)] == [
        "server 0 (rank 0)",
        "worker 0 (rank 1)",
        "worker 1 (rank 2)",
    ]
    assert Components(ParameterServer(servers=2)).name(2) == "worker 0 (rank 2)"
    assert Components().name(3) == "rank 3"
    assert PS.name("0-2") == "rank 0-2"  # srun's task range that is no single rank stays as written


def test_only_workers_are_expendable_and_never_the_last_one() -> None:
    assert [PS.expendable(rank) for rank in (0, 1, 2)] == [False, True, True]
    assert not Components().expendable(1)
    assert PS.can_lose([2], alive=[0, 1, 2])
    assert not PS.can_lose([1, 2], alive=[0, 1, 2])  # no worker would be left
    assert not PS.can_lose([0], alive=[0, 1, 2])  # a server
    assert not PS.can_lose([], alive=[0, 1, 2])
    assert not Components().can_lose([1], alive=[0, 1, 2])


def late(rank: int, silent: float = 0.5) -> Seen:
    return Seen(
        rank=rank, node="node1", step=10, phase="collective", idle_s=40, silent_s=silent, step_s=0.1, pid=1
    )


def test_the_watchdog_gives_up_on_stopped_or_dead_workers_alone() -> None:
    everyone = [late(0), late(1), late(2)]
    # Sync: the server and worker 0 wait for the stopped worker 1; only worker 1 is ended.
    assert [r.rank for r in watchdog.to_give_up(PS, [late(0), late(1), late(2, silent=40)], everyone)] == [2]
    # Async: one worker stuck while ticking, the others advance.
    assert [r.rank for r in watchdog.to_give_up(PS, [late(2)], everyone)] == [2]
    # A stopped server, every worker late, or a DDP rank: a hang of the job.
    assert watchdog.to_give_up(PS, [late(0, silent=40), late(1)], everyone) == []
    assert watchdog.to_give_up(PS, [late(1), late(2)], everyone) == []
    assert watchdog.to_give_up(PS, [late(0), late(2)], everyone) == []
    assert watchdog.to_give_up(Components(), [late(2, silent=40)], everyone) == []


def ps_run(tmp_path: Path, server_silent: float = 0.0, worker_silent: float = 0.0) -> RunDir:
    """Server 0 on node1, workers 0 and 1 on node2; the server or worker 1 silent for that long."""
    run = RunDir(tmp_path)
    now = time.time()

    def rank(step: int, phase: str, silent: float, pid: int) -> RankBeat:
        return RankBeat(
            step=step, phase=phase, time=now - silent, step_since=now - silent - 1, step_s=0.1, pid=pid
        )

    server = rank(120, "collective", server_silent, 1)
    workers = {1: rank(60, "forward", 0.0, 2), 2: rank(58, "backward", worker_silent, 3)}
    run.write_heartbeat(Heartbeat(node="node1", time=now, attempt=0, step_id="0", ranks={0: server}))
    run.write_heartbeat(Heartbeat(node="node2", time=now, attempt=0, step_id="0", ranks=workers))
    return run


def guard(run: RunDir, monkeypatch: pytest.MonkeyPatch, step_s: float = 60) -> dict[str, object]:
    """Run the watchdog of a 1-server PS job over `run` until it returns; what it did."""
    did: dict[str, object] = {"ended_ranks": []}
    monkeypatch.setattr(watchdog, "end_rank", lambda ctx, seen: did["ended_ranks"].append(seen.rank))  # type: ignore[union-attr]
    monkeypatch.setattr(
        watchdog, "end_step", lambda ctx, pid, step_ids, ranks, *wait: did.update(step_ids=step_ids)
    )
    monkeypatch.setattr(watchdog, "collect_stacks", lambda ctx, nodes, stopped=frozenset(): {})
    monkeypatch.setattr(watchdog, "GONE_GRACE_S", 0.0)
    ctx = Context(
        run=run,
        settings=Watchdog(hang_timeout=10, heartbeat_interval=1),
        attempt=0,
        job_id="",
        node="node1",
        signum=signal.SIGUSR2,
        started=time.time() - 60,
        components=PS,
    )
    step = subprocess.Popen(["sleep", str(step_s)])
    try:
        assert watchdog.guard_step(ctx, step.pid, poll_s=0.1) == 0
    finally:
        step.kill()
        step.wait()
    did["lost"] = ctx.lost
    return did


def test_a_dead_worker_is_given_up_on_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = ps_run(tmp_path, worker_silent=40)
    did = guard(run, monkeypatch, step_s=2)  # the step ends by itself
    assert did["ended_ranks"] == [2] and did["lost"] == {2}, did
    assert "step_ids" not in did  # the step was not ended
    assert read_json(run.hang_report, HangReport) is None


def test_a_stopped_rank_that_holds_a_completed_run_ends_the_step_without_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = ps_run(tmp_path, worker_silent=40)
    run.write_result(Result(step=200, steps=200))  # the others finished training meanwhile
    did = guard(run, monkeypatch)
    assert did["step_ids"] == {"0"}, did
    assert read_json(run.hang_report, HangReport) is None


def test_a_hung_server_is_a_hang_named_by_its_role(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    did = guard(ps_run(tmp_path, server_silent=40), monkeypatch)
    assert did["ended_ranks"] == [] and "step_ids" in did
    report = read_json(RunDir(tmp_path).hang_report, HangReport)
    assert isinstance(report, HangReport), report
    assert report.summary.startswith("server 0 (rank 0) on node1 hung at step 120"), report.summary


def test_a_workers_failure_report_does_not_end_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = ps_run(tmp_path)
    run.write_failure(FailureReport(rank=2, hostname="node2", error_type="PSFailed", time=time.time()))
    did = guard(run, monkeypatch, step_s=2)  # the step ends by itself
    assert "step_ids" not in did and did["ended_ranks"] == [], did
    run.write_failure(FailureReport(rank=0, hostname="node1", error_type="ServerFailed", time=time.time()))
    assert "step_ids" in guard(run, monkeypatch)  # a server's failure ends it
