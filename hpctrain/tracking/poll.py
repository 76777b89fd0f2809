"""The poll: one scheduler query per backend for all tracked jobs, progress read from run directories."""

from __future__ import annotations

import os
import pwd
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import msgspec

from hpctrain.rundir import (
    EvalLine,
    EventLine,
    FailureReport,
    LogProgressState,
    MemoryLine,
    MetricLine,
    RankTimesLine,
    Result,
    RunDir,
    SpecSummary,
    TrainLine,
    Unreadable,
    decode_line,
    tail_lines,
)
from hpctrain.scheduler import select_backend
from hpctrain.scheduler.base import JobInfo, JobState, fold_elements
from hpctrain.scheduler.slurm.task_errors import MAX_RANGE, FailedTask, srun_task_errors
from hpctrain.tracking.index import ENDED_STATES, Index, RunRecord

TERMINAL_NAMES = ENDED_STATES
# The states whose run shows who failed and why (srun's word, the runtime's failure reports).
FAILURE_STATES = (
    JobState.FAILED,
    JobState.NODE_FAIL,
    JobState.OUT_OF_MEMORY,
    JobState.TIMEOUT,
    JobState.CANCELLED,
)
FAILURE_NAMES = frozenset(s.value for s in FAILURE_STATES)
# The reason `hpctrain cancel` records until the poll sees the job end, and the one recorded then.
CANCEL_REQUESTED = "cancel requested"
CANCELLED_BY = "cancelled by "
# Lines read back past the latest train line looking for the latest eval line.
LOOK_BACK = 16
# How a per-rank times line starts (msgspec writes the tag first).
RANKS_LINE = b'{"kind":"ranks"'


class Progress(msgspec.Struct, omit_defaults=True):
    """What the run directory says: the latest line of each kind, the result, failure reports."""

    train: TrainLine | None = None
    eval: EvalLine | None = None
    event: EventLine | None = None
    ranks: RankTimesLine | None = None
    """The latest per-rank compute/wait times, with the stragglers the runtime flagged."""
    memory: dict[int, MemoryLine] = {}
    result: Result | None = None
    workers: dict[int, TrainLine] = {}
    failures: list[FailureReport] = []
    unreadable: list[str] = []
    """One line per file (or metrics file) that did not decode."""
    unmatched: str = ""
    """A command job's progress pattern that matched none of rank 0's lines so far, in one line."""


@dataclass
class PolledRun:
    """A tracked run and what this poll's scheduler query said of it (None: not asked, or not known)."""

    run: RunRecord
    info: JobInfo | None

    @property
    def state(self) -> str:
        return self.run.state


def spec_summary(run: RunRecord) -> SpecSummary | None:
    found = RunDir(run.run_dir).read_spec_summary()
    return found if isinstance(found, SpecSummary) else None


def ended(run: RunRecord) -> bool:
    """Whether the run can no longer change: a terminal state, or preempted with no requeue coming."""
    if run.state in TERMINAL_NAMES:
        return True
    if run.state == JobState.PREEMPTED.value:
        summary = spec_summary(run)
        return summary is not None and not summary.requeues
    return False


def poll_and_record(index: Index, runs: list[RunRecord]) -> list[PolledRun]:
    """Poll every run that has not ended, one query per backend, and record state changes."""
    pending: dict[str, list[RunRecord]] = defaultdict(list)
    for run in runs:
        if run.job_id and not ended(run):
            pending[run.backend].append(run)
    infos: dict[str, JobInfo] = {}
    changes: list[tuple[RunRecord, str, str]] = []
    for backend_name, group in pending.items():
        backend = select_backend(backend_name)
        polled = backend.poll([r.job_id for r in group if r.job_id])
        for run in group:
            info = polled.get(str(run.job_id))
            if info is None:
                continue
            if info.state is JobState.UNKNOWN:
                info = _from_run_dir(run, info)
            info = _settle_preempted(run, info)
            infos[run.run_id] = info
            reason = cancel_reason(index, run, info) if info.state is JobState.CANCELLED else ""
            changes.append((run, info.state.value, reason or info.reason))
    index.update_states(changes)
    return [PolledRun(run, infos.get(run.run_id)) for run in runs]


def cancel_reason(index: Index, run: RunRecord, info: JobInfo) -> str:
    """`cancelled by you` (or `by NAME`) for a cancelled job, recorded as its reason once: sacct's
    `CANCELLED by UID`, else a cancel requested through hpctrain; empty when nobody is known."""
    if run.state == JobState.CANCELLED.value and run.reason.startswith(CANCELLED_BY):
        return run.reason  # decided at an earlier poll
    by_uid = re.fullmatch(r"CANCELLED by (\d+)", info.extra.get("slurm_state", "").strip())
    if by_uid:
        return CANCELLED_BY + user_name(int(by_uid[1]))
    if any(reason == CANCEL_REQUESTED for _, _, reason in index.history(run.run_id)):
        return CANCELLED_BY + "you"
    return ""


def user_name(uid: int) -> str:
    """`you` for this user, else the account's name (its uid where the login node has no such user)."""
    if uid == os.getuid():
        return "you"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _settle_preempted(run: RunRecord, info: JobInfo) -> JobInfo:
    """Preempted elements of a job that will not be requeued have ended: fold them as such."""
    preempted = info.state is JobState.PREEMPTED or JobState.PREEMPTED in info.elements.values()
    if not preempted:
        return info
    summary = spec_summary(run)
    if summary is None or summary.requeues:
        return info
    if info.elements:
        info.state = fold_elements(info.elements.values(), preempted_ends=True)
    if info.state is JobState.PREEMPTED and not info.reason:
        info.reason = "preempted; preemption.requeue is false"
    return info


def _from_run_dir(run: RunRecord, info: JobInfo) -> JobInfo:
    """Without accounting, a job that left the queue is judged by the exit code its script recorded
    (an array: each started element by its own, folded)."""
    root = RunDir(run.run_dir)
    codes = root.read_exit_codes()
    if codes and codes[-1].job_id == str(run.job_id):
        code = codes[-1].code
        state = JobState.COMPLETED if code == "0" else JobState.FAILED
        return JobInfo(info.job_id, state, exit_code=code, source="run dir (no accounting)")
    ends = {str(i): exit_state(root.element(i)) for i in root.elements()}
    states = {k: v for k, v in ends.items() if v is not None}
    if states and len(states) == len(ends):
        folded = fold_elements(states.values())
        return JobInfo(info.job_id, folded, source="run dir (no accounting)", elements=states)
    return info


def exit_state(element: RunDir) -> JobState | None:
    """An array element's end, from the exit code its batch script appended (its own job id)."""
    codes = element.read_exit_codes()
    if not codes:
        return None
    return JobState.COMPLETED if codes[-1].code == "0" else JobState.FAILED


def read_progress(run_dir: RunDir, brief: bool = False) -> Progress:
    """Latest training numbers from one run directory; never raises, whatever the files hold.

    With `brief`, a readable result.json is all that is read: it holds what the status table
    shows of an ended run (a poll over a thousand ended runs opens one file per run).
    """
    out = Progress()
    result = run_dir.read_result()
    if isinstance(result, Unreadable):
        out.unreadable.append(str(result))
    else:
        out.result = result
        if brief and result is not None:
            return out
    _read_metrics(run_dir, out)
    out.unmatched = unmatched_pattern(run_dir)
    for worker, latest in run_dir.read_worker_metrics().items():
        if isinstance(latest, Unreadable):
            out.unreadable.append(str(latest))
        else:
            out.workers[worker] = latest
    for report in run_dir.read_failures():
        if isinstance(report, Unreadable):
            out.unreadable.append(str(report))
        else:
            out.failures.append(report)
    return out


def unmatched_pattern(run_dir: RunDir) -> str:
    """One line when log-progress.json says the progress pattern matched none of the lines seen."""
    state = run_dir.read_log_progress()
    if not isinstance(state, LogProgressState) or not state.never_matched:
        return ""
    return f"progress pattern never matched: none of the {state.lines} lines rank 0 printed so far"


def _read_metrics(run_dir: RunDir, out: Progress) -> None:
    """The latest train, eval and event lines from the end, memory lines from the head; only the
    lines needed are decoded (status decodes a few lines per run, not a hundred)."""
    head, tail = run_dir.metric_lines()
    lines = head + tail
    where = str(run_dir.metrics)
    decoded: dict[int, MetricLine | Unreadable] = {}

    def line(at: int) -> MetricLine | Unreadable:
        if at not in decoded:
            decoded[at] = decode_line(lines[at], where)
        return decoded[at]

    scanned_since_train = 0
    for at in reversed(range(len(lines))):
        # An eval line is a few train lines back; a run without eval must not decode every line.
        if out.train and (out.eval or scanned_since_train >= LOOK_BACK):
            break
        if out.ranks is not None and lines[at].startswith(RANKS_LINE):
            continue  # one per log interval, up to tens of KiB: only the latest is decoded, or counted
        found = line(at) if lines[at].strip() else None
        scanned_since_train += out.train is not None
        if isinstance(found, TrainLine):
            out.train = out.train or found
        elif isinstance(found, EvalLine):
            out.eval = out.eval or found
        elif isinstance(found, EventLine):
            out.event = out.event or found
        elif isinstance(found, RankTimesLine):
            out.ranks = out.ranks or found
    # Memory lines come once per rank after the first step, before the first train line.
    for at in range(len(head)):
        found = line(at) if lines[at].strip() else None
        if isinstance(found, MemoryLine):
            out.memory[found.rank] = found
        elif isinstance(found, TrainLine | EvalLine):
            break
    bad = [x for x in decoded.values() if isinstance(x, Unreadable)]
    if bad:
        out.unreadable.append(f"{bad[0].path}: {len(bad)} unreadable line(s), e.g. {bad[0].reason}")


def progress(run_dir: Path | RunDir) -> Progress:
    return read_progress(run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir))


def failed_tasks(run_dir: Path | RunDir, max_tasks: int = MAX_RANGE) -> list[FailedTask]:
    """srun's own word on which tasks died, from the end of the batch log(s)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    return srun_task_errors(
        (line for log in run.batch_logs() for line in tail_lines(log, 200, below=run.top)), max_tasks
    )
