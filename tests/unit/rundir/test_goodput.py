"""The goodput split: from synthetic run directories, each second in one part, the parts adding up."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctrain.rundir import AttemptLine, EventLine, RunDir, TrainLine, append_line
from hpctrain.rundir.goodput import PARTS, GoodputSplit, compute, split, table
from hpctrain.scheduler.base import JobState


def start(attempt: int, at: float, allocated: float | None = None) -> AttemptLine:
    return AttemptLine(attempt=attempt, event="start", time=at, allocated=allocated, world_size=4)


def end(
    attempt: int, at: float, outcome: str, fault: float | None = None, step: int | None = None
) -> AttemptLine:
    return AttemptLine(attempt=attempt, event="end", time=at, outcome=outcome, fault_time=fault, step=step)


# Submitted at 0; allocated at 10; ready at 15; steps 25, 50, 75 logged at 20, 25, 30; a checkpoint of
# step 50 blocks 1 s; a rank dies at 33, the supervisor decides at 38; the restart resumes from step
# 50 at 44, logs 75 and 100 at 49 and 54, is done at 56 and its step ends at 57.
KILLED_ONCE = (
    [
        start(0, 10.5, allocated=10.0),
        end(0, 38.0, "rank_failure", fault=33.0, step=75),
        start(1, 39.0),
        end(1, 57.0, "completed", step=100),
    ],
    [
        EventLine(event="start", step=0, time=15.0),
        TrainLine(step=25, time=20.0),
        TrainLine(step=50, time=25.0),
        EventLine(event="checkpoint", step=50, save_s=1.0, time=27.0),
        TrainLine(step=75, time=30.0),
        EventLine(event="resumed", step=50, time=44.0),
        TrainLine(step=75, time=49.0),
        TrainLine(step=100, time=54.0),
        EventLine(event="done", step=100, time=56.0),
    ],
)


def test_a_killed_rank_puts_lost_steps_in_rollback_and_the_wait_for_the_decision_in_detection() -> None:
    found = compute(*KILLED_ONCE, submitted_at=0.0)
    assert found is not None
    assert (found.scheduling_s, found.detection_s, found.checkpoint_s) == (10.0, 5.0, 1.0)
    # Steps 50..75 (4 s once the save's second is out) and the unlogged steps until the fault (3 s).
    assert found.rollback_s == 7.0 and found.rolled_back_steps == 25
    # 10.5-15 and 39-44 before the runtime was ready, 38-39 the supervisor's relaunch, 56-57 the exit.
    assert found.startup_s == 12.0
    assert found.training_s == 22.0
    assert found.wall_s == 57.0 and found.goodput == round(22 / 57, 4)
    assert [a.outcome for a in found.attempts] == ["rank_failure", "completed"]
    assert math.isclose(sum(a.total_s for a in found.attempts), found.wall_s)


def test_a_line_logged_just_before_a_sub_second_restart_stays_with_its_attempt() -> None:
    # The supervisor decided 0.3 s after the fault and restarted 0.01 s later: step 75, logged 0.4 s
    # before the new attempt's start line, is the killed attempt's and is rolled back.
    lines = [
        start(0, 10.0),
        end(0, 30.5, "rank_failure", fault=30.2, step=75),
        start(1, 30.51),
        end(1, 50.0, "completed", step=100),
    ]
    metrics = [
        EventLine(event="start", step=0, time=12.0),
        TrainLine(step=50, time=20.0),
        TrainLine(step=75, time=30.1),
        EventLine(event="resumed", step=50, time=36.0),
        TrainLine(step=75, time=40.0),
        TrainLine(step=100, time=45.0),
        EventLine(event="done", step=100, time=46.0),
    ]
    found = compute(lines, metrics, submitted_at=10.0)
    assert found is not None and found.rolled_back_steps == 25
    assert found.attempts[0].rollback_s > 0 and found.attempts[1].rollback_s == 0


def test_a_preemption_keeps_its_steps_and_waits_in_the_queue_as_scheduling() -> None:
    lines = [
        start(0, 5.0, allocated=4.0),
        end(0, 32.0, "preempted", step=60),
        start(1, 100.0, allocated=99.0),
        end(1, 130.0, "completed", step=100),
    ]
    metrics = [
        EventLine(event="start", step=0, time=8.0),
        TrainLine(step=50, time=28.0),
        EventLine(event="checkpoint", step=60, save_s=2.0, time=31.0),
        EventLine(event="preempted", step=60, time=31.0),
        EventLine(event="resumed", step=60, time=104.0),
        TrainLine(step=100, time=124.0),
        EventLine(event="done", step=100, time=125.0),
    ]
    found = compute(lines, metrics, submitted_at=1.0)
    assert found is not None
    assert found.rollback_s == 0.0 and found.rolled_back_steps == 0
    assert found.scheduling_s == 3.0 + 67.0  # queued 1-4, requeued 32-99
    assert found.checkpoint_s == 2.0 and found.detection_s == 1.0  # 31-32: the step's exit
    assert found.training_s == 20.0 + 1.0 + 20.0 + 1.0


def test_an_attempt_that_dies_in_start_up_is_start_up_then_detection() -> None:
    lines = [start(0, 2.0, allocated=1.0), end(0, 9.0, "rank_failure", fault=6.0, step=-1)]
    found = compute(lines, [], submitted_at=0.0)
    assert found is not None
    assert (found.scheduling_s, found.startup_s, found.detection_s, found.training_s) == (1.0, 5.0, 3.0, 0.0)


def test_a_running_run_counts_until_now_and_a_run_without_attempts_from_its_runtime() -> None:
    running = compute(
        [start(0, 2.0, allocated=1.0)], [EventLine(event="start", step=0, time=4.0)], 0.0, now=10.0
    )
    assert running is not None and running.wall_s == 10.0 and running.training_s == 6.0
    # A parameter-server hetjob: no attempts.jsonl; its runtime began at done - wall_time_s.
    metrics = [
        EventLine(event="start", step=0, time=20.0),
        TrainLine(step=10, time=30.0),
        EventLine(event="done", step=10, time=31.0, wall_time_s=15.0),
    ]
    ps = compute([], metrics, submitted_at=10.0)
    assert ps is not None and ps.attempts == []
    assert (ps.scheduling_s, ps.startup_s, ps.training_s, ps.wall_s) == (6.0, 4.0, 11.0, 21.0)
    assert compute([], [], submitted_at=0.0) is None


def test_split_reads_a_run_directory_and_the_struct_round_trips(tmp_path: Path) -> None:
    from hpctrain.rundir import RunRecord

    run = RunDir(tmp_path)
    lines, metrics = KILLED_ONCE
    for line in lines:
        append_line(run.attempts, line)
    for line in metrics:
        append_line(run.metrics, line)
    record = RunRecord(
        run_id="r", job_id="1", name="n", site="s", backend="slurm", submitted_at=0.0,
        state=JobState.COMPLETED, state_at=60.0,
    )  # fmt: skip
    run.write_record(record)
    found = split(run)
    assert found == compute(lines, metrics, 0.0)
    encoded = msgspec.json.encode(found)
    assert msgspec.json.decode(encoded, type=GoodputSplit) == found
    text = "\n".join(table(found))
    assert "steps lost to rollback" in text and "goodput 0.386" in text


# -- invariants over arbitrary histories -------------------------------------------------------------

_OUTCOMES = st.sampled_from(["completed", "preempted", "hang", "rank_failure", "node_failure", "failed", ""])


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[AttemptLine], list[TrainLine | EventLine], float, float | None]:
    """Attempts with times and steps drawn freely (out of order, overlapping, clocks skewed)."""
    moment = st.floats(0.0, 1000.0, allow_nan=False)
    lines: list[AttemptLine] = []
    metrics: list[TrainLine | EventLine] = []
    for attempt in range(draw(st.integers(0, 5))):
        began = draw(moment)
        allocated = draw(st.none() | moment)
        lines.append(start(attempt, began, allocated))
        outcome = draw(_OUTCOMES)
        if outcome:
            lines.append(
                end(attempt, draw(moment), outcome, draw(st.none() | moment), draw(st.integers(-1, 500)))
            )
        if draw(st.booleans()):
            metrics.append(
                EventLine(
                    event=draw(st.sampled_from(["start", "resumed"])),
                    step=draw(st.integers(0, 500)),
                    time=draw(moment),
                )
            )
        for _ in range(draw(st.integers(0, 6))):
            metrics.append(TrainLine(step=draw(st.integers(0, 500)), time=draw(moment)))
        if draw(st.booleans()):
            metrics.append(
                EventLine(
                    event="checkpoint",
                    step=draw(st.integers(0, 500)),
                    save_s=draw(st.floats(0, 50)),
                    time=draw(moment),
                )
            )
        if draw(st.booleans()):
            metrics.append(
                EventLine(
                    event=draw(st.sampled_from(["done", "preempted", "failed"])),
                    step=1,
                    time=draw(moment),
                    wall_time_s=draw(st.none() | st.floats(0, 100)),
                )
            )
    metrics.sort(key=lambda line: line.time or 0.0)
    return lines, metrics, draw(st.none() | moment), draw(st.none() | moment)


@settings(max_examples=300, deadline=None)
@given(histories())
def test_parts_are_never_negative_and_add_up_to_the_wall_time(
    history: tuple[list[AttemptLine], list[TrainLine | EventLine], float | None, float | None],
) -> None:
    found = compute(*history)
    if found is None:
        return
    for part in PARTS:
        assert found.seconds(part) >= 0.0, part
    assert math.isclose(found.total_s, found.wall_s, abs_tol=0.01)
    assert 0.0 <= found.goodput <= 1.0
    if found.attempts:
        assert math.isclose(
            sum(a.total_s for a in found.attempts), found.wall_s, abs_tol=0.01 * len(found.attempts)
        )
