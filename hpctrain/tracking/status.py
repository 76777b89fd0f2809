"""The status model: one poll of tracked runs, returned as typed run statuses that the CLI only formats.

`reconcile_statuses` asks the scheduler once per backend (hpctrain.tracking.poll), reads each run directory
and assembles a :class:`RunStatus`: state, progress, array elements, restarts, the watchdog's health
and who failed and why. `status --json` is these structs encoded; the table is drawn from them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import msgspec

from hpctrain.errors import HpctrainError, one_line
from hpctrain.rundir import MAX_JSON_BYTES, RestartSummary, RunDir, SweepRecord, read_json, tail_lines
from hpctrain.rundir.attempts import History, run_summary
from hpctrain.rundir.goodput import GoodputSplit, now_if_running, split
from hpctrain.rundir.names import ATTEMPTS, SWEEP
from hpctrain.scheduler.base import Blocked, JobInfo, JobState
from hpctrain.scheduler.slurm.task_errors import FailedTask
from hpctrain.tracking import health
from hpctrain.tracking.health import Health
from hpctrain.tracking.index import Index, RunRecord
from hpctrain.tracking.poll import (
    CANCELLED_BY,
    FAILURE_NAMES,
    PolledRun,
    Progress,
    ended,
    exit_state,
    failed_tasks,
    poll_and_record,
    read_progress,
)

# A poll loop never asks the controller more often than this: admins of shared clusters care.
MIN_INTERVAL_S = 5.0
# Failed ranks explained with their log tails; the rest are counted (a thousand dead ranks say no more).
SHOWN_FAILURES = 8
# Lines of a failed rank's log shown under it.
LOG_TAIL_LINES = 5
HANG_KILLED = "ended by the watchdog after the hang (Killed)"
# srun's word for a task that SIGTERM ended: what scancel sends every task of a cancelled job.
CANCEL_SIGNAL_WORD = "Terminated"


class NotTracked(HpctrainError):
    """A job id or run id that hpctrain has no record of."""

    exit_code = 1

    def __str__(self) -> str:
        return one_line(super().__str__())  # the keys are quoted as given: a newline stays escaped


class FailedRank(msgspec.Struct, omit_defaults=True):
    """One failed rank as status explains it: where, why (the runtime's report, else srun's word),
    and the last lines of its log."""

    rank: str
    node: str
    cause: str
    log_tail: list[str] = []


class FailedRanks(msgspec.Struct, omit_defaults=True):
    """Who failed in one run directory: the first ranks srun named, ranks that only the runtime
    reported, and how many more srun named (`failed_tasks` lists them all)."""

    named: list[FailedRank] = []
    reported: list[FailedRank] = []
    more: int = 0
    batch_log: str = ""
    """Where to look when neither srun nor the runtime named anyone."""


class Element(msgspec.Struct, omit_defaults=True):
    """One started element of a job array: its state and its own run directory's progress."""

    index: int
    state: str
    progress: Progress
    run_dir: str
    restarts: RestartSummary | None = None
    failed_ranks: FailedRanks | None = None


class RunStatus(msgspec.Struct, omit_defaults=True):
    """One tracked run as `hpctrain status` shows it; encoded, one entry of `status --json`."""

    job_id: str | None
    """The scheduler's job id; None when the submit failed before the scheduler gave one."""
    run_id: str
    """hpctrain's id of the run: its run directory's name."""
    name: str
    """The job's name (the spec's `name`)."""
    site: str
    """The site profile it was submitted with."""
    backend: str
    """The backend that submitted it (slurm, local...)."""
    state: JobState
    """The scheduler's state (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...)."""
    reason: str
    """Why it is in that state: Slurm's reason, or hpctrain's (a failed submit, a cancel)."""
    submitted_at: float
    """When it was submitted, seconds since the epoch."""
    run_dir: str
    """Its run directory."""
    nodes: str
    """Where it runs (the scheduler's node list); empty when not polled."""
    elapsed: str
    """Time in its allocation, as the scheduler prints it; empty when not polled."""
    exit_code: str
    """The scheduler's `EXIT:SIGNAL` once it ended; empty before."""
    source: str
    """Where the state came from (squeue, sacct, scontrol, local; `cache`: the index, not polled)."""
    progress: Progress
    """The latest train and eval lines, or the result of a run that ended."""
    elements: list[Element] = []
    """An array job's started elements, each with its own state and progress."""
    restarts: RestartSummary | None = None
    """Its attempts: restarts used and allowed, and why each attempt ended."""
    failed_tasks: list[FailedTask] | None = None
    """srun's word on every task that died (failed states only)."""
    health: Health | None = None
    """The watchdog's diagnosis and silent nodes, when there is any."""
    failed_ranks: FailedRanks | None = None
    """Who failed and why: each failed rank with its node, cause and error (failed states only)."""
    cancelled_by: str = ""
    """Who cancelled it: `you` (through `hpctrain cancel`, or sacct's `CANCELLED by` your uid), another
    user's name, or empty when it was not cancelled or nobody is known."""
    blocked: Blocked | None = None
    """A job still waiting that can never run as it is, or is likely never to (`certain` false): the
    cause (an ExcNodeList that leaves its partition too few nodes, a dependency that can no longer be
    met, Slurm's reason) and what to do; `blocked.warning()` is the line `status` prints."""
    goodput: GoodputSplit | None = None
    """Where the wall time went: scheduling, start-up, training, rollback, checkpoint blocking and
    detection (`status --json` and the API; not the views, which do not show it)."""


def select(keys: list[str], everything: bool = False, index: Index | None = None) -> list[RunRecord]:
    """The runs named by job id, run id (or its prefix) or job name (every run of that name, newest
    first); some keys unknown: a warning; all unknown: an error. Without keys, the recent runs."""
    index = index or Index()
    if keys:
        runs, missing = index.find(keys)
        if missing:
            named = [run for run in index.runs() if run.name in missing]
            known = {run.run_id for run in runs}
            runs += [run for run in named if run.run_id not in known]
            missing = [key for key in missing if not any(run.name == key for run in named)]
        if missing:
            message = f"not tracked by hpctrain: {', '.join(missing)} (see `hpctrain list`)"
            if not runs:
                raise NotTracked(message)
            print(f"hpctrain: warning: {message}", file=sys.stderr)
        return runs
    # Run directories whose submit was killed before recording them are shown as never submitted.
    if everything:
        index.adopt_unindexed()
        return index.runs()
    # Without --all: runs still active or ended within a day, read from the journal alone.
    index.adopt_unindexed(recent=True)
    return index.recent()


def reconcile_statuses(
    runs: list[RunRecord], brief: bool = False, index: Index | None = None, goodput: bool = True
) -> list[RunStatus]:
    """One poll: states from the scheduler, everything else from the run directories.

    With `brief` (the table of many runs), an ended run that did not fail and has a result is read
    no further than result.json, and only runs that failed, run or have elements are explained.
    `goodput`: also the goodput split (it reads the whole metrics file; never with `brief`).
    """
    polled = poll_and_record(index or Index(), runs)
    release_requeued_runs(polled)
    return [assemble(one, brief, goodput) for one in polled]


def wait_until_ended(
    runs: list[RunRecord],
    on_poll: Callable[[list[RunStatus], bool], None] | None = None,
    interval: float = MIN_INTERVAL_S,
    index: Index | None = None,
    goodput: bool = True,
) -> list[RunStatus]:
    """Poll until every run has ended; `on_poll(statuses, done)` sees each poll (e.g. to draw it).

    The first poll comes after one second (short jobs often end within seconds), then the delay
    doubles up to `interval`, never below MIN_INTERVAL_S. `goodput`: the last statuses carry the
    goodput split (the polls before need none).
    """
    interval = max(interval, MIN_INTERVAL_S)
    index = index or Index()
    delay = 1.0
    while True:
        statuses = reconcile_statuses(runs, index=index, goodput=False)
        done = all(ended(run) for run in runs)
        if done and goodput:
            for status, run in zip(statuses, runs, strict=True):
                status.goodput = goodput_split(run)
        if on_poll is not None:
            on_poll(statuses, done)
        if done:
            return statuses
        time.sleep(delay)
        delay = min(interval, delay * 2)


def release_requeued_runs(polled: list[PolledRun]) -> None:
    """Requeued runs held for Slurm's requeue delay start now; one whose batch host died, without
    the dead node (Backend.release_held): nothing inside the job is left to do it."""
    from hpctrain.scheduler import release_held

    release_held(
        (one.run.backend, RunDir(one.run.run_dir), one.info) for one in polled if one.info and one.run.job_id
    )


def goodput_split(run: RunRecord) -> GoodputSplit | None:
    """Where the run's wall time went so far."""
    return split(RunDir(run.run_dir, snapshot=True), run.submitted_at, now_if_running(ended(run)))


def assemble(polled: PolledRun, brief: bool = False, goodput: bool = True) -> RunStatus:
    """The typed status of one polled run (see `reconcile_statuses` for `brief` and `goodput`)."""
    run, info = polled.run, polled.info
    root = RunDir(run.run_dir, snapshot=True)
    failing = run.state in FAILURE_NAMES
    progress = read_progress(root, brief and not failing)
    status = RunStatus(
        job_id=run.job_id,
        run_id=run.run_id,
        name=run.name,
        site=run.site,
        backend=run.backend,
        state=run.state,
        reason=run.reason,
        submitted_at=run.submitted_at,
        run_dir=str(run.run_dir),
        nodes=info.nodes if info else "",
        elapsed=info.elapsed if info else "",
        exit_code=info.exit_code if info else "",
        source=info.source if info else "cache",
        progress=progress,
    )
    if info is not None and info.blocked is not None and not ended(run):
        status.blocked = info.blocked
    if run.state == JobState.CANCELLED.value and run.reason.startswith(CANCELLED_BY):
        status.cancelled_by = run.reason.removeprefix(CANCELLED_BY)
    if run.state == JobState.PENDING.value and (requeue := requeued(root)):
        slurm_says = run.reason if run.reason not in ("", "None") else ""
        status.reason = requeue + (f" ({slurm_says})" if slurm_says else "")
    if not brief or progress.result is None:
        status.elements = read_elements(root, info, array_trials(run, root))
    if not brief or failing or status.elements or progress.unreadable:
        status.restarts = run_summary(root)
    if failing:
        tasks = failed_tasks_of(root, run.state)
        status.failed_tasks = tasks
        # An array's own directory holds no training: its elements tell what failed.
        if not status.elements:
            status.failed_ranks = explain_failures(root, progress, status.restarts, tasks)
    if goodput and not brief:
        status.goodput = goodput_split(run)
    if not brief or failing or run.state == health.RUNNING:  # not a file read per ended run
        found = health.health(run.run_dir, run.state)
        status.health = found if msgspec.to_builtins(found) else None
    return status


def array_trials(run: RunRecord, root: RunDir) -> range | None:
    """The element folders that belong to this index entry: a sweep's root holds the trials of all its
    arrays, and the array whose run id ends `+OFFSET` (the first: none) holds trials OFFSET and on, as
    its array indices 0 and on. None: every folder is the run's own (a plain job array)."""
    if SWEEP not in root.names:
        return None
    record = read_json(root.sweep, SweepRecord, max_bytes=64 * MAX_JSON_BYTES, below=root.top)
    if not isinstance(record, SweepRecord):
        return None
    _, plus, suffix = run.run_id.rpartition("+")
    offset = int(suffix) if plus and suffix.isdigit() else 0
    chunk = next((c for c in record.arrays if c.offset == offset), None)
    return None if chunk is None else range(offset, offset + chunk.count)


# How a pending run that ran before came to wait again, by the outcome of its last attempt.
REQUEUED_AFTER = {
    "preempted": "the preemption or time-limit signal (checkpointed)",
    "node_failure": "a node failure",
    "hang": "a hang",
    "rank_failure": "a rank failure",
    "preflight": "a failed preflight",
    "grow_back": "a node came back (growing back)",
    "launch": "a failed launch",
}


def requeued(root: RunDir) -> str:
    """Why a pending run that has run before waits, and which attempt comes next (first: the table cuts
    a long reason): `attempt 2 next, requeued after a node failure`; empty for a run never started."""
    if ATTEMPTS not in root.names:
        return ""
    history = History.read(root)
    if not history.lines:
        return ""
    if history.open_attempt() is not None:  # started, never ended: its allocation went away under it
        cause = "its allocation ended mid-attempt (a node failure or a requeue)"
    elif history.ends:
        outcome = str(history.ends[-1].outcome)
        cause = REQUEUED_AFTER.get(outcome, outcome.replace("_", " "))
    else:
        return ""
    return f"attempt {history.next_attempt()} next, requeued after {cause}"


def read_elements(root: RunDir, info: JobInfo | None, trials: range | None = None) -> list[Element]:
    """Each started array element (of `trials` only, when given: one array of a sweep): its state from
    the scheduler or else its recorded exit code, its progress, restarts and, if it failed, who failed."""
    states = info.elements if info else {}
    offset = trials.start if trials is not None else 0
    out = []
    for index in root.elements():
        if trials is not None and index not in trials:
            continue
        element = root.element(index)
        found = states.get(str(index - offset)) or exit_state(element)
        state = found.value if found else "-"
        progress = read_progress(element)
        restarts = run_summary(element)
        failed = None
        if state in FAILURE_NAMES:
            failed = explain_failures(element, progress, restarts, failed_tasks_of(element, state))
        out.append(Element(index, state, progress, str(element.root), restarts, failed))
    return out


def failed_tasks_of(root: RunDir, state: str) -> list[FailedTask]:
    """srun's failed tasks; of a cancelled run, not those the cancel itself ended (SIGTERM: srun says
    `Terminated`), which failed nothing."""
    tasks = failed_tasks(root)
    if state == JobState.CANCELLED.value:
        return [task for task in tasks if task.error != CANCEL_SIGNAL_WORD]
    return tasks


def explain_failures(
    root: RunDir, progress: Progress, restarts: RestartSummary | None, tasks: list[FailedTask]
) -> FailedRanks:
    """srun's failed tasks joined with the runtime's failure reports (its error text wins); ranks
    the watchdog killed after a hang are said to be so, not to have failed on their own."""
    reported = {str(f.rank): f for f in progress.failures}
    hung = restarts is not None and restarts.last_outcome == "hang"
    named = []
    for task in tasks[:SHOWN_FAILURES]:
        report = reported.get(task.rank)
        cause = report.error if report else task.error
        if hung and not report and task.error == "Killed":
            cause = HANG_KILLED
        tail = (
            tail_lines(root.rank_log(task.rank), LOG_TAIL_LINES, below=root.top)
            if task.rank.isdigit()
            else []
        )
        named.append(FailedRank(task.rank, task.node, cause, tail))
    seen = {t.rank for t in tasks}
    only_reported = [
        FailedRank(rank, failure.hostname or "?", failure.error)
        for rank, failure in list(reported.items())[:SHOWN_FAILURES]
        if rank not in seen
    ]
    more = max(0, len(tasks) - SHOWN_FAILURES)
    return FailedRanks(named, only_reported, more, str(root.batch_log))
