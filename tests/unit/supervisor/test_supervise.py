"""The supervisor's decisions (hpctrain.supervisor.supervise.decide/classify) and the restart history,
without Slurm: examples for each rule, and hypothesis over arbitrary attempt histories."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from hpctrain.rundir import AttemptLine, FailureReport, HangReport, RankState, RunDir, append_line
from hpctrain.rundir.attempts import FAULTS, History, Outcome, run_summary, summarize, summary_line
from hpctrain.scheduler.slurm.task_errors import FailedTask
from hpctrain.spec.job import Restart
from hpctrain.supervisor import supervise
from hpctrain.supervisor.supervise import (
    Decision,
    Job,
    StepEnd,
    attempt_task_errors,
    classify,
    decide,
    policy_of,
    set_aside_failures,
)
from hpctrain.supervisor.watchdog import Context

NODES = ["node1", "node2"]


def start(attempt: int, nodes: list[str] = NODES) -> AttemptLine:
    return AttemptLine(attempt=attempt, event="start", time=100.0 + attempt, job_id="7", nodes=nodes)


def end(attempt: int, outcome: str, nodes: list[str] | None = None, **fields: object) -> AttemptLine:
    return AttemptLine(
        attempt=attempt, event="end", time=100.5 + attempt, job_id="7", outcome=outcome,
        failed_nodes=nodes or [], **fields,  # type: ignore[arg-type]
    )  # fmt: skip


def history_of(*outcomes: str) -> History:
    lines = []
    for number, outcome in enumerate(outcomes):
        lines += [start(number), end(number, outcome)]
    return History(lines)


def test_a_completed_step_is_done() -> None:
    history = history_of("completed")
    assert decide(history, history.ends[-1], Restart(), NODES, 2) == Decision("done")


def test_a_rank_failure_is_relaunched_on_the_same_nodes() -> None:
    history = history_of("rank_failure")
    assert decide(history, history.ends[-1], Restart(), NODES, 2) == Decision(
        "launch", nodes=("node1", "node2")
    )


def test_the_restart_budget_ends_the_job_with_the_step_status() -> None:
    history = history_of("rank_failure", "hang", "rank_failure", "rank_failure")
    assert decide(history, history.ends[-1], Restart(max=3), NODES, 2, status=137) == Decision("fail", 137)
    assert decide(history, history.ends[-1], Restart(max=4), NODES, 2).action == "launch"


def test_max_zero_fails_at_the_first_fault() -> None:
    history = history_of("rank_failure")
    assert decide(history, history.ends[-1], Restart(max=0), NODES, 2, status=1).action == "fail"


def test_a_fault_left_out_of_restart_on_is_not_retried() -> None:
    history = history_of("hang")
    assert decide(history, history.ends[-1], Restart(on=["rank_failure"]), NODES, 2).action == "fail"


def test_a_lost_node_shrinks_or_requeues_without_it() -> None:
    history = History([start(0), end(0, "node_failure", ["node2"])])
    last = history.ends[-1]
    assert decide(history, last, Restart(), NODES, 2) == Decision("launch", nodes=("node1",))
    assert decide(history, last, Restart(shrink=False), NODES, 2) == Decision("requeue", exclude=("node2",))
    assert decide(history, last, Restart(min_nodes=2), NODES, 2) == Decision("requeue", exclude=("node2",))
    # Without exclude_failed_nodes the lost node is still not launched on, but not excluded for good.
    assert decide(history, last, Restart(shrink=False, exclude_failed_nodes=False), NODES, 2) == Decision(
        "requeue"
    )


def test_preemption_and_preflight_requeue_without_counting_a_restart() -> None:
    lines = [start(0), end(0, "preflight", ["node1"]), start(1, ["node2", "node3"]), end(1, "preempted")]
    history = History(lines)
    assert decide(history, history.ends[-1], Restart(max=0), NODES, 2) == Decision(
        "requeue", exclude=("node1",)
    )
    assert history.restarts() == []


def test_the_first_attempt_of_an_allocation_avoids_excluded_nodes() -> None:
    history = History([start(0), end(0, "node_failure", ["node1"])])
    assert decide(history, None, Restart(shrink=False), NODES, 2) == Decision("requeue", exclude=("node1",))
    assert decide(History(), None, Restart(), NODES, 2) == Decision("launch", nodes=("node1", "node2"))


def failure(rank: int, error: str, step: int, when: float) -> FailureReport:
    kind, _, message = error.partition(": ")
    return FailureReport(rank=rank, hostname="node1", error_type=kind, message=message, step=step, time=when)


def test_the_same_exception_at_the_same_step_twice_is_a_bug() -> None:
    first = classify(StepEnd(1, failures=[failure(0, "ValueError: bad", 7, 2.0)]), start(0), History())
    assert (first.outcome, first.step, first.error) == ("rank_failure", 7, "ValueError: bad")
    history = History([start(0), first, start(1)])
    again = classify(StepEnd(1, failures=[failure(1, "ValueError: bad", 7, 3.0)]), start(1), history)
    assert again.outcome == "failed" and "again" in again.reason
    elsewhere = classify(StepEnd(1, failures=[failure(1, "ValueError: bad", 8, 3.0)]), start(1), history)
    assert elsewhere.outcome == "rank_failure"


def test_the_earliest_report_is_the_cause() -> None:
    reports = [
        failure(2, "RuntimeError: Connection closed by peer", 5, 9.0),
        failure(1, "KeyError: x", 5, 8.0),
    ]
    line = classify(StepEnd(1, failures=reports), start(0), History())
    assert line.error == "KeyError: x" and "rank 1" in line.reason


def test_a_raised_exception_is_blamed_before_an_earlier_lost_peer() -> None:
    reports = [
        failure(2, "RuntimeError: Read error [127.0.0.1]:3234: Connection reset by peer", 5, 7.0),
        failure(1, "KeyError: x", 5, 8.0),
    ]
    killed = [FailedTask("3", "node2", "Killed")]  # srun's SIGKILL after KillWait: not the cause
    line = classify(StepEnd(1, failures=reports, killed=killed), start(0), History())
    assert line.error == "KeyError: x" and "rank 1" in line.reason


def test_a_rank_killed_from_outside_is_blamed_not_the_peer_that_lost_it() -> None:
    # kill -9 of rank 1 (seen in the soak): rank 0 reports gloo's reset, srun says rank 1 was Killed
    peer = failure(
        0, "RuntimeError: [pair.cc:537] Read error [127.0.0.1]:3234: Connection reset by peer", 9, 1.0
    )
    killed = [FailedTask("1", "node1", "Killed")]
    line = classify(StepEnd(137, failures=[peer], killed=killed, latest_step=9), start(0), History())
    assert line.outcome == "rank_failure" and line.step == 9
    assert line.reason.startswith("rank 1 on node1: Killed") and "1 other rank(s) then lost" in line.reason
    assert not line.error  # a signal from outside is not a bug: a second one is retried as well
    again = classify(StepEnd(137, failures=[peer], killed=killed, latest_step=9), start(1), History([line]))
    assert again.outcome == "rank_failure"


def test_a_killed_rank_that_reported_first_is_not_silent() -> None:
    reports = [failure(1, "RuntimeError: Connection closed by peer", 4, 1.0)]
    line = classify(
        StepEnd(1, failures=reports, killed=[FailedTask("1", "node1", "Killed")]), start(0), History()
    )
    assert "rank 1 on node1: RuntimeError" in line.reason


def with_batch_log(folder: Path, *lines: str) -> RunDir:
    run = RunDir(folder)
    run.logs.mkdir(parents=True)
    (run.logs / "batch.log").write_text("".join(f"{line}\n" for line in lines))
    return run


def test_the_task_errors_of_an_attempt_are_those_after_its_line(tmp_path: Path) -> None:
    run = with_batch_log(
        tmp_path,
        "hpctrain: attempt 3 on node1,node2, rendezvous node1:1",
        "srun: error: node2: task 2: Killed",
        "hpctrain: attempt 3 ended: rank_failure",
        "hpctrain: attempt 4 on node1, rendezvous node1:2",
        "srun: error: node1: tasks 0-1: Terminated",
    )
    assert attempt_task_errors(run, attempt_on(4, "node1")) == [
        FailedTask("0", "node1", "Terminated"),
        FailedTask("1", "node1", "Terminated"),
    ]
    assert [t.rank for t in attempt_task_errors(run, attempt_on(3, "node1", "node2"))] == ["2", "0", "1"]
    assert attempt_task_errors(run, attempt_on(5, "node1")) == []


def attempt_on(attempt: int, *nodes: str, per_node: int = 2) -> AttemptLine:
    return AttemptLine(
        attempt=attempt, event="start", time=0.0, nodes=list(nodes), world_size=per_node * len(nodes)
    )


def test_the_tasks_of_a_warm_attempt_are_named_by_global_rank(tmp_path: Path) -> None:
    # A warm attempt runs one step per node: srun counts each node's tasks from 0.
    run = with_batch_log(
        tmp_path,
        "hpctrain: attempt 2 on node3,node1, rendezvous node3:1",
        "hpctrain: attempt 2 runs in the warm standby steps",
        "srun: error: node1: tasks 0-1: Killed",
    )
    found = attempt_task_errors(run, attempt_on(2, "node3", "node1"))
    assert found == [FailedTask("2", "node1", "Killed"), FailedTask("3", "node1", "Killed")]


def test_the_other_steps_of_a_warm_attempt_killed_in_its_teardown_are_not_blamed(tmp_path: Path) -> None:
    # Seen in the soak: rank 2 on node2 killed with -9; standby_steps then ended node1's step, whose
    # srun killed its tasks (SIGKILL) and said Killed too. Rank 0 was blamed beside rank 2.
    run = with_batch_log(
        tmp_path,
        "hpctrain: attempt 5 on node1,node2, rendezvous node1:25053 (preflight :61937)",
        "hpctrain: attempt 5 runs in the warm standby steps",
        "srun: error: node2: task 0: Killed",
        "srun: launch/slurm: _step_signal: Terminating StepId=8.1",
        "srun: error: node2: task 1: Terminated",
        "srun: Force Terminated StepId=8.1",
        "srun: forcing job termination",
        "srun: error: node1: tasks 0-1: Killed",
        "hpctrain: step ended with exit code 143",
    )
    found = attempt_task_errors(run, attempt_on(5, "node1", "node2"))
    assert found == [FailedTask("2", "node2", "Killed"), FailedTask("3", "node2", "Terminated")]
    reports = [failure(1, "RuntimeError: Connection reset by peer", 9, 102.0)]
    killed = [task for task in found if task.error in supervise.KILLED_FROM_OUTSIDE]
    line = classify(StepEnd(143, failures=reports, killed=killed), start(5), History())
    assert line.reason.startswith("rank 2 on node2: Killed"), line.reason


def test_classification_order() -> None:
    hang = HangReport(time=101.0, summary="rank 2 hung", step=130, hung=[RankState(rank=2, node="node2")])
    assert classify(StepEnd(0, requeue_requested=True), start(0), History()).outcome == "preempted"
    assert classify(StepEnd(0, completed=True), start(0), History()).outcome == "completed"
    line = classify(StepEnd(137, hang=hang, lost_nodes=["node1"]), start(0), History())
    assert (line.outcome, line.failed_nodes, line.step) == ("hang", ["node2"], 130)
    line = classify(
        StepEnd(137, lost_nodes=["node2"], failures=[failure(0, "E: x", 1, 1.0)]), start(0), History()
    )
    assert (line.outcome, line.failed_nodes) == ("node_failure", ["node2"])
    assert classify(StepEnd(9), start(0), History()).reason == "step exited with code 9"
    bad = StepEnd(3, preflight_bad=["node1"], preflight_requeue=True)
    assert classify(bad, start(0), History()).outcome == "preflight"
    bad.preflight_requeue = False
    assert classify(bad, start(0), History()).outcome == "failed"


def test_summary_line_and_run_summary(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    for line in [start(0), end(0, "hang", ["node2"], step=130), start(1), end(1, "node_failure", ["node2"])]:
        append_line(run.attempts, line)
    append_line(run.attempts, start(2, ["node1"]))
    run.attempts.open("ab").write(b'{"torn": \n')
    summary = run_summary(run)
    assert summary is not None
    assert summary_line(summary) == (
        "restarts: 2 of 3 (hang at step 130; node_failure node2), excluded: node2; "
        "last failure: node_failure node2"
    )
    assert History.read(run).open_attempt() == start(2, ["node1"])
    assert run_summary(RunDir(tmp_path / "none")) is None


def test_set_aside_failures_moves_the_reports(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.write_failure(FailureReport(rank=3))
    run.hang_report.write_text("{}")
    (run.failures / "stacks").mkdir()
    set_aside_failures(run, 4)
    moved = sorted(p.name for p in (run.failures / "attempt-4").iterdir())
    assert moved == ["hang.json", "rank-3.json", "stacks"]
    assert run.read_failures() == [] and not (run.failures / "stacks").exists()


OUTCOMES = st.sampled_from(list(Outcome))
POLICIES = st.builds(
    Restart,
    max=st.integers(0, 5),
    on=st.lists(st.sampled_from(list(FAULTS)), unique=True),
    exclude_failed_nodes=st.booleans(),
    shrink=st.booleans(),
    min_nodes=st.one_of(st.none(), st.integers(1, 3)),
)


@st.composite
def histories(draw: st.DrawFn) -> History:
    lines: list[AttemptLine] = []
    for number in range(draw(st.integers(0, 8))):
        nodes = draw(
            st.lists(st.sampled_from(["node1", "node2", "node3"]), min_size=1, max_size=3, unique=True)
        )
        lines.append(start(number, nodes))
        if draw(st.integers(0, 9)) == 0:
            continue  # an attempt whose allocation was lost: no end line
        failed = draw(st.lists(st.sampled_from(nodes), unique=True))
        lines.append(end(number, draw(OUTCOMES), failed, step=draw(st.one_of(st.none(), st.integers(0, 50)))))
    return History(lines)


@given(
    histories(),
    POLICIES,
    st.lists(st.sampled_from(["node1", "node2", "node3"]), unique=True),
    st.integers(1, 3),
)
def test_decisions_keep_their_promises(
    history: History, policy: Restart, allocation: list[str], planned: int
) -> None:
    last = history.ends[-1] if history.ends else None
    decision = decide(history, last, policy, allocation, planned, status=5)
    excluded = set(history.excluded(policy.exclude_failed_nodes))
    assert decision.action in ("launch", "requeue", "done", "fail")
    if decision.action == "launch":
        # Never on an excluded or just-lost node, never on more nodes than asked, never on none.
        assert decision.nodes and len(decision.nodes) <= planned
        assert not excluded & set(decision.nodes) and set(decision.nodes) <= set(allocation)
        if len(decision.nodes) < planned:
            assert policy.shrink and len(decision.nodes) >= (policy.min_nodes or 1)
        if last is not None and last.outcome == Outcome.NODE_FAILURE:
            assert not set(last.failed_nodes) & set(decision.nodes)
    if decision.action == "requeue":
        assert set(decision.exclude) == excluded
    if last is not None and last.outcome in FAULTS and decision.action in ("launch", "requeue"):
        # A restart happens only within the budget and for a fault the policy names.
        assert len(history.restarts()) <= policy.max and last.outcome in policy.on
    if last is not None and last.outcome == Outcome.FAILED:
        assert decision == Decision("fail", 5)
    if decision.action == "fail":
        assert decision.code == 5
    summary = summarize(history, policy_of(policy), planned)
    # Restarts counted, not attempts or faults: never more than the budget, never "4 of 3".
    assert summary.restarts <= min(policy.max, len(history.restarts()))
    assert summary_line(summary).startswith(f"restarts: {summary.restarts} of {policy.max}")
    if summary.budget_spent:
        assert f"restart budget ({policy.max}) spent; last failure: " in summary_line(summary)


# -- issue 23: evidence before exclusion, restarts counted, diagnosis shown, ports taken -------------


def test_one_hung_or_killed_process_restarts_on_the_same_nodes() -> None:
    """Item 11: a hang or a rank failure is no evidence against its node; a second one on it is."""
    for outcome in ("hang", "rank_failure"):
        once = History([start(0), end(0, outcome, ["node1"])])
        same = Decision("launch", nodes=("node1", "node2"))
        assert decide(once, once.ends[-1], Restart(), NODES, 2) == same
        assert once.excluded(True) == []
    twice = History([start(0), end(0, "hang", ["node1"]), start(1), end(1, "rank_failure", ["node1"])])
    assert twice.excluded(True) == ["node1"] and twice.excluded(False) == []
    assert decide(twice, twice.ends[-1], Restart(), NODES, 2) == Decision("launch", nodes=("node2",))
    # A node that stopped answering is evidence at once.
    lost = History([start(0), end(0, "node_failure", ["node2"])])
    assert lost.excluded(True) == ["node2"]


def test_a_killed_rank_names_its_node_for_a_second_time() -> None:
    task = FailedTask(rank="1", node="node1", error="Killed")
    line = classify(StepEnd(status=137, killed=[task]), start(0), History())
    assert line.outcome == "rank_failure" and line.failed_nodes == ["node1"]


def test_restarts_are_counted_not_attempts_and_a_spent_budget_says_so() -> None:
    """Item 12: four faults under restart.max=3 are three restarts, and the fourth ends the job."""
    lines = []
    for number in range(4):
        lines += [start(number), end(number, "rank_failure", reason=f"rank 0 on node1: E{number}")]
    history = History(lines)
    summary = summarize(history, policy_of(Restart(max=3)), 2)
    assert summary.restarts == 3 and summary.budget_spent
    text = summary_line(summary)
    assert text.startswith("restarts: 3 of 3 (")
    assert "restart budget (3) spent; last failure: rank 0 on node1: E3" in text
    # max=0: the first fault is not restarted ("restarts used: 1 of 0" was the old line).
    first = History(lines[:2])
    assert summarize(first, policy_of(Restart(max=0))).restarts == 0
    assert summary_line(summarize(first, policy_of(Restart(max=0)))).startswith("restarts: 0 of 0 (")
    # A fault restart.on leaves out is not a restart either.
    assert summarize(first, policy_of(Restart(on=["hang"]))).restarts == 0


def test_status_shows_the_last_hang_in_words_and_where_its_stacks_are() -> None:
    """Item 10: while the next attempt runs, the watchdog's diagnosis, not only "hang at step 66"."""
    said = "rank 0 on node1 hung at step 66 (backward; not responding for 33 s), others in the barrier"
    history = History([start(0), end(0, "hang", ["node1"], step=66, reason=said), start(1)])
    text = summary_line(summarize(history, policy_of(Restart(max=2)), 2))
    stacks = "failures/attempt-0/stacks/"
    assert text == f"restarts: 1 of 2 (hang at step 66); last failure: {said}; stacks: {stacks}"
    early = History([start(0), end(0, "hang", ["node1"], step=-1, reason="x"), start(1)])
    assert "(hang during start-up)" in summary_line(summarize(early, policy_of(Restart())))


def test_status_says_when_a_job_runs_shrunk() -> None:
    history = History([start(0), end(0, "node_failure", ["node2"]), start(1, ["node1"])])
    text = summary_line(summarize(history, policy_of(Restart()), 2))
    assert "; running shrunk on 1 of 2 nodes (node1)" in text
    assert "shrunk" not in summary_line(summarize(history, policy_of(Restart()), 1))
    ended = History([*history.lines, end(1, "completed")])
    assert "; ended shrunk on 1 of 2 nodes (node1)" in summary_line(summarize(ended, policy_of(Restart()), 2))


def test_a_rendezvous_port_in_use_is_retried_without_a_restart() -> None:
    """Item 13: EADDRINUSE is a fault of the launch: another attempt, no restart spent, bounded."""
    error = "DistStoreError: The server socket has failed to listen ... port: 40549, name: EADDRINUSE"
    report = failure(0, error, -1, 101.0)
    line = classify(StepEnd(status=1, failures=[report]), start(0), History())
    assert line.outcome == "launch" and "rendezvous port in use (rank 0 on" in line.reason
    history = History([start(0), line])
    assert decide(history, line, Restart(max=0), NODES, 2) == Decision("launch", nodes=("node1", "node2"))
    assert history.restarts() == [] and summarize(history, policy_of(Restart(max=0))).restarts == 0
    lines: list[AttemptLine] = []
    for number in range(supervise.MAX_LAUNCH_RETRIES + 1):
        lines += [start(number), end(number, "launch")]
    assert decide(History(lines), History(lines).ends[-1], Restart(), NODES, 2, status=1).action == "fail"


def test_the_batch_log_says_what_status_says(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """Item 12: the batch log's restart line is status's, word for word."""
    run = RunDir(tmp_path)
    run.spec.write_text('{"job": {"restart": {"max": 1}, "resources": {"nodes": 2}}}')
    for line in [start(0), end(0, "rank_failure", reason="rank 0 on node1: E"), start(1)]:
        append_line(run.attempts, line)
    last = end(1, "rank_failure", reason="rank 1 on node2: F")
    monkeypatch.setattr(supervise, "allocation_nodes", lambda ref: list(NODES))
    job = Job(run, "7", Restart(max=1), 2, 2)
    decision = job.act(History.read(run), last, status=3)
    assert (decision.action, decision.code) == ("fail", 3)
    assert History.read(run).lines[-1] == last  # act records the attempt's end
    summary = run_summary(run)
    assert summary is not None and summary.restarts == 1
    logged = capsys.readouterr().err
    assert f"hpctrain: fail; {summary_line(summary)}" in logged, logged
    assert "restart budget (1) spent; last failure: rank 1 on node2: F" in logged


def test_a_shrunk_job_grows_back_at_its_requeue_once_the_node_answers() -> None:
    """Item 11: a node excluded because it stopped answering is not excluded once it answers again;
    a node lost just now, or blamed twice, stays out."""
    lines = [start(0), end(0, "node_failure", ["node2"]), start(1, ["node1"]), end(1, "preempted")]
    history = History(lines)
    assert history.lost_nodes() == ["node2"]
    assert decide(history, history.ends[-1], Restart(), ["node1"], 2) == Decision(
        "requeue", exclude=("node2",)
    )
    grown = decide(history, history.ends[-1], Restart(), ["node1"], 2, back=["node2"])
    assert grown == Decision("requeue")
    # The next allocation's first attempt runs on both nodes, and from then on node2 is in again.
    full = decide(history, None, Restart(), NODES, 2, back=["node2"])
    assert full == Decision("launch", nodes=("node1", "node2"))
    assert History([*lines, start(2)]).excluded(True) == []
    just_lost = History(lines[:2])
    assert decide(just_lost, just_lost.ends[-1], Restart(shrink=False), NODES, 2, back=["node2"]) == Decision(
        "requeue", exclude=("node2",)
    )
    blamed = History([*lines[:2], start(1), end(1, "hang", ["node2"]), start(2), end(2, "hang", ["node2"])])
    assert blamed.lost_nodes() == [] and "node2" in blamed.excluded(True)


def test_a_hetjobs_nodes_map_to_their_components() -> None:
    env = {
        "SLURM_JOB_NODELIST_HET_GROUP_0": "node1",
        "SLURM_JOB_NODELIST_HET_GROUP_1": "node[2-3]",
        "SLURM_JOB_NODELIST": "node1",
    }
    assert supervise.het_groups(env) == {"node1": 0, "node2": 1, "node3": 1}
    assert supervise.het_groups({"SLURM_JOB_NODELIST": "node[1-2]"}) == {}
    ids = {"SLURM_JOB_ID_HET_GROUP_1": "1653", "SLURM_JOB_ID_HET_GROUP_0": "1652", "SLURM_JOB_ID": "1652"}
    assert supervise.het_job_ids(ids) == ["1652", "1653"]
    assert supervise.het_job_ids({"SLURM_JOB_ID": "7"}) == []


def test_a_killed_parameter_server_is_blamed_by_its_role_not_its_workers() -> None:
    from hpctrain.spec import ParameterServer
    from hpctrain.supervisor.components import Components

    lost = "PSFailed: worker 0 on node2: server 0 on node1 stopped answering (connection closed)"
    workers = [failure(1, lost, 60, 1.0), failure(2, lost.replace("worker 0", "worker 1"), 60, 1.0)]
    killed = [FailedTask("0", "node1", "Killed")]
    end = StepEnd(137, failures=workers, killed=killed, latest_step=60)
    line = classify(end, start(0), History(), Components(ParameterServer(servers=1)))
    assert line.outcome == "rank_failure" and line.reason.startswith("server 0 (rank 0) on node1: Killed")
    assert "2 other rank(s) then lost their peer" in line.reason


def test_a_grow_back_requeue_is_recorded_as_a_grow_back_not_a_preemption(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 23 item 11's leftover: the watchdog's checkpoint-and-requeue that grows a shrunk job back
    went into attempts.jsonl as `preempted`. It is a grow-back: requeued, no restart spent; a later
    preemption of the run is a preemption again."""
    import os
    import signal
    import time

    from hpctrain.spec.job import Watchdog
    from hpctrain.supervisor import watchdog

    run = RunDir(tmp_path)
    run.logs.mkdir()
    lines = [start(0), end(0, "node_failure", ["node2"])]
    shrunk = AttemptLine(attempt=1, event="start", time=time.time(), job_id="7", nodes=["node1"])
    monkeypatch.setattr(supervise, "answering_again", lambda nodes: list(nodes))
    assert watchdog.grow_back(Context(run, Watchdog(), 1, "7", "node1", signal.SIGUSR2, missing=["node2"]))
    run.requeue_request.write_text("40\n")  # the runtime's answer: checkpointed at step 40
    line = classify(supervise.read_step_end(run, 0, shrunk, ["node1"]), shrunk, History(lines))
    assert line.outcome == Outcome.GROW_BACK, line
    history = History([*lines, shrunk, line])
    assert [ended.outcome for ended in history.restarts()] == ["node_failure"]
    assert decide(history, line, Restart(), ["node1"], 2, back=["node2"]) == Decision("requeue")
    # The next allocation is preempted: the watchdog's old request is not this attempt's.
    os.utime(run.grow_back_request, (time.time() - 60, time.time() - 60))
    later = AttemptLine(attempt=2, event="start", time=time.time(), job_id="7", nodes=NODES)
    again = classify(supervise.read_step_end(run, 0, later, NODES), later, history)
    assert again.outcome == Outcome.PREEMPTED


def test_a_fault_is_dated_by_its_evidence(tmp_path: Path) -> None:
    """The hung ranks' last advance, else the first failure report, else the first rank to fall silent."""
    from hpctrain.rundir import Heartbeat, RankBeat
    from hpctrain.supervisor.supervise import fault_time

    run = RunDir(tmp_path)
    attempt = start(1)  # began at 101
    assert fault_time(run, attempt, StepEnd(status=1)) is None
    beats = {0: RankBeat(step=9, phase="data", time=130.0), 1: RankBeat(step=9, phase="data", time=124.5)}
    run.write_heartbeat(Heartbeat(node="node1", time=131.0, ranks=beats, attempt=1))
    run.write_heartbeat(Heartbeat(node="node2", time=90.0, ranks={2: RankBeat(9, "data", 90.0)}, attempt=0))
    assert fault_time(run, attempt, StepEnd(status=1)) == 124.5
    reports = [FailureReport(rank=2, time=127.0), FailureReport(rank=3, time=126.0)]
    assert fault_time(run, attempt, StepEnd(status=1, failures=reports)) == 126.0
    hang = HangReport(time=140.0, summary="", hung=[RankState(rank=1, idle_s=12.0)])
    assert fault_time(run, attempt, StepEnd(status=1, hang=hang, failures=reports)) == 126.0
    assert fault_time(run, attempt, StepEnd(status=1, hang=hang)) == 128.0


def test_the_first_start_of_an_allocation_records_when_it_began(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    run = RunDir(tmp_path)
    monkeypatch.setattr(supervise, "allocation_nodes", lambda ref: list(NODES))
    monkeypatch.setattr(supervise, "answering_again", lambda nodes: [])
    job = Job(run, "7", Restart(), 2, 2)
    begun = job.begin()
    assert (begun.action, begun.nodes, begun.attempt) == ("launch", tuple(NODES), 0)
    assert begun.ports == job.ports(0) and begun.ports[0] != begun.ports[1]
    (first,) = History.read(run).lines
    assert first.allocated == supervise.ALLOCATED and first.allocated <= first.time
    job.act(History.read(run), end(0, "rank_failure"))
    assert History.read(run).lines[-1].event == "start" and History.read(run).lines[-1].allocated is None


def test_a_rank_the_fork_launcher_saw_killed_is_blamed_as_srun_would_name_it(tmp_path: Path) -> None:
    # Under launcher fork srun sees only the node's task exit 137; the launcher reports which rank
    # a signal ended, and that rank is blamed, not rank 0 that lost its peer.
    from hpctrain.runtime.fork_ranks import report_signal

    run = with_batch_log(
        tmp_path,
        "hpctrain: attempt 0 on node1,node2, rendezvous node1:1",
        "srun: error: node1: task 0: Exited with exit code 137",
    )
    begun = start(0)
    run.write_failure(failure(0, "RuntimeError: Connection reset by peer", 40, begun.time + 2))
    env = {"HPCTRAIN_RUN_DIR": str(tmp_path), "HPCTRAIN_ATTEMPT": "0", "SLURMD_NODENAME": "node1"}
    report_signal({**env, "SLURM_NODEID": "0", "SLURM_STEP_NUM_NODES": "2"}, 2, 1, 9)
    end = supervise.read_step_end(run, 137, begun, NODES)
    assert [f.rank for f in end.failures] == [0] and end.killed == [FailedTask("1", "node1", "Killed")]
    line = classify(end, begun, History())
    assert line.outcome == "rank_failure" and line.reason.startswith("rank 1 on node1: Killed"), line.reason
    assert not line.error  # a kill is no bug: the same step may fail so again and still be retried


def test_a_requeue_that_would_exclude_every_node_fails_the_job_with_code_3() -> None:
    """Issue 36 item 1: preflight failed on both nodes of a 2-node partition; requeueing without
    them would leave the job pending for good (BadConstraints)."""
    lines = [start(0), end(0, "preflight", ["node1", "node2"])]
    history = History(lines)
    decision = decide(history, lines[-1], Restart(), NODES, 2, available=["node1", "node2"])
    assert (decision.action, decision.code) == ("fail", supervise.TOO_FEW_NODES)
    assert decision.reason == "requeueing without node1,node2 would leave 0 node(s) for a job of 2"
    # One bad node of three leaves enough: the requeue goes ahead without it.
    one = History([start(0), end(0, "preflight", ["node2"])])
    ok = decide(one, one.lines[-1], Restart(), NODES, 2, available=["node1", "node2", "node3"])
    assert ok == Decision("requeue", exclude=("node2",))
    # Nodes the job already excludes count as gone; an unknown partition refuses nothing.
    assert decide(one, one.lines[-1], Restart(), NODES, 2, available=["node2", "node3"]).action == "fail"
    assert decide(history, lines[-1], Restart(), NODES, 2).action == "requeue"


def test_a_requeue_refused_for_want_of_nodes_is_recorded_as_the_reason_status_shows(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    run = RunDir(tmp_path)
    run.spec.write_text('{"job": {"resources": {"nodes": 2}}}')
    append_line(run.attempts, start(0))
    monkeypatch.setattr(supervise, "allocation_nodes", lambda ref: list(NODES))
    monkeypatch.setattr(supervise, "answering_again", lambda nodes: [])
    monkeypatch.setattr(supervise, "available_nodes", lambda ref: ["node1", "node2"])
    job = Job(run, "7", Restart(), 2, 2)
    decision = job.act(History.read(run), end(0, "preflight", ["node1", "node2"], reason="preflight failed"))
    assert (decision.action, decision.code) == ("fail", 3)
    recorded = History.read(run).lines[-1]
    assert recorded.outcome == "failed" and "would leave 0 node(s) for a job of 2" in recorded.reason
    summary = run_summary(run)
    assert (
        summary is not None
        and "not retried: preflight failed; requeueing without node1,node2" in summary_line(summary)
    )
