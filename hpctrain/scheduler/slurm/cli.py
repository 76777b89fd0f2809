"""The Slurm command-line backend: sbatch, squeue, sacct, scancel, with machine-readable output."""

from __future__ import annotations

import math
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpctrain.errors import SpecError
from hpctrain.scheduler.base import Backend, BackendError, JobInfo, JobState, merge_component, slurm_state

if TYPE_CHECKING:
    import subprocess

    from hpctrain.launch.render import BatchOptions

# squeue and sacct must never hang a login-node command: a controller that does not answer in this
# many seconds (HPCTRAIN_SLURM_TIMEOUT) is reported as unreachable.
DEFAULT_TIMEOUT_S = 20.0
SQUEUE_FORMAT = "%i|%T|%r|%N|%M"
SACCT_FIELDS = "JobID,State,ExitCode,NodeList,Elapsed,Submit"
UNREACHABLE = re.compile(r"unable to contact|connection refused|connect failure|timed out|Zero Bytes", re.I)


def base_job_id(text: str) -> str:
    """`123`, `123+1` (hetjob component), `123_4` / `123_[5-9]` (array) -> `123`."""
    return re.split(r"[+_.]", text, maxsplit=1)[0]


def timeout_s() -> float:
    """HPCTRAIN_SLURM_TIMEOUT in seconds; a value that is not a positive number is a one-line error."""
    text = os.environ.get("HPCTRAIN_SLURM_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value < math.inf):
        raise SpecError(f"HPCTRAIN_SLURM_TIMEOUT={text!r}: expected a positive number of seconds")
    return value


def as_text(output: str | bytes) -> str:
    """Scheduler output as text: a byte that is not UTF-8 (a job name, a node's locale) is replaced."""
    return output.decode("utf-8", "replace") if isinstance(output, bytes) else output


def last_line(text: str) -> str:
    """The last non-blank line: where sbatch and squeue put the error that ended them."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


SBATCH_JOB_ID = re.compile(r"\s*(\d+)(?:;\S*)?\s*")


def parse_sbatch(output: str | bytes) -> str:
    """The job id from `sbatch --parsable` (`id` or `id;cluster`), whatever warnings surround it."""
    text = as_text(output)
    for line in text.splitlines():
        match = SBATCH_JOB_ID.fullmatch(line)
        if match:
            return match.group(1)
    raise BackendError(f"sbatch printed no job id: {text.strip()[:200]!r}")


class SlurmCliBackend(Backend):
    name = "slurm"

    def _run(self, argv: Sequence[str], what: str) -> subprocess.CompletedProcess[str]:
        if shutil.which(argv[0]) is None:
            raise BackendError(
                f"{argv[0]} not found: is this a Slurm login node? (PATH={os.environ.get('PATH', '')})"
            )
        # Imported here: render selects this backend for its template and runs no command.
        import subprocess

        limit = timeout_s()
        try:
            return subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                timeout=limit,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BackendError(
                f"the Slurm controller did not answer {what} within {limit:g} s (HPCTRAIN_SLURM_TIMEOUT)"
            ) from None
        except OSError as err:
            raise BackendError(f"could not run {argv[0]}: {err.strerror or err}") from None

    def _check(self, proc: subprocess.CompletedProcess[str], what: str) -> str:
        if proc.returncode != 0:
            message = last_line(proc.stderr) or last_line(proc.stdout) or f"exit code {proc.returncode}"
            if UNREACHABLE.search(proc.stderr):
                raise BackendError(f"cannot reach the Slurm controller ({what}): {message}")
            raise BackendError(f"{what} failed: {message}")
        return proc.stdout

    def submit(self, script: Path, run_dir: Path, batch: BatchOptions | None = None) -> str:
        # sbatch reads the options from the script's own #SBATCH lines, which print `batch`.
        proc = self._run(["sbatch", "--parsable", str(script)], "sbatch")
        return parse_sbatch(self._check(proc, "sbatch"))

    def test_only(self, script: Path) -> str:
        proc = self._run(["sbatch", "--test-only", str(script)], "sbatch --test-only")
        # sbatch --test-only answers on stderr, with exit code 0 when the job could run.
        if proc.returncode != 0:
            raise BackendError(f"sbatch --test-only refused the script: {last_line(proc.stderr)}")
        return last_line(proc.stderr) or last_line(proc.stdout)

    def poll(self, job_ids: Iterable[str]) -> dict[str, JobInfo]:
        wanted = {str(j) for j in job_ids}
        if not wanted:
            return {}
        found = self._squeue(wanted)
        missing = wanted - found.keys()
        # Only sacct says who cancelled a job (`CANCELLED by UID`): status says "by you" from it.
        missing |= {job for job, info in found.items() if info.state is JobState.CANCELLED}
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


def _parse_rows(output: str | bytes, wanted: set[str], source: str, third: str) -> dict[str, JobInfo]:
    """Rows of `id|state|<third>|nodes|elapsed`, folded per base job id (components, array tasks)."""
    found: dict[str, JobInfo] = {}
    newest: dict[str, str] = {}
    for line in as_text(output).splitlines():
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


def parse_squeue(text: str | bytes, wanted: set[str]) -> dict[str, JobInfo]:
    """`squeue --format=%i|%T|%r|%N|%M` output: the third column is the pending reason."""
    return _parse_rows(text, wanted, "squeue", "reason")


def parse_sacct(text: str | bytes, wanted: set[str]) -> dict[str, JobInfo]:
    """`sacct --parsable2 --format=JobID,State,ExitCode,NodeList,Elapsed,Submit` output."""
    return _parse_rows(text, wanted, "sacct", "exit_code")
