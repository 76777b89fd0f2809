"""The Slurm command-line backend: sbatch, squeue, sacct, scancel, scontrol, sacctmgr, machine-readable."""

from __future__ import annotations

import math
import os
import re
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpctrain.errors import SpecError
from hpctrain.scheduler.base import (
    Backend,
    BackendError,
    JobInfo,
    JobState,
    Limits,
    base_job_id,
    incomplete_arrays,
    merge_accounting,
)
from hpctrain.scheduler.job_comment import carried_run_id
from hpctrain.scheduler.slurm.blocked import parse_partitions
from hpctrain.scheduler.slurm.facts import parse_config, user_associations
from hpctrain.scheduler.slurm.nodes import release_requeued
from hpctrain.scheduler.slurm.parse import last_line, max_array_size, parse_sacct, parse_sbatch, parse_squeue

if TYPE_CHECKING:
    import subprocess

    from hpctrain.rundir import RunDir
    from hpctrain.scheduler.render import BatchOptions

# squeue and sacct must never hang a login-node command: a controller that does not answer in this
# many seconds (HPCTRAIN_SLURM_TIMEOUT) is reported as unreachable.
DEFAULT_TIMEOUT_S = 20.0
# After the state columns, what tells whether a pending job can ever run (blocked.never_runs): its
# partitions, node count, excluded and required nodes, and dependency. Same RPC, a few more bytes.
SQUEUE_FORMAT = "%i|%T|%r|%N|%M|%P|%D|%x|%n|%E"
# How long one `scontrol show partition` answer serves polls (status --watch, Run.wait) in this process.
PARTITIONS_TTL_S = 60.0
SACCT_FIELDS = "JobID,State,ExitCode,NodeList,Elapsed,Submit"
_partitions_cache: tuple[float, dict[str, frozenset[str]]] | None = None
UNREACHABLE = re.compile(r"unable to contact|connection refused|connect failure|timed out|Zero Bytes", re.I)


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

    def poll(
        self, job_ids: Iterable[str], array_sizes: Mapping[str, int] | None = None
    ) -> dict[str, JobInfo]:
        wanted = {str(j) for j in job_ids}
        if not wanted:
            return {}
        found = self.own_jobs(wanted)
        partial = incomplete_arrays(found, array_sizes or {})
        missing = wanted - found.keys()
        # Only sacct says who cancelled a job (`CANCELLED by UID`): status says "by you" from it.
        cancelled = {job for job, info in found.items() if info.state is JobState.CANCELLED}
        if missing or partial or cancelled:
            for job_id, info in self._sacct(missing | partial | cancelled).items():
                found[job_id] = merge_accounting(found[job_id], info) if job_id in partial else info
        for job_id in wanted - found.keys():
            found[job_id] = JobInfo(job_id, JobState.UNKNOWN, reason="not in squeue; no accounting record")
        return found

    def own_jobs(self, wanted: set[str]) -> dict[str, JobInfo]:
        """The wanted jobs among those slurmctld holds for this user (squeue --me)."""
        # One RPC for all of the user's jobs, filtered by slurmctld to this user's and here to the
        # wanted: cheaper than -j with many ids, and an id the controller has purged is no error.
        proc = self._run(
            ["squeue", "--me", "--states=all", "--noheader", f"--format={SQUEUE_FORMAT}"], "squeue"
        )
        out = self._check(proc, "squeue")
        return parse_squeue(out, wanted, self._partitions)

    def _partitions(self) -> dict[str, frozenset[str]]:
        """Each partition's nodes, asked of scontrol only when a pending job names nodes (an ExcNodeList,
        a --nodelist), and then once a minute at most; empty when it does not answer."""
        global _partitions_cache
        now = time.monotonic()
        if _partitions_cache is None or now - _partitions_cache[0] > PARTITIONS_TTL_S:
            try:
                proc = self._run(["scontrol", "show", "partition", "-o"], "scontrol show partition")
            except BackendError:  # the poll itself answered: no verdict on nodes is no reason to fail it
                proc = None
            found = parse_partitions(proc.stdout) if proc is not None and proc.returncode == 0 else {}
            _partitions_cache = (now, found)
        return _partitions_cache[1]

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

    def jobs_carrying(self, run_ids: Iterable[str]) -> dict[str, str]:
        wanted = set(run_ids)
        if not wanted:
            return {}
        queue = self._run(["squeue", "--me", "--states=all", "--noheader", "--format=%i|%k"], "squeue")
        found = _carried(self._check(queue, "squeue"), wanted)
        if wanted - found.keys():
            found = {**self.accounted_jobs_carrying(wanted - found.keys()), **found}
        return found

    def accounted_jobs_carrying(self, run_ids: set[str]) -> dict[str, str]:
        """Jobs of the last week that already left the queue, by the run id their comment carries:
        accounting has the comment where the cluster stores it (AccountingStoreFlags=job_comment;
        scripts/local-cluster.sh sets it). Without accounting, none."""
        recent = ["--starttime=now-7days", "--format=JobID,Comment"]
        accounting = self._run(["sacct", "--allocations", "--noheader", "--parsable2", *recent], "sacct")
        return _carried(accounting.stdout, run_ids) if accounting.returncode == 0 else {}

    def cancel(self, job_ids: Iterable[str]) -> None:
        ids = [str(j) for j in job_ids]
        if ids:
            self._check(self._run(["scancel", *ids], "scancel"), "scancel")

    def limits(self) -> Limits:
        """MaxArraySize from `scontrol show config`; this user's MaxSubmitJobs from accounting, if any."""
        config = self._check(self._run(["scontrol", "show", "config"], "scontrol show config"), "scontrol")
        limits = Limits(max_array_size(parse_config(config)))
        try:
            rows = user_associations(["MaxSubmit"], timeout_s())
        except BackendError:
            rows = []  # no accounting: no per-user cap to respect
        caps = [int(row[0]) for row in rows if row[0].isascii() and row[0].isdigit()]
        limits.max_submit_jobs = min(caps) if caps else None
        if limits.max_submit_jobs is not None:
            queue = self._run(["squeue", "--me", "--array", "--noheader", "--format=%i"], "squeue")
            limits.queued = len(self._check(queue, "squeue").split())
        return limits

    def release_held(self, held: Iterable[tuple[RunDir, JobInfo]]) -> list[str]:
        return [info.job_id for run, info in held if release_requeued(run, info)]


def _carried(text: str, wanted: set[str]) -> dict[str, str]:
    """`JOBID|COMMENT` rows -> {run id: job id} for the wanted run ids that a comment carries."""
    found: dict[str, str] = {}
    for row in text.splitlines():
        raw_id, _, comment = row.partition("|")
        run_id = carried_run_id(comment)
        if run_id in wanted and raw_id.strip():
            found[run_id] = base_job_id(raw_id.strip())
    return found
