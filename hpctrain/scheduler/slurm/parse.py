"""Slurm's text, read: the state map and the parsers of sbatch, squeue, sacct and scontrol config output."""

from __future__ import annotations

import re
from collections.abc import Callable

from hpctrain.errors import BackendError
from hpctrain.scheduler.base import Blocked, JobInfo, JobState, merge_component
from hpctrain.scheduler.slurm.blocked import PartitionNodes, PendingRow, never_runs

# Every state squeue or sacct prints (22.05 to 26.05), folded into the enum. PREEMPTED stays
# non-terminal: with --requeue a preempted job comes back (the watcher ends it when the spec says
# preemption.requeue: false).
SLURM_STATES: dict[str, JobState] = {
    "PENDING": JobState.PENDING,
    "CONFIGURING": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "REQUEUE_HOLD": JobState.REQUEUED,
    "REQUEUE_FED": JobState.REQUEUED,
    "REQUEUED": JobState.REQUEUED,
    # 25.05 and later: a job requeued with --requeue=expedite on its way back to the front of the queue.
    "EXPEDITING": JobState.REQUEUED,
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "SUSPENDED": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    # A job that exited with the special exit code is requeued in a held state: not over.
    "SPECIAL_EXIT": JobState.REQUEUED,
    "CANCELLED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
    "DEADLINE": JobState.TIMEOUT,
    "PREEMPTED": JobState.PREEMPTED,
    "NODE_FAIL": JobState.NODE_FAIL,
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY,
}


def slurm_state(text: str) -> JobState:
    """Map Slurm's spelling (`CANCELLED by 0`, `RUNNING`, `OUT_OF_ME+`) to a JobState."""
    word = text.strip().split(" ", 1)[0].rstrip("+").upper()
    if word in SLURM_STATES:
        return SLURM_STATES[word]
    # sacct truncates long names with '+' when a column is narrow.
    matches = {state for name, state in SLURM_STATES.items() if word and name.startswith(word)}
    return matches.pop() if len(matches) == 1 else JobState.UNKNOWN


# Slurm's default MaxArraySize, for a configuration that does not print one.
DEFAULT_MAX_ARRAY_SIZE = 1001


def max_array_size(config: dict[str, str]) -> int:
    """MaxArraySize of `scontrol show config` (as parse_config reads it)."""
    value = config.get("MaxArraySize", "").strip()
    return int(value) if value.isascii() and value.isdigit() else DEFAULT_MAX_ARRAY_SIZE


def base_job_id(text: str) -> str:
    """`123`, `123+1` (hetjob component), `123_4` / `123_[5-9]` (array) -> `123`."""
    return re.split(r"[+_.]", text, maxsplit=1)[0]


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


def _parse_rows(
    output: str | bytes,
    wanted: set[str],
    source: str,
    third: str,
    submit_column: int | None = None,
    judge: Callable[[JobInfo, list[str]], Blocked | None] | None = None,
) -> dict[str, JobInfo]:
    """Rows of `id|state|<third>|nodes|elapsed|...`, folded per base job id (components, array tasks).
    `submit_column`: where a row's submit time is (the newest job of an id wins); `judge(info, rest)`
    says whether a pending row (its columns after elapsed in `rest`) can never run."""
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
        submit = parts[submit_column] if submit_column is not None and len(parts) > submit_column else ""
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
        if judge is not None and info.state is JobState.PENDING:
            info.blocked = judge(info, parts[5:])
        merge_component(found, info, raw_id)
    return found


def parse_squeue(
    text: str | bytes, wanted: set[str], partitions: Callable[[], PartitionNodes] | None = None
) -> dict[str, JobInfo]:
    """`squeue --format=%i|%T|%r|%N|%M|%P|%D|%x|%n|%E` output: the third column is the pending reason.
    A pending row's partition, node count, excluded and required nodes and dependency say whether it
    can ever run (blocked.never_runs); `partitions` (each partition's nodes) is asked only for a row
    that names nodes, and without it node lists are not judged."""

    def judge(info: JobInfo, rest: list[str]) -> Blocked | None:
        return never_runs(info.job_id, info.reason, PendingRow.read(rest), partitions or dict)

    return _parse_rows(text, wanted, "squeue", "reason", judge=judge)


def parse_sacct(text: str | bytes, wanted: set[str]) -> dict[str, JobInfo]:
    """`sacct --parsable2 --format=JobID,State,ExitCode,NodeList,Elapsed,Submit` output."""
    return _parse_rows(text, wanted, "sacct", "exit_code", submit_column=5)
