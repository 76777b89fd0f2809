"""Failures injected after the run directory exists: it is removed or recorded, never left unindexed."""

from __future__ import annotations

import errno
import shutil
import time
from pathlib import Path

import pytest

from hpctrain.errors import BackendError, RenderError
from hpctrain.rundir import RunRecord
from hpctrain.rundir.states import JobState
from hpctrain.scheduler.slurm.cli import SlurmCliBackend
from hpctrain.submission import submit_path as submission
from hpctrain.tracking.index import Index
from tests.conftest import JOBS

JOB = JOBS / "digits-ddp.yaml"


def run_dirs(home: Path) -> list[Path]:
    runs = home / "runs"
    return sorted(runs.iterdir()) if runs.is_dir() else []


def assert_nothing_unindexed(home: Path) -> None:
    report = Index(home).check()
    assert report.unindexed_dirs == [], f"orphaned run directories: {report.unindexed_dirs}"


def _raise(error: BaseException):  # type: ignore[no-untyped-def]
    def fail(*args: object, **kwargs: object) -> None:
        raise error

    return fail


@pytest.mark.parametrize(
    "error",
    [
        RenderError("template exploded"),
        RuntimeError("a template that raises something unexpected"),
        KeyboardInterrupt(),
    ],
)
def test_a_render_failure_removes_the_run_directory(
    error: BaseException, hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SlurmCliBackend, "prepare", _raise(error))
    with pytest.raises(type(error)):
        submission.submit(JOB, "local", backend_name="slurm")
    assert run_dirs(hpctrain_home) == []
    assert Index(hpctrain_home).runs() == []


@pytest.mark.parametrize(
    "error",
    [OSError(errno.ENOSPC, "No space left on device"), PermissionError(errno.EACCES, "Permission denied")],
)
def test_a_full_or_read_only_disk_removes_the_run_directory(
    error: OSError, hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Path, "write_bytes", _raise(error))  # spec.json is the first file written
    with pytest.raises(OSError, match=error.strerror):
        submission.submit(JOB, "local", backend_name="slurm")
    assert run_dirs(hpctrain_home) == []


def test_a_directory_that_cannot_be_removed_is_recorded_with_the_reason(
    hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Path, "write_bytes", _raise(OSError(errno.ENOSPC, "No space left on device")))
    monkeypatch.setattr(shutil, "rmtree", lambda *a, **k: None)
    with pytest.raises(OSError):
        submission.submit(JOB, "local", backend_name="slurm")
    (run,) = Index(hpctrain_home).runs()
    assert run.state == "SUBMIT_FAILED" and "No space left on device" in run.reason
    assert_nothing_unindexed(hpctrain_home)


def test_ctrl_c_during_sbatch_is_recorded_and_reraised(
    hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SlurmCliBackend, "submit", _raise(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        submission.submit(JOB, "local", backend_name="slurm")
    (run,) = Index(hpctrain_home).runs()
    assert run.state == "SUBMIT_FAILED" and "interrupted" in run.reason
    assert (run.run_dir / "job.sbatch").exists()
    assert_nothing_unindexed(hpctrain_home)


def test_sbatch_missing_from_path_is_recorded(
    hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    done = submission.submit(JOB, "local", backend_name="slurm")
    assert done.error and "sbatch not found" in done.error
    (run,) = Index(hpctrain_home).runs()
    assert run.state == "SUBMIT_FAILED" and run.reason == done.error
    assert_nothing_unindexed(hpctrain_home)


def test_a_read_only_run_directory_leaves_no_orphan(
    hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run directory turns read-only right after it is made (root ignores mode bits, so the
    # write is refused the way a read-only mount refuses it).
    made = Index.new_run_dir

    def read_only(self: Index, name: str) -> tuple[str, Path]:
        run_id, run_dir = made(self, name)
        monkeypatch.setattr(Path, "write_text", _raise(OSError(errno.EROFS, "Read-only file system")))
        return run_id, run_dir

    monkeypatch.setattr(Index, "new_run_dir", read_only)
    with pytest.raises(OSError, match="Read-only"):
        submission.submit(JOB, "local", backend_name="slurm")
    assert_nothing_unindexed(hpctrain_home)
    assert run_dirs(hpctrain_home) == []


def _a_later_round(home: Path) -> tuple[Index, RunRecord]:
    """A run that is recorded already, and the index entry of a further job of it (a sweep's round)."""
    index = Index(home)
    run_id, run_dir = index.new_run_dir("sweep")
    now = time.time()
    fields = {"name": "sweep", "site": "local", "backend": "slurm", "run_dir": run_dir, "submitted_at": now}
    index.add(RunRecord(run_id=run_id, job_id="7", state=JobState.RUNNING, state_at=now, **fields))
    return index, RunRecord(run_id=f"{run_id}+4", job_id=None, state=JobState.PENDING, state_at=now, **fields)


def test_a_further_job_is_recorded_before_the_scheduler_is_asked_and_its_job_id_after(
    hpctrain_home: Path,
) -> None:
    index, entry = _a_later_round(hpctrain_home)
    seen: list[RunRecord] = []

    def schedule() -> str:
        seen.extend(r for r in Index(hpctrain_home).runs() if r.run_id == entry.run_id)
        return "8"

    submission.submit_more(index, entry, None, schedule)
    (before,) = seen
    assert before.job_id is None and before.reason == submission.SUBMITTING
    (after,) = (r for r in Index(hpctrain_home).runs() if r.run_id == entry.run_id)
    assert after.job_id == "8" and after.state == JobState.PENDING and after.reason == ""
    assert_nothing_unindexed(hpctrain_home)


@pytest.mark.parametrize(
    "error", [BackendError("sbatch: error: QOSMaxSubmitJobPerUserLimit"), KeyboardInterrupt()]
)
def test_a_further_job_the_scheduler_refuses_is_recorded_failed_with_the_reason(
    error: BaseException, hpctrain_home: Path
) -> None:
    index, entry = _a_later_round(hpctrain_home)
    with pytest.raises(type(error)):
        submission.submit_more(index, entry, None, _raise(error))
    (failed,) = (r for r in Index(hpctrain_home).runs() if r.run_id == entry.run_id)
    assert failed.state == JobState.SUBMIT_FAILED and failed.job_id is None
    assert failed.reason == submission._reason(error)
