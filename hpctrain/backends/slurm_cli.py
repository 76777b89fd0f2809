"""The Slurm command-line backend: sbatch, squeue, sacct, scancel, with machine-readable output."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from hpctrain.backends.base import Backend, BackendError, JobInfo, JobState, merge_component, slurm_state

# squeue and sacct must never hang a login-node command: a controller that does not answer in this
# many seconds is reported as unreachable.
TIMEOUT_S = float(os.environ.get("HPCTRAIN_SLURM_TIMEOUT", "20"))
SQUEUE_FORMAT = "%i|%T|%r|%N|%M"
SACCT_FIELDS = "JobID,State,ExitCode,NodeList,Elapsed,Submit"
UNREACHABLE = re.compile(r"unable to contact|connection refused|connect failure|timed out|Zero Bytes", re.I)


def base_job_id(text: str) -> str:
    """`123`, `123+1` (hetjob component), `123_4` / `123_[5-9]` (array) -> `123`."""
    return re.split(r"[+_.]", text, maxsplit=1)[0]


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


class SlurmCliBackend(Backend):
    name = "slurm"

    def _run(self, argv: Sequence[str], what: str) -> subprocess.CompletedProcess[str]:
        if shutil.which(argv[0]) is None:
            raise BackendError(
                f"{argv[0]} not found: is this a Slurm login node? (PATH={os.environ.get('PATH', '')})"
            )
        try:
            return subprocess.run(list(argv), capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise BackendError(
                f"the Slurm controller did not answer {what} within {TIMEOUT_S:.0f} s "
                "(HPCTRAIN_SLURM_TIMEOUT)"
            ) from None

    def _check(self, proc: subprocess.CompletedProcess[str], what: str) -> str:
        if proc.returncode != 0:
            message = first_line(proc.stderr) or first_line(proc.stdout) or f"exit code {proc.returncode}"
            if UNREACHABLE.search(proc.stderr):
                raise BackendError(f"cannot reach the Slurm controller ({what}): {message}")
            raise BackendError(f"{what} failed: {message}")
        return proc.stdout

    def submit(self, script: Path, run_dir: Path) -> str:
        proc = self._run(["sbatch", "--parsable", str(script)], "sbatch")
        out = self._check(proc, "sbatch")
        # --parsable prints `jobid` or `jobid;cluster`.
        job_id = first_line(out).split(";", 1)[0]
        if not job_id.isdigit():
            raise BackendError(f"sbatch printed no job id: {out.strip()!r}")
        return job_id

    def test_only(self, script: Path) -> str:
        proc = self._run(["sbatch", "--test-only", str(script)], "sbatch --test-only")
        # sbatch --test-only answers on stderr, with exit code 0 when the job could run.
        if proc.returncode != 0:
            raise BackendError(f"sbatch --test-only refused the script: {first_line(proc.stderr)}")
        return first_line(proc.stderr) or first_line(proc.stdout)

    def poll(self, job_ids: Iterable[str]) -> dict[str, JobInfo]:
        wanted = {str(j) for j in job_ids}
        if not wanted:
            return {}
        found = self._squeue(wanted)
        missing = wanted - found.keys()
        if missing:
            found.update(self._sacct(missing))
        for job_id in wanted - found.keys():
            found[job_id] = JobInfo(job_id, JobState.UNKNOWN, reason="not in squeue; no accounting record")
        return found

    def _squeue(self, wanted: set[str]) -> dict[str, JobInfo]:
        # One RPC for all of the user's jobs, filtered here: cheaper for slurmctld than -j with many
        # ids, and an id the controller has already purged is no error.
        proc = self._run(
            ["squeue", "--me", "--states=all", "--noheader", f"--format={SQUEUE_FORMAT}"], "squeue"
        )
        out = self._check(proc, "squeue")
        return parse_squeue(out, wanted)

    def _sacct(self, wanted: set[str]) -> dict[str, JobInfo]:
        proc = self._run(
            [
                "sacct",
                "--allocations",
                "--noheader",
                "--parsable2",
                f"--format={SACCT_FIELDS}",
                "--jobs",
                ",".join(sorted(wanted)),
            ],
            "sacct",
        )
        if proc.returncode != 0:
            # A cluster without accounting: sacct fails, which is no reason to fail the poll.
            return {}
        return parse_sacct(proc.stdout, wanted)

    def cancel(self, job_ids: Iterable[str]) -> None:
        ids = [str(j) for j in job_ids]
        if ids:
            self._check(self._run(["scancel", *ids], "scancel"), "scancel")


def _parse_rows(text: str, wanted: set[str], source: str, third: str) -> dict[str, JobInfo]:
    """Rows of `id|state|<third>|nodes|elapsed`, folded per base job id (components, array tasks)."""
    found: dict[str, JobInfo] = {}
    newest: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5:
            continue
        raw_id, state, third_value, nodes, elapsed = parts[:5]
        job_id = base_job_id(raw_id)
        if job_id not in wanted:
            continue
        # Job ids come back after a controller's state is reset: only the newest job of an id counts.
        submit = parts[5] if len(parts) > 5 else ""
        if submit < newest.get(job_id, ""):
            continue
        if submit > newest.get(job_id, ""):
            newest[job_id] = submit
            found.pop(job_id, None)
        info = JobInfo(
            job_id,
            slurm_state(state),
            nodes=nodes,
            elapsed=elapsed,
            source=source,
            extra={"slurm_state": state},
        )
        setattr(info, third, "" if third_value == "None" else third_value)
        merge_component(found, info, raw_id)
    return found


def parse_squeue(text: str, wanted: set[str]) -> dict[str, JobInfo]:
    """`squeue --format=%i|%T|%r|%N|%M` output: the third column is the pending reason."""
    return _parse_rows(text, wanted, "squeue", "reason")


def parse_sacct(text: str, wanted: set[str]) -> dict[str, JobInfo]:
    """`sacct --parsable2 --format=JobID,State,ExitCode,NodeList,Elapsed,Submit` output."""
    return _parse_rows(text, wanted, "sacct", "exit_code")
