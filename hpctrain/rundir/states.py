"""The states a job is in, as the run record holds them and every backend reports them."""

from __future__ import annotations

import enum


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
    SUBMIT_FAILED = "SUBMIT_FAILED"
    """hpctrain's own: the scheduler never took the job (a run that is recorded, never polled)."""

    def __str__(self) -> str:  # printed as Slurm writes it, in tables and messages alike
        return self.value

    __format__ = str.__format__

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
        JobState.SUBMIT_FAILED,
    }
)
