"""The struct of every file the runtime writes into a run directory (msgspec; torch-free)."""

from typing import Any

import msgspec


class Unreadable(msgspec.Struct, frozen=True):
    """A file (or line) that exists but does not decode: shown as one line, never raised."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: unreadable ({self.reason})"


class _Line(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="kind"):
    time: float | None = None
    elapsed_s: float | None = None


class TrainLine(_Line, tag="train"):
    """A training progress line; the parameter-server fields are set by PS servers and workers."""

    step: int
    steps: int | None = None
    loss: float | None = None
    lr: float | None = None
    samples_per_s: float | None = None
    step_time_s: float | None = None
    peak_mem_mb: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    mode: str | None = None
    staleness_mean: float | None = None
    staleness_max: int | None = None
    workers_alive: int | None = None
    worker: int | None = None
    version: int | None = None
    compute_s: float | None = None
    wait_s: float | None = None
    data_share: float | None = None
    """Share of the interval's time spent fetching batches (rank 0): a loader that cannot keep up."""


class EvalLine(_Line, tag="eval"):
    step: int
    loss: float | None = None
    accuracy: float | None = None
    by: str | None = None


class MemoryLine(_Line, tag="memory"):
    """Bytes one rank holds (params, grads, optimizer), after the first optimizer step."""

    rank: int
    rank_bytes: dict[str, int] = {}
    peak_mem_mb: float | None = None


class EventLine(_Line, tag="event"):
    """A moment in the run (start, resumed, checkpoint, preempted, failed, done, worker_dropped...)."""

    event: str
    step: int | None = None
    path: str | None = None
    layout: str | None = None
    world_size: int | None = None
    launcher: str | None = None
    job_id: str | None = None
    restart_count: int | None = None
    requeue: bool | None = None
    wall_time_s: float | None = None
    save_s: float | None = None
    write_s: float | None = None
    written_s: float | None = None
    bytes: int | None = None
    problem: str | None = None
    error: str | None = None
    worker: int | None = None
    reason: str | None = None
    detail: dict[str, Any] | None = None
    """Fields this struct has no name for (kept, not lost)."""


class RankTimesLine(_Line, tag="ranks"):
    """Every rank's compute and collective-wait seconds over the last log interval (rank 0 writes it)."""

    step: int
    compute_s: list[float] = []
    wait_s: list[float] = []
    nodes: list[str] = []
    stragglers: list[int] = []


MetricLine = TrainLine | EvalLine | MemoryLine | EventLine | RankTimesLine
METRIC_KINDS: dict[str, type[_Line]] = {
    "train": TrainLine,
    "eval": EvalLine,
    "memory": MemoryLine,
    "event": EventLine,
    "ranks": RankTimesLine,
}


class WorkerStats(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One parameter-server worker at the end of training."""

    status: str = "running"
    reason: str = ""
    steps: int = 0
    samples: int = 0
    samples_per_s: float = 0.0
    loss: float | None = None


class Result(msgspec.Struct, kw_only=True, omit_defaults=True):
    """result.json: how training ended. One shape for every strategy; PS runs also set the PS fields."""

    status: str = "completed"
    step: int
    steps: int
    final_loss: float | None = None
    eval_loss: float | None = None
    eval_accuracy: float | None = None
    wall_time_s: float | None = None
    train_time_s: float | None = None
    samples: int | None = None
    samples_per_s: float | None = None
    step_time_median_s: float | None = None
    layout: str | None = None
    world_size: int | None = None
    mode: str | None = None
    servers: int | None = None
    workers: int | None = None
    nodes: dict[str, list[str]] | None = None
    staleness_mean: float | None = None
    staleness_max: int | None = None
    per_worker: dict[str, WorkerStats] | None = None


class FailureReport(msgspec.Struct, kw_only=True):
    """failures/rank-N.json: who failed, where, and why (the runtime's own error text)."""

    rank: int
    hostname: str = ""
    error_type: str = ""
    message: str = ""
    where: str | None = None
    time: float | None = None
    step: int | None = None
    """The training step the rank was computing (0-based), when the failure came from training."""
    attempt: int | None = None
    """HPCTRAIN_ATTEMPT of the training step (srun step) that failed."""

    @property
    def error(self) -> str:
        return f"{self.error_type}: {self.message}" if self.error_type else self.message


class RankBeat(msgspec.Struct, omit_defaults=True):
    """One rank in its node's heartbeat; times are the node's wall clock (seconds since the epoch)."""

    step: int
    phase: str
    time: float
    """The rank's last sign of life (its background thread ticks every second; a STOPped process stops)."""
    phase_since: float | None = None
    step_since: float | None = None
    """When `step` began: a step that has not advanced for long is what the watchdog looks for."""
    step_s: float | None = None
    """How long the rank's previous step took (None before it finished one: startup)."""
    pid: int | None = None


class Heartbeat(msgspec.Struct, kw_only=True, omit_defaults=True):
    """heartbeats/node-<name>.json: the last sign of life of every rank on one node."""

    node: str
    time: float
    ranks: dict[int, RankBeat] = {}
    attempt: int | None = None
    step_id: str | None = None
    """The Slurm step the ranks run in (what `scancel JOB.STEP` needs)."""
    interval: float | None = None
    """Seconds between writes of this file: older than a few intervals means the node is silent."""


class RankState(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Where one rank was when the watchdog looked."""

    rank: int
    node: str = ""
    step: int | None = None
    phase: str = ""
    idle_s: float | None = None
    silent_s: float | None = None
    """Seconds since the rank's last sign of life: a STOPped or frozen process stops ticking."""
    waiting_in: str = ""
    """What its stack shows it waiting in (all-reduce, barrier...), when it waits."""


class HangReport(msgspec.Struct, kw_only=True, omit_defaults=True):
    """failures/hang.json: the watchdog's diagnosis of a hang, written before it ends the step."""

    time: float
    summary: str
    step: int | None = None
    hung: list[RankState] = []
    waiting: list[RankState] = []
    timeout_s: float | None = None
    stacks: str | None = None
    attempt: int | None = None


class AttemptLine(msgspec.Struct, kw_only=True, omit_defaults=True):
    """attempts.jsonl: one line when a training step starts and one when it ends (restarts, reasons)."""

    attempt: int
    event: str
    time: float
    job_id: str = ""
    nodes: list[str] = []
    world_size: int | None = None
    outcome: str = ""
    reason: str = ""
    failed_nodes: list[str] = []
    step: int | None = None
    error: str = ""
    """End of a rank_failure: `Type: message` of the first rank that failed (a repeat is a bug)."""


class Record(msgspec.Struct, kw_only=True):
    """record.json: the run's own copy of its line in the login node's index."""

    run_id: str
    job_id: str | None
    name: str
    site: str
    backend: str
    submitted_at: float
    state: str
    state_at: float
    reason: str = ""


class SubmitInfo(msgspec.Struct, kw_only=True):
    """submit.json: how the run was submitted, to submit it again."""

    job: str
    site: str
    overrides: list[str] = []
    backend: str = ""
    cwd: str = ""


class _Preemption(msgspec.Struct, frozen=True):
    requeue: bool = True


class _JobPart(msgspec.Struct, frozen=True):
    array: str | None = None
    preemption: _Preemption | None = None


class _SitePart(msgspec.Struct, frozen=True):
    preemption: _Preemption | None = None


class SpecSummary(msgspec.Struct):
    """The few fields of spec.json the login side needs after submission (the rest is not decoded)."""

    job: _JobPart = _JobPart()
    site: _SitePart = _SitePart()

    @property
    def requeues(self) -> bool:
        """Whether a preempted run comes back (the job's setting, else the site's, else yes)."""
        chosen = self.job.preemption or self.site.preemption or _Preemption()
        return chosen.requeue

    @property
    def array(self) -> str | None:
        return self.job.array


class ExitCode(msgspec.Struct, frozen=True):
    """One line of exit-codes, appended by the batch script: `JOBID STATUS`."""

    job_id: str
    code: str
