"""Restart outcomes: one enum, and the spec's `restart.on` spells exactly its faults."""

from __future__ import annotations

import typing
from pathlib import Path

import msgspec
import pytest

from hpctrain.errors import SpecError
from hpctrain.rundir import AttemptLine, RunDir, append_line
from hpctrain.rundir.attempts import (
    FAULTS,
    PROCESS_FAULTS,
    History,
    Outcome,
    describe_end,
    run_summary,
    summary_line,
)
from hpctrain.spec.job import Fault, Restart


def test_the_spec_literal_is_the_enum_faults() -> None:
    assert typing.get_args(Fault) == tuple(fault.value for fault in FAULTS)
    assert Restart().on == [fault.value for fault in FAULTS]
    assert set(PROCESS_FAULTS) <= set(FAULTS) <= set(Outcome)


def test_restart_on_accepts_every_fault_and_refuses_other_outcomes() -> None:
    for fault in FAULTS:
        assert msgspec.convert({"on": [fault.value]}, Restart).on == [fault.value]
    for outcome in set(Outcome) - set(FAULTS):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({"on": [outcome.value]}, Restart)


def test_an_outcome_is_its_string_in_lines_and_text() -> None:
    line = AttemptLine(attempt=0, event="end", time=1.0, outcome=Outcome.HANG, step=130)
    decoded = msgspec.json.decode(msgspec.json.encode(line), type=AttemptLine)
    assert decoded.outcome == "hang" == Outcome.HANG and str(Outcome.HANG) == "hang"
    assert describe_end(decoded) == "hang at step 130"
    assert History([line]).restarts() == [line]


def test_a_spec_with_an_unknown_fault_is_a_one_line_error() -> None:
    from hpctrain.spec import JobSpec
    from hpctrain.spec.resolve import decode

    job = {"name": "x", "train": {"entrypoint": "a:b"}, "restart": {"on": ["bogus"]}}
    with pytest.raises(SpecError) as caught:
        decode(JobSpec, job, "job.yaml")
    assert "restart.on" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("spec_text", ['{"job": {"restart": {"max": 0}}}', "garbage{", '{"job": []}'])
def test_a_run_without_a_readable_budget_claims_no_restart_it_did_not_make(
    spec_text: str, tmp_path: Path
) -> None:
    run = RunDir(tmp_path)
    run.spec.write_text(spec_text)
    append_line(run.attempts, AttemptLine(attempt=0, event="start", time=1.0, nodes=["n1"]))
    append_line(run.attempts, AttemptLine(attempt=0, event="end", time=2.0, outcome=Outcome.RANK_FAILURE))
    summary = run_summary(RunDir(tmp_path))
    assert summary is not None and summary.restarts == 0
    line = summary_line(summary)
    assert line.startswith("restarts: 0") and " of 3" not in line
