"""The scheduler interface every backend implements, and the folding of array and hetjob states.

The states themselves (JobState) belong to the run record, in hpctrain.rundir.states.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import msgspec

from hpctrain.errors import BackendError
from hpctrain.rundir import RunDir
from hpctrain.rundir.states import TERMINAL, JobState

if TYPE_CHECKING:
    from hpctrain import spec
    from hpctrain.scheduler.render import BatchOptions, DoctorJob


class Blocked(msgspec.Struct, frozen=True):
    """A pending job that can never run as it is (`certain`), or is likely never to: why, and what to do."""

    cause: str
    """What stops it: Slurm's reason, a dependency that can no longer be met, or node lists that leave
    its partition too few nodes (e.g. `its ExcNodeList node1,node2 leaves 0 of the 2 nodes of partition
    debug for a job of 2 nodes`)."""
    fix: str
    """What to do about it, e.g. `` `hpctrain cancel 12`, then submit it again ``."""
    certain: bool = True
    """False where it may still run: a limit or an account that an admin may change."""

    @property
    def verdict(self) -> str:
        """`can never run`, or `may never run` when not certain."""
        return "can never run" if self.certain else "may never run"

    def warning(self) -> str:
        """The one line status prints: `VERDICT: CAUSE; FIX`."""
        return f"{self.verdict}: {self.cause}; {self.fix}"


class JobInfo(msgspec.Struct):
    """What one poll knows of one job."""

    job_id: str
    state: JobState
    reason: str = ""
    exit_code: str = ""
    nodes: str = ""
    elapsed: str = ""
    source: str = ""
    """Where the answer came from (squeue, sacct, scontrol, local, cache): for `status --json`."""
    extra: dict[str, str] = msgspec.field(default_factory=dict)
    elements: dict[str, JobState] = msgspec.field(default_factory=dict)
    """Array jobs: the state of each element by index (`4`, or `[5-9]` for still pending ones)."""
    element_reasons: dict[str, str] = msgspec.field(default_factory=dict)
    """Array jobs: the scheduler's reason for each element that has one (a pending range's wait)."""
    blocked: Blocked | None = None
    """A pending job (or pending part of one: an array range, a hetjob component) that can never run."""


class Limits(msgspec.Struct):
    """What the cluster allows a sweep: array indices per array, and jobs this user may queue."""

    max_array_size: int
    max_submit_jobs: int | None = None
    queued: int = 0
    """Jobs (array elements each) this user has queued now; counted only when max_submit_jobs is set."""


class BatchRequest(msgspec.Struct, frozen=True):
    """A backend's dry run: the script it rendered for a run directory, and where it goes."""

    script: str
    path: Path
    run_dir: Path
    batch: BatchOptions | None
    """The script's #SBATCH block as data, for backends that hand options to the scheduler."""


AfterKind = Literal["afterok", "afterany", "afternotok"]
"""When a job that waits for others (a Slurm dependency) may start: when they all completed (afterok),
ended however (afterany) or failed (afternotok)."""
AFTER_KINDS: tuple[AfterKind, ...] = ("afterok", "afterany", "afternotok")
"""The values of AfterKind (`--after-kind` choices)."""


def base_job_id(raw_id: str) -> str:
    """`123_4`, `123_[5-9]`, `123+1` -> `123`."""
    return raw_id.split("_", 1)[0].split("+", 1)[0]


def array_element(raw_id: str) -> str | None:
    """`123_4` -> `4`, `123_[5-9]` -> `[5-9]`; None for a job that is no array element."""
    base, sep, element = raw_id.partition("_")
    return element if sep and base and element else None


def merge_component(found: dict[str, JobInfo], info: JobInfo, raw_id: str = "") -> None:
    """Fold one row into the job of its base id.

    Hetjob components: the most telling state wins. Array elements (`raw_id` like `123_4`): each
    keeps its own state and the job's state is their fold, terminal only when every element is.
    A part that can never run (`blocked`) marks the job, whichever part's state it shows.
    """
    current = found.get(info.job_id)
    element = array_element(raw_id)
    if element is not None:
        states = {**(current.elements if current else {}), element: info.state}
        reasons = {**(current.element_reasons if current else {})}
        if info.reason:
            reasons[element] = info.reason
        worse = current is not None and _severity(current.state) >= _severity(info.state)
        shown = current if worse and current is not None else info
        found[info.job_id] = msgspec.structs.replace(
            shown, elements=states, element_reasons=reasons, state=fold_elements(states.values())
        )
    elif current is None or _severity(info.state) > _severity(current.state):
        found[info.job_id] = info
    # One part that can never run (a pending range, a component) holds the whole job back.
    merged = found[info.job_id]
    merged.blocked = merged.blocked or info.blocked or (current.blocked if current else None)


def element_indices(element: str, count: int) -> list[int]:
    """`4` -> [4]; a pending range `[0-9%4]` / `[1,3-5]` -> its indices, bounded by the array's size."""
    if element.isascii() and element.isdigit():
        return [int(element)] if int(element) < count else []
    out: list[int] = []
    for part in element.strip("[]").split("%", 1)[0].split(","):
        low, _, high = part.partition("-")
        if low.isascii() and low.isdigit() and ((high.isascii() and high.isdigit()) or not high):
            out.extend(range(int(low), min(int(high or low), count - 1) + 1))
    return out


def incomplete_arrays(found: dict[str, JobInfo], sizes: Mapping[str, int]) -> set[str]:
    """Arrays (job id -> element count) of which the scheduler's queue no longer lists every element:
    the ones that left it are asked of accounting."""
    return {
        job_id
        for job_id, count in sizes.items()
        if job_id in found
        and len({i for key in found[job_id].elements for i in element_indices(key, count)}) < count
    }


def merge_accounting(queue: JobInfo, accounting: JobInfo) -> JobInfo:
    """An array seen in both: the queue's rows are the fresher, accounting fills in the elements it lost."""
    states = {**accounting.elements, **queue.elements}
    reasons = {**accounting.element_reasons, **queue.element_reasons}
    return msgspec.structs.replace(
        queue, elements=states, element_reasons=reasons, state=fold_elements(states.values())
    )


def fold_elements(states: Iterable[JobState], preempted_ends: bool = False) -> JobState:
    """One state for a job array: while any element can still change, the most active of those;
    once every element has ended, the most severe end."""
    states = list(states)
    if not states:
        return JobState.UNKNOWN
    done = TERMINAL | ({JobState.PREEMPTED} if preempted_ends else set())
    live = [s for s in states if s not in done]
    if live:
        return max(live, key=ACTIVITY.index)
    return max(states, key=_severity)


# Among states that can still change, which one describes an array best (the last wins).
ACTIVITY = [
    JobState.UNKNOWN,
    JobState.PREEMPTED,
    JobState.PENDING,
    JobState.REQUEUED,
    JobState.RUNNING,
]


def _severity(state: JobState) -> int:
    order = [
        JobState.UNKNOWN,
        JobState.COMPLETED,
        JobState.PENDING,
        JobState.REQUEUED,
        JobState.RUNNING,
        JobState.PREEMPTED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.OUT_OF_MEMORY,
        JobState.NODE_FAIL,
        JobState.FAILED,
        JobState.SUBMIT_FAILED,
    ]
    return order.index(state)


class Backend(ABC):
    """Prepare (a dry run), schedule, poll many jobs at once, cancel; the cluster's limits; held jobs."""

    name: str = "base"
    _template: str = "sbatch.sh.j2"
    """The template (in templates/) that renders this backend's scripts."""
    runs_doctor_job: bool = True
    """Whether `hpctrain doctor`'s preflight job (a Slurm cluster's check) can be submitted here."""

    def refuse(self, resolved: spec.Resolved) -> None:  # noqa: B027 - a hook: most backends run every job
        """Raise BackendError for a job this backend cannot run; by default it runs every job."""

    def prepare(
        self,
        resolved: spec.Resolved | DoctorJob,
        run_dir: Path,
        script: Path | None = None,
        array_offset: int = 0,
    ) -> BatchRequest:
        """Render the batch script for `run_dir` (to be written at `script`, by default the run's
        job.sbatch); nothing is written or asked. `array_offset`: the first trial of a sweep's chunk.
        A DoctorJob renders `hpctrain doctor`'s preflight job (templates/doctor.sh.j2)."""
        # Imported here, not above: render imports the spec and the templates, which a poll never
        # needs (test_architecture.py: test_polling_runs_loads_neither_the_spec_nor_the_templates).
        from hpctrain.scheduler.render import DoctorJob, batch_options, doctor_options, render, render_doctor

        path = script or RunDir(run_dir).script
        if isinstance(resolved, DoctorJob):
            if not self.runs_doctor_job:
                raise BackendError(
                    f"the doctor's preflight job checks a Slurm cluster, not the {self.name} backend"
                )
            text, batch = render_doctor(resolved, run_dir), doctor_options(resolved, run_dir)
            return BatchRequest(script=text, path=path, run_dir=run_dir, batch=batch)
        self.refuse(resolved)
        text = render(resolved, run_dir, template=self._template, array_offset=array_offset)
        return BatchRequest(
            script=text,
            path=path,
            run_dir=run_dir,
            batch=batch_options(resolved, run_dir, array_offset),
        )

    def schedule(self, request: BatchRequest) -> str:
        """Submit a prepared request whose script is written at request.path; return the job id."""
        return self.submit(request.path, request.run_dir, request.batch)

    @abstractmethod
    def submit(self, script: Path, run_dir: Path, batch: BatchOptions | None = None) -> str:
        """Submit a batch script; return the job id. Raise BackendError on refusal.

        `batch` is the script's #SBATCH block as data (render.batch_options), for backends that
        hand options to the scheduler themselves; None for a script written by hand."""

    @abstractmethod
    def poll(
        self, job_ids: Iterable[str], array_sizes: Mapping[str, int] | None = None
    ) -> dict[str, JobInfo]:
        """The state of every given job, at a bounded cost whatever their number (one query, and one
        accounting query for the jobs the queue no longer holds). Array rows fold into their job;
        `array_sizes` (job id -> element count) asks accounting too for arrays the queue lists in part."""

    @abstractmethod
    def cancel(self, job_ids: Iterable[str]) -> None:
        """Cancel the given jobs."""

    def jobs_carrying(self, run_ids: Iterable[str]) -> dict[str, str]:
        """The job id of each of `run_ids` whose job the scheduler (queue or accounting) knows by the
        run id it carries (`carrying_comment`). A backend whose submit cannot be cut short: none."""
        return {}

    def limits(self) -> Limits:
        """What the cluster allows a sweep; a backend without job arrays refuses."""
        raise BackendError(f"the {self.name} backend has no job arrays (use --backend slurm)")

    def release_held(self, held: Iterable[tuple[RunDir, JobInfo]]) -> list[str]:
        """Start requeued runs that the scheduler holds for its requeue delay (the pending state and
        reason of each is in its JobInfo); the job ids it released. A backend that never holds: none."""
        return []

    def test_only(self, script: Path) -> str:
        """Ask the scheduler whether it would accept the script, without submitting it."""
        raise BackendError(f"backend {self.name} has no test-only submission")
