"""Folding scheduler rows into one state per job: array elements, hetjob components, preemption;
and the Backend's shared pieces (array indices, accounting merged into a partial queue answer)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain.scheduler.base import (
    TERMINAL,
    JobInfo,
    JobState,
    array_element,
    element_indices,
    fold_elements,
    incomplete_arrays,
    merge_accounting,
    merge_component,
)
from hpctrain.tracking.index import Index
from hpctrain.tracking.poll import ended, poll_and_record
from tests.unit.tracked_runs import home_env, track


def test_hetjob_components_still_fold_to_the_worst() -> None:
    found: dict[str, JobInfo] = {}
    merge_component(found, JobInfo("7", JobState.RUNNING), "7+0")
    merge_component(found, JobInfo("7", JobState.FAILED), "7+1")
    assert found["7"].state is JobState.FAILED and found["7"].elements == {}


@pytest.mark.parametrize(
    ("raw", "element"), [("1_4", "4"), ("1_[5-9%2]", "[5-9%2]"), ("1", None), ("1+0", None)]
)
def test_array_element(raw: str, element: str | None) -> None:
    assert array_element(raw) == element


@given(st.lists(st.sampled_from(list(JobState)), min_size=1, max_size=12))
def test_fold_is_terminal_exactly_when_every_element_is(states: list[JobState]) -> None:
    folded = fold_elements(states)
    assert folded.terminal == all(s.terminal for s in states)
    assert folded in states


@given(st.lists(st.sampled_from(list(JobState)), min_size=1, max_size=12))
def test_fold_with_preemption_final_ends_when_only_preempted_remain(states: list[JobState]) -> None:
    done = TERMINAL | {JobState.PREEMPTED}
    folded = fold_elements(states, preempted_ends=True)
    assert (folded in done) == all(s in done for s in states)


def _spec(requeue: bool) -> str:
    return '{"job": {"preemption": {"requeue": %s}}, "site": {}}' % ("true" if requeue else "false")


@pytest.mark.parametrize("requeue", [True, False])
def test_preempted_ends_only_without_requeue(hpctrain_home: Path, requeue: bool) -> None:
    with home_env(hpctrain_home):
        run_dir = track(hpctrain_home, "local-1", "PREEMPTED")
        run_dir.spec.write_text(_spec(requeue))
        (run,) = Index(hpctrain_home).runs()
        assert ended(run) is (not requeue)


def test_poll_and_record_settles_preempted_elements_of_a_run_without_requeue(
    hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll whose answer is an array with one element preempted and one failed."""
    from hpctrain.scheduler.local import LocalBackend

    def poll(self: LocalBackend, job_ids: list[str]) -> dict[str, JobInfo]:
        found: dict[str, JobInfo] = {}
        merge_component(found, JobInfo("local-2", JobState.FAILED), "local-2_0")
        merge_component(found, JobInfo("local-2", JobState.PREEMPTED), "local-2_1")
        return found

    monkeypatch.setattr(LocalBackend, "poll", poll)
    with home_env(hpctrain_home):
        run_dir = track(hpctrain_home, "local-2", "RUNNING")
        run_dir.spec.write_text(_spec(False))
        index = Index(hpctrain_home)
        (status,) = poll_and_record(index, index.runs())
        assert status.state == JobState.FAILED.value and ended(status.run)
        run_dir.spec.write_text(_spec(True))
        (run,) = Index(hpctrain_home).runs()
        run.state = JobState.RUNNING.value
        (status,) = poll_and_record(index, [run])
        assert status.state == JobState.PREEMPTED.value and not ended(status.run)


@pytest.mark.parametrize(
    ("element", "count", "indices"),
    [
        ("4", 10, [4]),
        ("12", 10, []),
        ("[0-3%2]", 10, [0, 1, 2, 3]),
        ("[1,3-4]", 4, [1, 3]),
        ("[2-1-3]", 9, []),
    ],
)
def test_element_indices_stay_within_the_array(element: str, count: int, indices: list[int]) -> None:
    assert element_indices(element, count) == indices


def test_an_array_the_queue_lists_in_part_is_completed_from_accounting() -> None:
    queue: dict[str, JobInfo] = {}
    merge_component(queue, JobInfo("9", JobState.RUNNING, reason=""), "9_2")
    merge_component(queue, JobInfo("9", JobState.PENDING, reason="JobArrayTaskLimit"), "9_[3-4]")
    assert incomplete_arrays(queue, {"9": 5}) == {"9"}
    assert incomplete_arrays(queue, {"8": 5}) == set()  # not in the queue at all: plain accounting
    accounting: dict[str, JobInfo] = {}
    merge_component(accounting, JobInfo("9", JobState.FAILED), "9_0")
    merge_component(accounting, JobInfo("9", JobState.COMPLETED), "9_1")
    merge_component(accounting, JobInfo("9", JobState.PENDING), "9_2")  # older than the queue's answer
    merged = merge_accounting(queue["9"], accounting["9"])
    assert merged.elements == {
        "0": JobState.FAILED, "1": JobState.COMPLETED, "2": JobState.RUNNING, "[3-4]": JobState.PENDING,
    }  # fmt: skip
    whole: dict[str, JobInfo] = {}
    for element in range(3):
        merge_component(whole, JobInfo("6", JobState.RUNNING), f"6_{element}")
    assert incomplete_arrays(whole, {"6": 3}) == set()
    assert merged.state is JobState.RUNNING and merged.element_reasons == {"[3-4]": "JobArrayTaskLimit"}


def test_a_state_prints_as_slurm_writes_it() -> None:
    """Tables and messages format states with f-strings: `JobState.FAILED` there once hid the state."""
    for state in JobState:
        assert f"{state}" == str(state) == state.value and f"{state:>14}" == f"{state.value:>14}"
