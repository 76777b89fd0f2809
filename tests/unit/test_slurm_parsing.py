"""Parsers of squeue/sacct output and the state mapping (unit tests: parsing only, no scheduler)."""

from __future__ import annotations

import pytest

from hpctrain.backends.base import JobState, slurm_state
from hpctrain.backends.slurm_cli import base_job_id, parse_sacct, parse_squeue


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("PENDING", JobState.PENDING),
        ("RUNNING", JobState.RUNNING),
        ("COMPLETING", JobState.RUNNING),
        ("COMPLETED", JobState.COMPLETED),
        ("FAILED", JobState.FAILED),
        ("CANCELLED by 0", JobState.CANCELLED),
        ("TIMEOUT", JobState.TIMEOUT),
        ("PREEMPTED", JobState.PREEMPTED),
        ("NODE_FAIL", JobState.NODE_FAIL),
        ("OUT_OF_MEMORY", JobState.OUT_OF_MEMORY),
        ("OUT_OF_ME+", JobState.OUT_OF_MEMORY),
        ("REQUEUED", JobState.REQUEUED),
        ("BOOT_FAIL", JobState.FAILED),
        ("DEADLINE", JobState.TIMEOUT),
        ("WHATEVER", JobState.UNKNOWN),
        ("", JobState.UNKNOWN),
    ],
)
def test_state_mapping(text: str, state: JobState) -> None:
    assert slurm_state(text) is state


def test_terminal_states() -> None:
    assert JobState.COMPLETED.terminal and JobState.CANCELLED.terminal
    assert not JobState.PREEMPTED.terminal and not JobState.REQUEUED.terminal


@pytest.mark.parametrize(
    ("raw", "base"),
    [("123", "123"), ("123+1", "123"), ("123_4", "123"), ("123_[5-9%2]", "123"), ("123.batch", "123")],
)
def test_base_job_id(raw: str, base: str) -> None:
    assert base_job_id(raw) == base


def test_squeue_filters_and_merges_components() -> None:
    text = "\n".join(
        [
            "41|RUNNING|None|node[1-2]|1:02",
            "42+0|RUNNING|None|node1|0:10",
            "42+1|FAILED|NonZeroExitCode|node2|0:10",
            "43_[1-3]|PENDING|Resources||0:00",
            "99|RUNNING|None|node1|5:00",
            "garbage line",
        ]
    )
    found = parse_squeue(text, {"41", "42", "43"})
    assert set(found) == {"41", "42", "43"}
    assert found["41"].state is JobState.RUNNING and found["41"].nodes == "node[1-2]"
    assert found["42"].state is JobState.FAILED
    assert found["43"].reason == "Resources"


def test_sacct_parses_exit_codes() -> None:
    text = "7|COMPLETED|0:0|node1|00:00:05\n8|CANCELLED by 0|0:15|node[1-2]|00:01:00\n"
    found = parse_sacct(text, {"7", "8"})
    assert found["7"].state is JobState.COMPLETED and found["7"].exit_code == "0:0"
    assert found["8"].state is JobState.CANCELLED


def test_sacct_keeps_the_newest_job_of_a_recycled_id() -> None:
    text = (
        "9|FAILED|1:0|node1|00:00:01|2026-01-01T10:00:00\n"
        "9|COMPLETED|0:0|node[1-2]|00:00:05|2026-12-02T11:00:00\n"
        "9|FAILED|1:0|node2|00:00:01|2025-06-01T10:00:00\n"
    )
    found = parse_sacct(text, {"9"})
    assert found["9"].state is JobState.COMPLETED and found["9"].nodes == "node[1-2]"
