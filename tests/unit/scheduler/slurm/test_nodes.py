"""Releasing a requeued run that Slurm holds for its requeue delay: one rule, scontrol and pyslurm."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hpctrain.errors import HpctrainError
from hpctrain.rundir import AttemptLine, RunDir, append_line
from hpctrain.scheduler.base import JobInfo, JobState
from hpctrain.scheduler.local import LocalBackend
from hpctrain.scheduler.slurm import nodes as slurm_nodes
from hpctrain.scheduler.slurm.cli import SlurmCliBackend
from hpctrain.scheduler.slurm.pyslurm import PyslurmBackend


def lost_attempt(run: RunDir) -> None:
    """An attempt on node2 that started and never ended: the allocation was lost."""
    append_line(run.attempts, AttemptLine(attempt=0, event="start", time=100.0, job_id="7", nodes=["node2"]))


def held(job_id: str = "7", reason: str = "BeginTime") -> JobInfo:
    return JobInfo(job_id, JobState.PENDING, reason=reason)


def stamp(offset_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + offset_s))


def test_the_cli_backend_waits_for_the_requeue_to_settle_and_drops_a_dead_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scontrol's answers given as text."""
    run = RunDir(tmp_path)
    lost_attempt(run)
    submitted = stamp(-30)
    answers = {
        "job": f"JobId=7 SubmitTime={submitted} StartTime={stamp(90)} ReqNodeList=node2 ExcNodeList=(null)",
        "node": "NodeName=node2 State=DOWN+NOT_RESPONDING",
    }
    sent: list[list[str]] = []

    def quiet(argv: list[str], timeout: float = 30.0) -> str:
        sent.append(argv)
        return answers.get(argv[2], "") if argv[1] == "show" else ""

    monkeypatch.setattr(slurm_nodes, "quiet", quiet)
    backend = SlurmCliBackend()
    assert backend.release_held([(run, held(reason="Priority"))]) == []
    assert backend.release_held([(run, held())]) == ["7"]
    assert sent[-1] == [
        "scontrol", "update", "jobid=7", "StartTime=now", "ExcNodeList=node2", "ReqNodeList=",
    ]  # fmt: skip
    # Just requeued (SubmitTime now), or already about to start: left alone.
    answers["job"] = answers["job"].replace(submitted, stamp(0))
    assert backend.release_held([(run, held())]) == []
    assert backend.release_held([(RunDir(tmp_path / "fresh"), held("8"))]) == []


class FakeJob:
    modified: list[tuple[int, Any]] = []
    required_nodes: str | None = None

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id

    @staticmethod
    def load(job_id: int) -> SimpleNamespace:
        return SimpleNamespace(
            submit_time=time.time() - 30,
            start_time=time.time() + 90,
            excluded_nodes=None,
            required_nodes=FakeJob.required_nodes,
        )

    def modify(self, description: Any) -> None:
        FakeJob.modified.append((self.job_id, description))


def pyslurm_backend() -> PyslurmBackend:
    module = SimpleNamespace(
        Job=FakeJob,
        Nodes=SimpleNamespace(load=lambda: {"node2": SimpleNamespace(state="DOWN+NOT_RESPONDING")}),
        JobSubmitDescription=lambda **fields: SimpleNamespace(**fields),
    )
    return PyslurmBackend(module)  # type: ignore[arg-type]


def test_the_pyslurm_backend_releases_through_the_api_with_the_same_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunDir(tmp_path)
    lost_attempt(run)
    monkeypatch.setattr(FakeJob, "required_nodes", None)
    monkeypatch.setattr(FakeJob, "modified", [])
    backend = pyslurm_backend()
    assert backend.release_held([(run, held(reason="Priority"))]) == []
    assert backend.release_held([(run, held())]) == ["7"]
    [(job_id, description)] = FakeJob.modified
    assert job_id == 7 and description.begin_time == "now"
    assert description.excluded_nodes == ["node2"] and not hasattr(description, "required_nodes")


def test_the_pyslurm_backend_drops_a_dead_pin_through_scontrol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyslurm sends an empty required_nodes as NULL, which slurmctld reads as "unchanged": on Slurm
    25.11 the job stayed pinned to the dead node2 and excluded from it (Reason=BadConstraints)."""
    run = RunDir(tmp_path)
    lost_attempt(run)
    monkeypatch.setattr(FakeJob, "required_nodes", "node2")
    monkeypatch.setattr(FakeJob, "modified", [])
    sent: list[list[str]] = []
    monkeypatch.setattr(slurm_nodes, "quiet", lambda argv, timeout=30.0: sent.append(argv) or "")
    assert pyslurm_backend().release_held([(run, held())]) == ["7"]
    assert FakeJob.modified == []
    assert sent == [["scontrol", "update", "jobid=7", "StartTime=now", "ExcNodeList=node2", "ReqNodeList="]]


def test_the_local_backend_holds_nothing(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    lost_attempt(run)
    assert LocalBackend().release_held([(run, held())]) == []


def fake_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refuse: str) -> Path:
    """An scontrol on PATH that logs each call and fails (exit 1, Slurm's words) the verb `refuse`."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        f'if [ "$1" = {refuse} ]; then echo "Requested operation is presently disabled" >&2; exit 1; fi\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return calls


def test_a_refused_requeuehold_raises_and_nothing_else_is_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor must not report a requeue that never happened (the job would end for good)."""
    calls = fake_scontrol(tmp_path, monkeypatch, refuse="requeuehold")
    refused = "requeuehold 7 failed: Requested operation is presently disabled"
    with pytest.raises(HpctrainError, match=refused):
        slurm_nodes.requeue_now("7", ["node2"])
    assert calls.read_text().splitlines() == ["requeuehold 7"]


def test_once_held_every_update_is_tried_and_a_failed_one_is_returned_as_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_scontrol(tmp_path, monkeypatch, refuse="update")
    failures = slurm_nodes.requeue_now("7", ["node2"])
    assert calls.read_text().splitlines() == [
        "requeuehold 7",
        "update jobid=7 ExcNodeList=node2",
        "update jobid=7 StartTime=now+2",
        "release 7",
    ]
    assert len(failures) == 2 and all("presently disabled" in line for line in failures)
    assert slurm_nodes.requeue_now("7", []) and calls.read_text().splitlines()[-3:] == [
        "requeuehold 7",
        "update jobid=7 StartTime=now+2",
        "release 7",
    ]
