"""The hang rule, the diagnosis and its summary, stack parsing,
the status lines, and the watchdog process against real rank processes (one of them STOPped)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain import spec
from hpctrain.rundir import HangReport, Heartbeat, RankBeat, RunDir, read_json
from hpctrain.spec.job import Watchdog
from hpctrain.supervisor import hang_rule, stacks
from hpctrain.supervisor.hang_rule import Seen
from hpctrain.supervisor.watchdog import Context, diagnose, summary
from hpctrain.tracking import health
from tests.conftest import REPO

SETTINGS = Watchdog(hang_timeout=30, step_time_factor=10, startup_timeout=600, slow_phase_timeout=300)


def seen(
    rank: int, step: int = 100, phase: str = "backward", idle: float = 1.0, silent: float = 0.5, **kw: object
) -> Seen:
    values = {"node": f"node{rank // 2 + 1}", "step_s": 0.1, "pid": 1000 + rank, **kw}
    return Seen(rank=rank, step=step, phase=phase, idle_s=idle, silent_s=silent, **values)  # type: ignore[arg-type]


# -- the hang rule ----------------------------------------------------------------------------


def test_allowance_is_the_floor_or_k_median_steps() -> None:
    ranks = [seen(0), seen(1)]
    assert hang_rule.allowance(SETTINGS, ranks, None) == 30
    assert hang_rule.allowance(SETTINGS, ranks, 1.0) == 30
    assert hang_rule.allowance(SETTINGS, ranks, 5.0) == 50


def test_a_running_rank_in_a_slow_phase_or_starting_extends_everyones_allowance() -> None:
    assert hang_rule.allowance(SETTINGS, [seen(0, phase="checkpoint"), seen(1)], 0.1) == 300
    assert hang_rule.allowance(SETTINGS, [seen(0, phase="eval"), seen(1)], 0.1) == 300
    assert hang_rule.allowance(SETTINGS, [seen(0, step_s=None), seen(1)], 0.1) == 600
    # A rank that has not ticked for the steady allowance does no work: no extension.
    assert hang_rule.allowance(SETTINGS, [seen(0, phase="checkpoint", silent=31), seen(1)], 0.1) == 30
    assert hang_rule.allowance(SETTINGS, [seen(0, phase="checkpoint", silent=20), seen(1)], 0.1) == 300


def test_overdue_names_ranks_past_the_allowance_and_stopped_ranks_get_no_startup_allowance() -> None:
    ranks = [seen(0, idle=31), seen(1, idle=29)]
    assert [r.rank for r in hang_rule.overdue(SETTINGS, ranks, 0.1)] == [0]
    starting = [seen(0, idle=100, step_s=None), seen(1, idle=100, step_s=None, silent=40)]
    assert [r.rank for r in hang_rule.overdue(SETTINGS, starting, None)] == [1]
    # Seconds without a tick (a C library loading under the GIL) is no hang at startup, even when
    # the other ranks have started: the slow one still extends the allowance.
    loading = [seen(0, idle=100, step_s=None), seen(1, idle=100, step_s=None, silent=12)]
    assert hang_rule.overdue(SETTINGS, loading, None) == []
    late_starter = [seen(0, idle=3), seen(1, idle=40, step_s=None, silent=8)]
    assert hang_rule.overdue(SETTINGS, late_starter, 0.1) == []
    assert hang_rule.overdue(SETTINGS, [seen(0, idle=1000)], 200.0) == []  # 10 x 200 s steps


def test_observe_counts_idle_and_silence_on_the_nodes_clock_plus_the_files_age() -> None:
    beat = Heartbeat(
        node="node2",
        time=1000.0,
        attempt=0,
        ranks={
            2: RankBeat(step=7, phase="backward", time=990.0, step_since=980.0, step_s=0.2, pid=5),
            3: RankBeat(step=8, phase="collective", time=999.5, step_since=995.0),
        },
    )
    two, three = hang_rule.seen_ranks([beat], now=1004.0)
    assert (two.rank, two.node, two.idle_s, two.silent_s, two.responsive) == (2, "node2", 24.0, 14.0, False)
    assert (three.idle_s, three.silent_s, three.responsive, three.step_s) == (9.0, 4.5, True, None)


def test_a_trained_rank_without_ticks_for_stopped_timeout_is_hung_at_once_and_named() -> None:
    """Two seconds without a tick, far inside hang_timeout's 30 s: with stopped_timeout 1.5 the
    rank in backward (or in a memory snapshot) is stopped; the same silence while saving to disk,
    before the first step, or with stopped_timeout unset is not."""

    def beat(phase: str, step_s: float | None) -> Heartbeat:
        return Heartbeat(
            node="node1",
            time=1000.0,
            attempt=0,
            ranks={
                0: RankBeat(step=40, phase="collective", time=1000.0, step_since=999.0, step_s=0.1, pid=4),
                1: RankBeat(step=40, phase=phase, time=998.0, step_since=997.9, step_s=step_s, pid=5),
            },
        )

    settings = Watchdog(hang_timeout=30, stopped_timeout=1.5)
    # A checkpoint into node memory is a copy to host memory, not a slow phase: stopped there is stopped.
    for phase in ("backward", "snapshot"):
        ranks = hang_rule.seen_ranks([beat(phase, 0.1)], now=1000.0, stopped_timeout=1.5)
        assert [r.rank for r in hang_rule.overdue(settings, ranks, 0.1)] == [1], phase
    ranks = hang_rule.seen_ranks([beat("backward", 0.1)], now=1000.0, stopped_timeout=1.5)
    assert [r.rank for r in ranks if not r.responsive] == [1]
    hung, waiting = diagnose(ranks, {0: "all-reduce"})
    assert [r.rank for r in hung] == [1] and [r.rank for r in waiting] == [0]
    for phase, step_s in (("checkpoint", 0.1), ("startup", None)):
        ranks = hang_rule.seen_ranks([beat(phase, step_s)], now=1000.0, stopped_timeout=1.5)
        assert hang_rule.overdue(settings, ranks, 0.1) == [] and all(r.responsive for r in ranks)
    unset = Watchdog(hang_timeout=30, stopped_timeout=None)
    ranks = hang_rule.seen_ranks([beat("backward", 0.1)], now=1000.0, stopped_timeout=None)
    assert hang_rule.overdue(unset, ranks, 0.1) == []


def test_a_node_gone_quiet_is_not_stopped_ranks() -> None:
    """A node file 3 s old whose ranks ticked until it was written: the node went quiet (lost, or
    its writer stalled), which the node-silence rule probes; the stopped rule does not fire."""
    quiet = Heartbeat(
        node="node2",
        time=997.0,
        attempt=0,
        ranks={2: RankBeat(step=40, phase="backward", time=997.0, step_since=996.9, step_s=0.1, pid=6)},
    )
    [rank] = hang_rule.seen_ranks([quiet], now=1000.0, stopped_timeout=1.5)
    assert rank.silent_s == 3.0 and not rank.stopped and rank.responsive
    assert hang_rule.overdue(Watchdog(hang_timeout=30, stopped_timeout=1.5), [rank], 0.1) == []


# -- the diagnosis ------------------------------------------------------------------------------


def test_a_stopped_rank_is_named_and_the_others_wait() -> None:
    ranks = [seen(0), seen(1), seen(2, silent=14.2), seen(3)]
    waits = {0: "all-reduce", 1: "all-reduce", 3: "all-reduce", 2: ""}
    hung, waiting = diagnose(ranks, waits)
    assert [r.rank for r in hung] == [2] and [r.rank for r in waiting] == [0, 1, 3]
    assert summary(hung, waiting, waits) == (
        "rank 2 on node2 hung at step 100 (backward; not responding for 14 s), "
        "others waiting in the all-reduce"
    )


def test_a_running_rank_behind_the_others_is_named() -> None:
    ranks = [seen(0, step=1301, phase="collective"), seen(1, step=1300, phase="forward"), seen(2, step=1301)]
    hung, waiting = diagnose(ranks, {})
    assert [r.rank for r in hung] == [1]
    assert summary(hung, waiting, {0: "barrier", 2: "barrier"}) == (
        "rank 1 on node1 hung at step 1300 (forward), others waiting in the barrier"
    )


def test_at_one_step_the_rank_not_in_a_collective_is_named() -> None:
    ranks = [seen(0), seen(1), seen(2, phase="forward"), seen(3)]
    waits = {0: "all-reduce", 1: "all-reduce", 3: "backward (gradient all-reduce)"}
    hung, waiting = diagnose(ranks, waits)
    assert [r.rank for r in hung] == [2]
    assert summary(hung, waiting, waits) == (
        "rank 2 on node2 hung at step 100 (forward), others waiting "
        "(ranks 0, 1 in the all-reduce; 3 in the backward (gradient all-reduce))"
    )


def test_a_deadlock_in_a_collective_names_every_rank() -> None:
    ranks = [seen(0, phase="collective"), seen(1, phase="collective")]
    hung, waiting = diagnose(ranks, {0: "all-reduce", 1: "all-reduce"})
    assert [r.rank for r in hung] == [0, 1] and waiting == []
    assert summary(hung, waiting, {}).endswith("no rank is ahead of the others")


def test_a_hang_before_the_first_step_is_during_start_up() -> None:
    """Issue 23 item 10: the runtime's step -1 reads "during start-up", not "step -1"."""
    ranks = [seen(0, step=-1, silent=40.0), seen(1, step=-1)]
    hung, waiting = diagnose(ranks, {1: "barrier"})
    text = summary(hung, waiting, {1: "barrier"})
    assert text.startswith("rank 0 on node1 hung during start-up (") and "step -1" not in text, text


PY_SPY = """Process 9364: python3 -m hpctrain.runtime
Python v3.11.7

Thread 9364 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2950)
    wrapper (torch/distributed/c10d_logger.py:81)
    _mean_over_ranks (hpctrain/runtime/train.py:213)
Thread 10104 (idle): "hpctrain-heartbeat"
    Condition.wait (threading.py:331)
"""
FAULTHANDLER = """Thread 0x00007f1443e3e6c0 (most recent call first):
  File "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4800 in barrier
  File "/work/hpctrain/runtime/train.py", line 174 in resume
"""


def test_what_a_stack_says_a_rank_waits_in() -> None:
    assert stacks.waiting_in(PY_SPY) == "all-reduce"
    assert stacks.waiting_in(FAULTHANDLER) == "barrier"
    backward = 'Thread 1 (idle): "MainThread"\n    _engine_run_backward (torch/autograd/graph.py:979)\n'
    assert stacks.waiting_in(backward) == "backward (gradient all-reduce)"
    poll = 'Thread 1 (idle): "MainThread"\n    Preemption.poll (hpctrain/runtime/signals.py:74)\n'
    assert stacks.waiting_in(poll.replace("Preemption.poll", "poll")) == "all-reduce (preemption agreement)"
    assert stacks.waiting_in('Thread 1 (active): "MainThread"\n    forward (model.py:3)\n') == ""
    assert stacks.waiting_in("") == ""


@given(st.text(max_size=400))
def test_any_stack_text_parses(text: str) -> None:
    assert isinstance(stacks.waiting_in(text), str)


# -- status lines -------------------------------------------------------------------------------


def test_status_lines_for_a_hang_and_for_a_silent_node(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert health.lines(tmp_path, "RUNNING", now=100.0) == []
    run.write_heartbeat(Heartbeat(node="node1", time=95.0, attempt=1, interval=5.0))
    run.write_heartbeat(Heartbeat(node="node2", time=65.0, attempt=1, interval=5.0))
    run.write_heartbeat(Heartbeat(node="node3", time=5.0, attempt=0, interval=5.0))  # a past attempt's node
    assert health.lines(tmp_path, "RUNNING", now=100.0) == [
        "not progressing: no heartbeat from node2 for 35 s"
    ]
    assert health.lines(tmp_path, "COMPLETED", now=100.0) == []
    run.failures.mkdir()
    report = HangReport(
        time=90.0, summary="rank 2 on node2 at step 130 (phase backward)", stacks="/r/failures/stacks"
    )
    from hpctrain.rundir import write_json

    write_json(run.hang_report, report)
    assert health.lines(tmp_path, "FAILED", now=100.0) == [
        "HUNG: rank 2 on node2 at step 130 (phase backward); stacks: /r/failures/stacks"
    ]
    assert health.as_json(tmp_path, "RUNNING", now=100.0)["silent_nodes"] == {"node2": 35.0}
    assert run.read_failures() == []  # hang.json is no rank's failure report


# -- the watchdog process against real ranks -------------------------------------------------

RANK = """
import sys, time
from pathlib import Path
from hpctrain.runtime import heartbeat
rank = int(sys.argv[1])
heartbeat.start(Path(sys.argv[2]), rank, rank, "nodeX", "", 0.5, "USR1")
step = 0
while True:
    heartbeat.mark("data", step)
    time.sleep(0.02)
    heartbeat.mark("collective")
    time.sleep(0.02)
    step += 1
"""


def write_spec(run_dir: Path, **watchdog: float) -> None:
    job = spec.decode(
        spec.JobSpec,
        {
            "name": "watchdog-test",
            "train": {"entrypoint": "hpctrain.examples.digits:build", "parallel": "ddp", "steps": 10},
            "resources": {"nodes": 1, "tasks_per_node": 2, "partition": "cpu"},
            "watchdog": watchdog,
        },
        "test",
    )
    resolved = spec.resolve(job, spec.load_site(REPO / "site-configs" / "local.yaml"))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "spec.json").write_bytes(spec.dumps(resolved))


def test_the_watchdog_names_a_stopped_rank_collects_stacks_and_ends_the_step(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_spec(run_dir, hang_timeout=6, heartbeat_interval=0.5, startup_timeout=60)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("SLURM") and key != "HPCTRAIN_ATTEMPT"
    }
    env |= {
        "HPCTRAIN_RUN_DIR": str(run_dir),
        "HPCTRAIN_HEARTBEAT_DIR": str(tmp_path / "shm"),
        "SLURMD_NODENAME": "nodeX",
        "PYTHONPATH": str(REPO),
    }
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, str(r), str(run_dir)], env=env) for r in (0, 1)]
    step = subprocess.Popen(["sleep", "300"])
    watchdog = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list((run_dir / "heartbeats").glob("*.json")):
            time.sleep(0.2)
        time.sleep(1.5)  # a few steps: the ranks have a step time
        os.kill(ranks[1].pid, signal.SIGSTOP)
        watchdog = subprocess.run(
            [sys.executable, "-m", "hpctrain.supervisor.watchdog", "--step-pid", str(step.pid)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert watchdog.returncode == 0, watchdog.stderr
        report = read_json(RunDir(run_dir).hang_report, HangReport)
        assert isinstance(report, HangReport), watchdog.stdout
        assert [r.rank for r in report.hung] == [1] and [r.rank for r in report.waiting] == [0]
        assert report.summary.startswith("rank 1 on nodeX hung ")
        assert "not responding" in report.summary
        assert "HUNG: rank 1 on nodeX" in watchdog.stdout
        stopped = RunDir(run_dir).rank_stacks(1).read_text()
        running = RunDir(run_dir).rank_stacks(0).read_text()
        assert "faulthandler: not asked" in stopped
        assert "== faulthandler ==" in running and "<module>" in running  # the rank printed its own stack
        if stacks.py_spy_path() is not None:
            assert '"MainThread"' in stopped and '"MainThread"' in running
        else:
            print("py-spy not installed: only faulthandler stacks checked")
        assert step.wait(timeout=10) == -signal.SIGKILL  # the step was ended
    finally:
        for proc in ranks:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
        step.kill()
        step.wait()


def context(run: RunDir, settings: Watchdog, started: float, job_id: str = "4242") -> Context:
    """The watchdog of attempt 0 of job `job_id`, running on node1."""
    return Context(
        run=run,
        settings=settings,
        attempt=0,
        job_id=job_id,
        node="node1",
        signum=signal.SIGUSR2,
        started=started,
    )


# -- ranks gone: a silent node ------------------------------------------------------------------


def silent_node_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: bool
) -> tuple[dict[str, object], RunDir]:
    """node1 fresh, node2 silent for 20 s; the probe of node2 answers or not. Returns what the
    watchdog did (end_step's arguments) and the run directory."""
    from hpctrain.supervisor import watchdog

    run = RunDir(tmp_path)
    now = time.time()
    waiting = RankBeat(step=51, phase="collective", time=now, step_since=now - 1, step_s=0.1, pid=1)
    gone = RankBeat(step=50, phase="backward", time=now - 20, step_since=now - 25, step_s=0.1, pid=2)
    run.write_heartbeat(Heartbeat(node="node1", time=now, attempt=0, step_id="0", ranks={0: waiting}))
    run.write_heartbeat(Heartbeat(node="node2", time=now - 20, attempt=0, step_id="0", ranks={2: gone}))
    did: dict[str, object] = {}
    monkeypatch.setattr(watchdog, "node_records", lambda nodes: {})
    monkeypatch.setattr(watchdog, "node_answers", lambda node, record, timeout_s, job_id, group: answers)
    monkeypatch.setattr(
        watchdog, "end_step", lambda ctx, pid, step_ids, ranks, *wait: did.update(step_ids=step_ids)
    )
    monkeypatch.setattr(watchdog, "collect_stacks", lambda ctx, nodes, stopped=frozenset(): {})
    monkeypatch.setattr(watchdog, "GONE_GRACE_S", 0.0)
    ctx = context(run, Watchdog(hang_timeout=10, heartbeat_interval=1), started=now - 60)
    step = subprocess.Popen(["sleep", "60"])
    try:
        assert watchdog.guard_step(ctx, step.pid, poll_s=0.1) == 0
    finally:
        step.kill()
        step.wait()
    return did, run


def test_a_silent_node_that_does_not_answer_ends_the_step_without_a_hang_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    did, run = silent_node_run(tmp_path, monkeypatch, answers=False)
    assert did == {"step_ids": {"0"}}
    assert not run.hang_report.exists()  # a lost node, not a hang


def test_a_silent_node_that_answers_is_a_hang_of_its_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    did, run = silent_node_run(tmp_path, monkeypatch, answers=True)
    assert did == {"step_ids": {"0"}}
    report = read_json(run.hang_report, HangReport)
    assert isinstance(report, HangReport)
    assert [(r.rank, r.node) for r in report.hung] == [(2, "node2")]


# -- ranks gone: a failure report while peers wait for good ------------------------------------


def test_a_failure_report_ends_the_step_within_the_grace_not_a_heartbeat_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank that failed (its peer's node lost) is seen on the watchdog's short tick: the step ends
    about GONE_GRACE_S after the report, even with heartbeats read only every 30 s."""
    import threading

    from hpctrain.rundir import FailureReport
    from hpctrain.supervisor import watchdog

    run = RunDir(tmp_path)
    now = time.time()
    beat = RankBeat(step=5, phase="collective", time=now, step_since=now, step_s=0.1, pid=1)
    run.write_heartbeat(Heartbeat(node="node1", time=now, attempt=0, step_id="0", ranks={0: beat}))
    ended: list[float] = []
    monkeypatch.setattr(watchdog, "end_step", lambda *args: ended.append(time.monotonic()))
    monkeypatch.setattr(watchdog, "GONE_GRACE_S", 0.5)
    ctx = context(run, Watchdog(hang_timeout=60, heartbeat_interval=30), started=now - 1)
    report = FailureReport(rank=0, hostname="node1", error_type="RuntimeError", message="reset", time=now)
    failed_at: list[float] = []

    def fail_soon() -> None:
        time.sleep(0.5)
        failed_at.append(time.monotonic())
        run.write_failure(report)

    writer = threading.Thread(target=fail_soon)
    step = subprocess.Popen(["sleep", "60"])
    try:
        writer.start()
        assert watchdog.guard_step(ctx, step.pid, poll_s=30) == 0
    finally:
        writer.join()
        step.kill()
        step.wait()
    assert len(ended) == 1
    assert ended[0] - failed_at[0] < 0.5 + 3 * watchdog.TICK_S, ended[0] - failed_at[0]


def test_ending_a_step_stops_waiting_once_this_nodes_ranks_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """srun waits for good on a lost node's tasks: once the scancel has ended this node's ranks, srun
    is killed without waiting out the rest of `wait_s`. (scancel here stands in for slurmstepd: it
    kills the rank it is given in HPCTRAIN_TEST_RANK_PID, and never ends srun.)"""
    from hpctrain.supervisor import watchdog

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scancel").write_text('#!/bin/sh\nkill -9 "$HPCTRAIN_TEST_RANK_PID"\n')
    (bin_dir / "scancel").chmod(0o755)
    rank = subprocess.Popen(["sleep", "60"])
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HPCTRAIN_TEST_RANK_PID", str(rank.pid))
    ctx = context(RunDir(tmp_path), Watchdog(), started=time.time())
    step = subprocess.Popen(["sleep", "60"])
    seen = [
        Seen(
            rank=0,
            node="node1",
            step=3,
            phase="collective",
            idle_s=0.0,
            silent_s=0.0,
            step_s=None,
            pid=rank.pid,
        )
    ]
    try:
        began = time.monotonic()
        watchdog.end_step(ctx, step.pid, {"0"}, seen, wait_s=30)
        assert time.monotonic() - began < 5
        assert rank.wait(timeout=5) == -signal.SIGKILL and step.wait(timeout=5) == -signal.SIGKILL
    finally:
        for proc in (step, rank):
            proc.kill()
            proc.wait()


def test_ranks_that_advance_while_the_stacks_are_collected_are_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Overdue at the first look, advancing at the second (after the stacks): no hang report, the
    step is not ended, and the watchdog goes on watching until the step ends by itself."""
    from hpctrain.supervisor import watchdog

    run = RunDir(tmp_path)
    now = time.time()

    def node_file(step_since: float, step: int) -> Heartbeat:
        beat = RankBeat(
            step=step, phase="backward", time=time.time(), step_since=step_since, step_s=0.1, pid=1
        )
        return Heartbeat(node="node1", time=time.time(), attempt=0, step_id="0", ranks={0: beat})

    run.write_heartbeat(node_file(now - 8, 50))  # 8 s into step 50: overdue against 5 s
    step = subprocess.Popen(["sleep", "60"])
    looks: list[float] = []

    def stacks_then_advance(ctx: object, nodes: object, stopped: object = None) -> dict[int, str]:
        looks.append(time.time())
        run.write_heartbeat(node_file(time.time() - 0.2, 51))  # the rank moved on meanwhile
        if len(looks) == 1:
            threading.Timer(1.0, step.kill).start()  # the step then ends by itself
        return {}

    ended: list[object] = []
    monkeypatch.setattr(watchdog, "collect_stacks", stacks_then_advance)
    monkeypatch.setattr(watchdog, "end_step", lambda *args: ended.append(args))
    ctx = context(run, Watchdog(hang_timeout=5, heartbeat_interval=1), started=now - 60)
    try:
        assert watchdog.guard_step(ctx, step.pid, poll_s=0.2) == 0
    finally:
        step.kill()
        step.wait()
    assert looks and not ended
    assert not run.hang_report.exists()


def test_a_shrunk_attempt_asks_to_grow_back_when_its_lost_node_answers(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 23 item 11: the watchdog of a shrunk attempt turns a returned node into a checkpoint
    and a requeue (the preemption flag), once."""
    from hpctrain.rundir import AttemptLine
    from hpctrain.rundir.attempts import History
    from hpctrain.supervisor import supervise, watchdog

    lines = [
        AttemptLine(attempt=0, event="start", time=1.0, nodes=["node1", "node2"]),
        AttemptLine(attempt=0, event="end", time=2.0, outcome="node_failure", failed_nodes=["node2"]),
        AttemptLine(attempt=1, event="start", time=3.0, nodes=["node1"]),
    ]
    history = History(lines)
    assert watchdog.missing_nodes(history, 1, planned=2) == ["node2"]
    assert watchdog.missing_nodes(history, 0, planned=2) == []
    run = RunDir(tmp_path)
    ctx = Context(run, Watchdog(), 1, "7", "node1", signal.SIGUSR2, missing=["node2"])
    monkeypatch.setattr(supervise, "answering_again", lambda nodes: [])
    assert not watchdog.grow_back(ctx) and not run.preempt_flag.exists()
    monkeypatch.setattr(supervise, "answering_again", lambda nodes: list(nodes))
    assert watchdog.grow_back(ctx) and run.preempt_flag.exists()
