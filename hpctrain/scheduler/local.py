"""The local backend: runs a job's script on this machine without Slurm, for debugging on a workstation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from hpctrain.rundir import RunDir, home
from hpctrain.scheduler.base import Backend, BackendError, JobInfo, JobState

if TYPE_CHECKING:
    from hpctrain import spec
    from hpctrain.scheduler.render import BatchOptions


def _jobs_dir() -> Path:
    path = home() / "local-jobs"
    path.mkdir(parents=True, exist_ok=True)
    return path


class LocalBackend(Backend):
    """Each job is a process group started in its own session; its exit code lands in a file."""

    name = "local"
    _template = "local.sh.j2"
    runs_doctor_job = False

    def refuse(self, resolved: spec.Resolved) -> None:
        # A local job starts at once: it cannot wait for another job, so one that must is refused.
        if resolved.job.dependency:
            raise BackendError(
                f"dependency {resolved.job.dependency}: the local backend starts jobs at once and cannot "
                "wait for others; submit with --backend slurm"
            )

    def submit(self, script: Path, run_dir: Path, batch: BatchOptions | None = None) -> str:
        # No scheduler: the batch options have nothing to ask of.
        run = RunDir(run_dir)
        run.logs.mkdir(parents=True, exist_ok=True)
        exit_file = run.local_exit_code
        exit_file.unlink(missing_ok=True)
        log = open(run.batch_log, "ab")  # noqa: SIM115 - handed to the child
        # The wrapper records the exit code even when the script fails, so poll can tell
        # COMPLETED from FAILED after the process is gone.
        wrapper = 'bash "$0"; code=$?; echo "$code" > "$1.tmp" && mv "$1.tmp" "$1"; exit "$code"'
        try:
            proc = subprocess.Popen(
                ["bash", "-c", wrapper, str(script), str(exit_file)],
                # Where submit ran, as sbatch does: the ranks' `python -m` finds the user's modules there.
                cwd=os.getcwd(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "HPCTRAIN_RUN_DIR": str(run_dir), "HPCTRAIN_BACKEND": "local"},
            )
        except OSError as err:
            raise BackendError(f"could not start {script}: {err}") from None
        finally:
            log.close()
        job_id = f"local-{proc.pid}"
        state = {"pid": proc.pid, "run_dir": str(run_dir), "started": time.time()}
        (_jobs_dir() / f"{job_id}.json").write_text(json.dumps(state))
        return job_id

    def _state(self, job_id: str) -> dict[str, object] | None:
        path = _jobs_dir() / f"{job_id}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def poll(
        self, job_ids: Iterable[str], array_sizes: Mapping[str, int] | None = None
    ) -> dict[str, JobInfo]:
        # No job arrays here: `array_sizes` has nothing to ask of.
        found: dict[str, JobInfo] = {}
        for job_id in job_ids:
            state = self._state(job_id)
            if state is None:
                found[job_id] = JobInfo(job_id, JobState.UNKNOWN, reason="no such local job", source="local")
                continue
            run = RunDir(str(state["run_dir"]))
            # Liveness first: the wrapper writes the exit file and then ends, so a process
            # seen gone after the file was seen missing could have written it in between.
            alive = _alive(int(state["pid"]))  # type: ignore[call-overload]
            if run.local_exit_code.exists():
                code = run.local_exit_code.read_text().strip()
                cancelled = run.local_cancelled.exists()
                job_state = (
                    JobState.CANCELLED
                    if cancelled
                    else (JobState.COMPLETED if code == "0" else JobState.FAILED)
                )
                found[job_id] = JobInfo(job_id, job_state, exit_code=code, source="local")
            elif alive:
                elapsed = int(time.time() - float(state["started"]))  # type: ignore[arg-type]
                found[job_id] = JobInfo(
                    job_id,
                    JobState.RUNNING,
                    nodes="localhost",
                    elapsed=f"{elapsed // 60}:{elapsed % 60:02d}",
                    source="local",
                )
            else:
                cancelled = run.local_cancelled.exists()
                found[job_id] = JobInfo(
                    job_id,
                    JobState.CANCELLED if cancelled else JobState.FAILED,
                    reason="process ended without an exit code",
                    source="local",
                )
        return found

    def cancel(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            state = self._state(job_id)
            if state is None:
                raise BackendError(f"no local job {job_id}")
            run = RunDir(str(state["run_dir"]))
            # Like scancel on a finished job: an ended run keeps the state it ended in.
            if run.local_exit_code.exists() or not _alive(int(state["pid"])):  # type: ignore[call-overload]
                continue
            run.local_cancelled.touch()
            try:
                os.killpg(int(state["pid"]), signal.SIGTERM)  # type: ignore[call-overload]
            except ProcessLookupError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of an exited parent still answers kill(0); /proc tells.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True
