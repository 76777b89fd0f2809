"""Folding scheduler rows into one state per job: array elements, held requeues, preemption."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain.runs.index import Index
from hpctrain.runs.poll import ended, refresh
from hpctrain.scheduler.base import (
    TERMINAL,
    JobInfo,
    JobState,
    array_element,
    fold_elements,
    merge_component,
    slurm_state,
)
from hpctrain.scheduler.slurm.cli import parse_sacct, parse_squeue
from tests.unit.tracked_runs import home_env, track


def test_an_array_with_a_failed_and_a_running_element_is_running() -> None:
    text = "50_0|FAILED|NonZeroExitCode|node1|0:10\n50_1|RUNNING|None|node2|0:20\n"
    found = parse_squeue(text, {"50"})
    assert found["50"].state is JobState.RUNNING
    assert found["50"].elements == {"0": JobState.FAILED, "1": JobState.RUNNING}
    assert not found["50"].state.terminal


def test_an_array_ends_when_every_element_has_and_shows_the_worst() -> None:
    text = "51_0|COMPLETED|0:0|node1|0:10\n51_1|FAILED|1:0|node2|0:20\n51_2|COMPLETED|0:0|node1|0:05\n"
    found = parse_sacct(text, {"51"})
    assert found["51"].state is JobState.FAILED
    assert found["51"].elements == {"0": JobState.COMPLETED, "1": JobState.FAILED, "2": JobState.COMPLETED}


def test_pending_elements_keep_the_array_alive() -> None:
    text = "52_0|COMPLETED|None|node1|0:10\n52_[1-3]|PENDING|Resources||0:00\n"
    found = parse_squeue(text, {"52"})
    assert found["52"].state is JobState.PENDING and found["52"].elements["[1-3]"] is JobState.PENDING


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


def test_special_exit_is_a_held_requeue_not_a_failure() -> None:
    state = slurm_state("SPECIAL_EXIT")
    assert state is JobState.REQUEUED and not state.terminal


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


def test_refresh_settles_preempted_elements_of_a_run_without_requeue(
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
        (status,) = refresh(index, index.runs())
        assert status.state == JobState.FAILED.value and ended(status.run)
        run_dir.spec.write_text(_spec(True))
        (run,) = Index(hpctrain_home).runs()
        run.state = JobState.RUNNING.value
        (status,) = refresh(index, [run])
        assert status.state == JobState.PREEMPTED.value and not ended(status.run)
