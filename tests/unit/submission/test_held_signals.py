"""SIGTERM, SIGHUP and SIGINT wait while a submit records its job, then act; runs without a job settle."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from hpctrain.scheduler.base import JobState
from hpctrain.scheduler.slurm.cli import SlurmCliBackend
from hpctrain.submission import submit_path as submission
from hpctrain.submission.submit_path import SUBMITTING, held_signals
from hpctrain.tracking.index import Index, RunRecord
from tests.conftest import JOBS


def test_signals_wait_for_the_block_and_the_handlers_come_back() -> None:
    seen: list[int] = []
    numbers = (signal.SIGTERM, signal.SIGHUP)
    before = {n: signal.signal(n, lambda number, frame: seen.append(number)) for n in numbers}
    try:
        mine = signal.getsignal(signal.SIGTERM)
        with held_signals() as held:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)
            assert seen == [] and held.signals == [signal.SIGTERM, signal.SIGHUP]
        assert seen == [signal.SIGTERM, signal.SIGHUP]
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def test_ctrl_c_in_the_window_is_a_keyboard_interrupt_after_it() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), held_signals():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        done.append("recorded")
    assert done == ["recorded"]


def intent(index: Index, age_s: float) -> RunRecord:
    run_id, run_dir = index.new_run_dir("cut")
    at = time.time() - age_s
    run = RunRecord(
        run_id=run_id,
        job_id=None,
        name="cut",
        site="local",
        backend="local",
        run_dir=run_dir,
        submitted_at=at,
        state=JobState.PENDING,
        state_at=at,
        reason=SUBMITTING,
    )
    index.add(run)
    return run


def test_a_run_without_a_job_is_settled_only_after_the_grace(tmp_path: Path) -> None:
    index = Index(tmp_path)
    old, young = intent(index, 3600), intent(index, 0)
    verdicts = {a.run_id: a.verdict for a in index.adopt_interrupted(grace_s=600)}
    assert "never" not in verdicts[young.run_id] and "being submitted" in verdicts[young.run_id]
    assert "cut short" in verdicts[old.run_id]
    states = {r.run_id: r.state for r in Index(tmp_path).runs()}
    assert states == {old.run_id: JobState.SUBMIT_FAILED, young.run_id: JobState.PENDING}
    assert [r.run_id for r in Index(tmp_path).interrupted()] == [young.run_id]


def test_a_job_id_recorded_after_the_intent_survives_compaction(tmp_path: Path) -> None:
    index = Index(tmp_path)
    run = intent(index, 0)
    index.record_job(run, "777")
    index.compact()
    (found,) = Index(tmp_path).find(["777"])[0]
    assert found.run_id == run.run_id and found.job_id == "777" and found.reason == ""


def test_a_signal_while_the_files_are_written_stops_before_sbatch(
    hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare = SlurmCliBackend.prepare
    submitted: list[object] = []

    def prepare_and_hang_up(self: SlurmCliBackend, *args: object, **kwargs: object) -> object:
        os.kill(os.getpid(), signal.SIGHUP)  # the ssh session drops while the script is written
        return prepare(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SlurmCliBackend, "prepare", prepare_and_hang_up)
    monkeypatch.setattr(SlurmCliBackend, "submit", lambda *args, **kwargs: submitted.append(args) or "1")
    seen: list[int] = []
    before = signal.signal(signal.SIGHUP, lambda number, frame: seen.append(number))
    try:
        with pytest.raises(KeyboardInterrupt):
            submission.submit(JOBS / "digits-ddp.yaml", "local", backend_name="slurm")
    finally:
        signal.signal(signal.SIGHUP, before)
    assert submitted == [] and seen == [signal.SIGHUP]
    assert list((hpctrain_home / "runs").iterdir()) == [] and Index(hpctrain_home).runs() == []
