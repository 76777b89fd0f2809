"""Parsers of sbatch/squeue/sacct output and the state mapping (unit tests: parsing only, no scheduler)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctrain.errors import BackendError, SpecError
from hpctrain.scheduler.base import JobState
from hpctrain.scheduler.slurm.cli import SlurmCliBackend, timeout_s
from hpctrain.scheduler.slurm.parse import (
    base_job_id,
    max_array_size,
    parse_sacct,
    parse_sbatch,
    parse_squeue,
    slurm_state,
)


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


@pytest.mark.parametrize(
    ("stdout", "job_id"),
    [
        ("123\n", "123"),
        ("123;cluster1\n", "123"),
        ("  77  \n", "77"),
        ("sbatch: warning: can't honor --ntasks-per-node set to 2\n4242\n", "4242"),
        ("4242\nsbatch: warning: the job may never start: partition limits\n", "4242"),
        ("sbatch: warning: 1 2 3\n\n88;c\nsbatch: note: 99 is not this one\n", "88"),
    ],
)
def test_sbatch_job_id_survives_warnings(stdout: str, job_id: str) -> None:
    assert parse_sbatch(stdout) == job_id


@pytest.mark.parametrize(
    "stdout", ["", "\n", "Submitted batch job\n", "sbatch: warning: 12 nodes\n", "12a\n"]
)
def test_sbatch_without_a_job_id_is_a_backend_error(stdout: str) -> None:
    with pytest.raises(BackendError, match="sbatch printed no job id"):
        parse_sbatch(stdout)


# The parsers see whatever the scheduler prints: arbitrary bytes, or rows made of the pieces real
# output has (ids of arrays and hetjob components, states, separators) in any order.
PIECES = st.one_of(
    st.sampled_from(
        ["|", "\n", "41", "41_3", "41+1", "41_[1-3%2]", "COMPLETED", "CANCELLED by 0", "None", ";"]
    ),
    st.text(alphabet="0123456789|_+.[]-%: \t\r\x00\xe9\u2028", max_size=8),
)
ROWS = st.lists(PIECES, max_size=40).map("".join)


@settings(max_examples=2000, deadline=None)
@given(
    output=st.one_of(st.binary(max_size=300), ROWS, ROWS.map(lambda t: t.encode("utf-8", "surrogatepass")))
)
def test_parsers_take_any_output(output: str | bytes) -> None:
    wanted = {"41", "1", ""}
    for parse in (parse_squeue, parse_sacct):
        found = parse(output, wanted)
        assert set(found) <= wanted
        assert all(isinstance(info.state, JobState) for info in found.values())
    try:
        job_id = parse_sbatch(output)
    except BackendError:
        return
    assert job_id.isdigit()


def test_non_utf8_scheduler_output_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A job name with a Latin-1 byte, as squeue prints it: the poll must still answer.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    squeue = bindir / "squeue"
    squeue.write_text("#!/bin/sh\nprintf '55|RUNNING|None|node1|0:01 caf\\351\\n'\n")
    squeue.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    found = SlurmCliBackend().poll(["55"])
    assert found["55"].state is JobState.RUNNING


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "inf", "1e400", "20s"])
def test_a_bad_slurm_timeout_is_a_one_line_input_error(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCTRAIN_SLURM_TIMEOUT", value)
    with pytest.raises(SpecError, match="HPCTRAIN_SLURM_TIMEOUT"):
        timeout_s()


def test_slurm_timeout_default_and_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HPCTRAIN_SLURM_TIMEOUT", raising=False)
    assert timeout_s() == 20.0
    monkeypatch.setenv("HPCTRAIN_SLURM_TIMEOUT", " 2.5 ")
    assert timeout_s() == 2.5


@pytest.mark.parametrize(
    ("config", "size"), [({"MaxArraySize": "40"}, 40), ({}, 1001), ({"MaxArraySize": "many"}, 1001)]
)
def test_max_array_size_reads_scontrol_config_with_slurms_default(config: dict[str, str], size: int) -> None:
    assert max_array_size(config) == size


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


def test_special_exit_is_a_held_requeue_not_a_failure() -> None:
    state = slurm_state("SPECIAL_EXIT")
    assert state is JobState.REQUEUED and not state.terminal


def test_expediting_from_slurm_25_is_a_requeue_not_unknown() -> None:
    """Slurm 25.05 added EXPEDITING (a `--requeue=expedite` job on its way back); squeue prints it."""
    assert slurm_state("EXPEDITING") is JobState.REQUEUED
    assert not slurm_state("EXPEDITING").terminal
