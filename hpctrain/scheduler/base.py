"""The scheduler interface every backend implements, and the small enum that Slurm's states map to."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from hpctrain.errors import BackendError

if TYPE_CHECKING:
    from hpctrain.launch.render import BatchOptions


class JobState(str, enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    PREEMPTED = "PREEMPTED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    UNKNOWN = "UNKNOWN"

    @property
    def terminal(self) -> bool:
        """A state the job cannot leave (so its answer can be cached instead of asked again)."""
        return self in TERMINAL


TERMINAL = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.NODE_FAIL,
        JobState.OUT_OF_MEMORY,
    }
)

# Every state squeue or sacct prints (22.05 to 24.11), folded into the enum. PREEMPTED stays
# non-terminal: with --requeue a preempted job comes back (the watcher ends it when the spec says
# preemption.requeue: false).
SLURM_STATES: dict[str, JobState] = {
    "PENDING": JobState.PENDING,
    "CONFIGURING": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "REQUEUE_HOLD": JobState.REQUEUED,
    "REQUEUE_FED": JobState.REQUEUED,
    "REQUEUED": JobState.REQUEUED,
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


def array_element(raw_id: str) -> str | None:
    """`123_4` -> `4`, `123_[5-9]` -> `[5-9]`; None for a job that is no array element."""
    base, sep, element = raw_id.partition("_")
    return element if sep and base and element else None


def merge_component(found: dict[str, JobInfo], info: JobInfo, raw_id: str = "") -> None:
    """Fold one row into the job of its base id.

    Hetjob components: the most telling state wins. Array elements (`raw_id` like `123_4`): each
    keeps its own state and the job's state is their fold, terminal only when every element is.
    """
    current = found.get(info.job_id)
    element = array_element(raw_id)
    if element is not None:
        states = {**(current.elements if current else {}), element: info.state}
        worse = current is not None and _severity(current.state) >= _severity(info.state)
        shown = current if worse and current is not None else info
        found[info.job_id] = msgspec.structs.replace(
            shown, elements=states, state=fold_elements(states.values())
        )
        return
    if current is None or _severity(info.state) > _severity(current.state):
        found[info.job_id] = info


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
    ]
    return order.index(state)


class Backend(ABC):
    """Submit, poll many jobs at once, cancel."""

    name: str = "base"
    template: str = "sbatch.sh.j2"
    """The template (in templates/) that renders this backend's scripts."""

    @abstractmethod
    def submit(self, script: Path, run_dir: Path, batch: BatchOptions | None = None) -> str:
        """Submit a rendered batch script; return the job id. Raise BackendError on refusal.

        `batch` is the script's #SBATCH block as data (render.batch_options), for backends that
        hand options to the scheduler themselves; None for a script written by hand."""

    @abstractmethod
    def poll(self, job_ids: Iterable[str]) -> dict[str, JobInfo]:
        """The state of every given job, at a bounded cost whatever their number (one query)."""

    @abstractmethod
    def cancel(self, job_ids: Iterable[str]) -> None:
        """Cancel the given jobs."""

    def test_only(self, script: Path) -> str:
        """Ask the scheduler whether it would accept the script, without submitting it."""
        raise BackendError(f"backend {self.name} has no test-only submission")
