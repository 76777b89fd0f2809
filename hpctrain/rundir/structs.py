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
    """When the line was written: the writer's wall clock, seconds since the epoch."""


class TrainLine(_Line, tag="train"):
    """Training progress, every `train.log_every` steps (rank 0, PS server 0, or a PS worker's own file)."""

    step: int
    """Steps done (for a PS server: the parameter version; for a PS worker: its own clock)."""
    steps: int | None = None
    """Steps the run is to do (`train.steps`)."""
    loss: float | None = None
    """Mean training loss over the interval, averaged over the ranks."""
    lr: float | None = None
    """Learning rate of the interval's last step."""
    samples_per_s: float | None = None
    """Global batch samples per second over the interval (a PS worker: its own samples)."""
    step_time_s: float | None = None
    """Mean seconds per step over the interval."""
    peak_mem_mb: float | None = None
    """Rank 0's peak memory so far: CUDA allocated on a GPU, resident set size on a CPU."""
    tokens_per_s: float | None = None
    """Tokens per second, for tasks that declare tokens per sample."""
    mfu: float | None = None
    """Model FLOPs utilisation against the GPU's dense bf16 peak (known GPUs only)."""
    mode: str | None = None
    """Parameter server: sync, async or bounded."""
    staleness_mean: float | None = None
    """Parameter server: mean versions a pushed gradient lagged behind, over the interval."""
    staleness_max: int | None = None
    """Parameter server: the largest lag over the interval."""
    workers_alive: int | None = None
    """Parameter server: workers not finished or dropped."""
    worker: int | None = None
    """Parameter-server worker lines: the worker's index."""
    version: int | None = None
    """Parameter-server worker lines: the parameter version it last pulled."""
    compute_s: float | None = None
    """Parameter-server worker lines: mean forward and backward seconds per step."""
    wait_s: float | None = None
    """Parameter-server worker lines: mean seconds per step spent pushing and pulling."""
    data_share: float | None = None
    """Share of the interval's time spent fetching batches (rank 0): a loader that cannot keep up."""


class EvalLine(_Line, tag="eval"):
    """An evaluation on the held-out split, every `train.eval_every` steps and at the end."""

    step: int
    """The step evaluated after."""
    loss: float | None = None
    """Mean evaluation loss."""
    accuracy: float | None = None
    """Share of correct predictions, for classification tasks."""
    by: str | None = None
    """Who evaluated, where it is not rank 0 (a parameter-server worker)."""


class MemoryLine(_Line, tag="memory"):
    """Bytes one rank holds (params, grads, optimizer), after the first optimizer step."""

    rank: int
    """The rank measured."""
    rank_bytes: dict[str, int] = {}
    """Bytes by kind: params, grads, optimizer (this rank's shards only)."""
    peak_mem_mb: float | None = None
    """The rank's peak memory at that point, as in the train lines."""


class EventLine(_Line, tag="event"):
    """A moment in the run (start, resumed, checkpoint, preempted, failed, done, worker_dropped...)."""

    event: str
    """What happened: start, resumed, checkpoint, checkpoint_corrupt, preempted, failed, done, shrunk, grew,
    straggler, worker_dropped.
    """
    step: int | None = None
    """The step it happened at."""
    path: str | None = None
    """The checkpoint saved, resumed from or found corrupt."""
    layout: str | None = None
    """start, resumed: the strategy (single, ddp, fsdp, tp, pp, or ps)."""
    world_size: int | None = None
    """start, resumed, shrunk, grew: ranks in the attempt."""
    launcher: str | None = None
    """start, resumed: srun, torchrun or mpi."""
    job_id: str | None = None
    """start, resumed: the Slurm job id."""
    restart_count: int | None = None
    """start, resumed: SLURM_RESTART_COUNT, the job's requeues so far."""
    requeue: bool | None = None
    """preempted: whether the job goes back to the queue."""
    wall_time_s: float | None = None
    """done: seconds from the runtime's start to the end of training."""
    save_s: float | None = None
    """checkpoint: seconds training was blocked by the save."""
    write_s: float | None = None
    """checkpoint: seconds from the save's start until every file was written."""
    written_s: float | None = None
    """checkpoint: seconds from the save's start until it was published (renamed into place)."""
    bytes: int | None = None
    """checkpoint: bytes rank 0 staged for writing (its shards; other ranks write theirs)."""
    problem: str | None = None
    """checkpoint_corrupt: what is wrong with it."""
    error: str | None = None
    """failed: `Type: message` of the exception."""
    worker: int | None = None
    """worker_dropped: the parameter-server worker."""
    reason: str | None = None
    """worker_dropped, straggler: why, in words."""
    detail: dict[str, Any] | None = None
    """Fields this struct has no name for (kept, not lost)."""


class RankTimesLine(_Line, tag="ranks"):
    """Every rank's compute and collective-wait seconds over the last log interval (rank 0 writes it)."""

    step: int
    """The step the interval ended at."""
    compute_s: list[float] = []
    """By rank: the interval's seconds not spent waiting for peers (data, forward, backward, optimizer)."""
    wait_s: list[float] = []
    """By rank: seconds waiting for the gradient all-reduce after its own backward ended."""
    nodes: list[str] = []
    """By rank: the node it runs on."""
    stragglers: list[int] = []
    """Ranks flagged as slower than their peers."""


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
    """finished, dropped, or running (it had not finished when the servers stopped)."""
    reason: str = ""
    """Why it was dropped."""
    steps: int = 0
    """Gradients it pushed."""
    samples: int = 0
    """Samples it trained on."""
    samples_per_s: float = 0.0
    """Its own throughput."""
    loss: float | None = None
    """Its mean training loss."""


class Result(msgspec.Struct, kw_only=True, omit_defaults=True):
    """result.json: how training ended. One shape for every strategy; PS runs also set the PS fields."""

    status: str = "completed"
    """completed, or failed (a parameter server that stopped before the last step)."""
    step: int
    """Steps done."""
    steps: int
    """Steps the run was to do."""
    final_loss: float | None = None
    """The last train line's loss."""
    eval_loss: float | None = None
    """The final evaluation's loss."""
    eval_accuracy: float | None = None
    """The final evaluation's accuracy."""
    wall_time_s: float | None = None
    """Seconds from the runtime's start to the end, this attempt."""
    train_time_s: float | None = None
    """Seconds of those spent in training steps."""
    samples: int | None = None
    """Samples trained on, this attempt."""
    samples_per_s: float | None = None
    """samples / train_time_s."""
    step_time_median_s: float | None = None
    """Median seconds per step, the first step left out."""
    layout: str | None = None
    """The strategy (single, ddp, fsdp, tp, pp, or ps)."""
    world_size: int | None = None
    """Ranks in the last attempt."""
    mode: str | None = None
    """Parameter server: sync, async or bounded."""
    servers: int | None = None
    """Parameter server: server processes."""
    workers: int | None = None
    """Parameter server: worker processes."""
    nodes: dict[str, list[str]] | None = None
    """Parameter server: {"servers": hosts, "workers": hosts}."""
    staleness_mean: float | None = None
    """Parameter server: mean lag of the gradients applied, in versions."""
    staleness_max: int | None = None
    """Parameter server: the largest lag applied."""
    per_worker: dict[str, WorkerStats] | None = None
    """Parameter server: each worker's end, by worker index."""


class FailureReport(msgspec.Struct, kw_only=True):
    """failures/rank-N.json: who failed, where, and why (the runtime's own error text)."""

    rank: int
    """The global rank that failed."""
    hostname: str = ""
    """The node it ran on."""
    error_type: str = ""
    """The exception's class name."""
    message: str = ""
    """The exception's text (at most 2,000 characters)."""
    where: str | None = None
    """`file:line in function: code` of the innermost frame."""
    time: float | None = None
    """When, seconds since the epoch."""
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
    """The step the rank is in."""
    phase: str
    """What it is doing: startup, data, forward, backward, optimizer, collective, checkpoint, eval."""
    time: float
    """The rank's last sign of life (its background thread ticks every second; a STOPped process stops)."""
    phase_since: float | None = None
    """When `phase` began."""
    step_since: float | None = None
    """When `step` began: a step that has not advanced for long is what the watchdog looks for."""
    step_s: float | None = None
    """How long the rank's previous step took (None before it finished one: startup)."""
    pid: int | None = None
    """The rank's process id on its node (for py-spy)."""


class Heartbeat(msgspec.Struct, kw_only=True, omit_defaults=True):
    """heartbeats/node-<name>.json: the last sign of life of every rank on one node."""

    node: str
    """The node's name."""
    time: float
    """When the file was written."""
    ranks: dict[int, RankBeat] = {}
    """Every rank on the node, by global rank."""
    attempt: int | None = None
    """HPCTRAIN_ATTEMPT of the training step the ranks belong to."""
    step_id: str | None = None
    """The Slurm step the ranks run in (what `scancel JOB.STEP` needs)."""
    interval: float | None = None
    """Seconds between writes of this file: older than a few intervals means the node is silent."""


class RankState(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Where one rank was when the watchdog looked."""

    rank: int
    """The global rank."""
    node: str = ""
    """Its node."""
    step: int | None = None
    """The step it was in."""
    phase: str = ""
    """The phase it was in (as in RankBeat)."""
    idle_s: float | None = None
    """Seconds its step had not advanced."""
    silent_s: float | None = None
    """Seconds since the rank's last sign of life: a STOPped or frozen process stops ticking."""
    waiting_in: str = ""
    """What its stack shows it waiting in (all-reduce, barrier...), when it waits."""


class HangReport(msgspec.Struct, kw_only=True, omit_defaults=True):
    """failures/hang.json: the watchdog's diagnosis of a hang, written before it ends the step."""

    time: float
    """When the hang was declared."""
    summary: str
    """One line: which rank stopped where, and who waits for it."""
    step: int | None = None
    """The step the hung ranks were in."""
    hung: list[RankState] = []
    """The ranks that stopped advancing."""
    waiting: list[RankState] = []
    """The ranks waiting for them."""
    timeout_s: float | None = None
    """The limit they passed: max(hang_timeout, step_time_factor x median step time)."""
    stacks: str | None = None
    """The folder that holds every rank's stacks (failures/stacks/)."""
    attempt: int | None = None
    """HPCTRAIN_ATTEMPT of the training step that hung."""


class AttemptLine(msgspec.Struct, kw_only=True, omit_defaults=True):
    """attempts.jsonl: one line when a training step starts and one when it ends (restarts, reasons)."""

    attempt: int
    """The attempt's number, from 0, over the whole run (requeues included)."""
    event: str
    """start or end."""
    time: float
    """When, seconds since the epoch."""
    job_id: str = ""
    """The Slurm job id."""
    nodes: list[str] = []
    """start: the nodes the step runs on."""
    world_size: int | None = None
    """start: ranks in the step."""
    outcome: str = ""
    """end: completed, preempted, hang, rank_failure, node_failure, preflight or failed."""
    reason: str = ""
    """end: why, in words."""
    failed_nodes: list[str] = []
    """end: the nodes to blame (excluded from later attempts)."""
    step: int | None = None
    """end: the training step reached."""
    error: str = ""
    """End of a rank_failure: `Type: message` of the first rank that failed (a repeat is a bug)."""


class Record(msgspec.Struct, kw_only=True):
    """record.json: the run's own copy of its line in the login node's index."""

    run_id: str
    """The run directory's name."""
    job_id: str | None
    """The Slurm job id; None when submission failed."""
    name: str
    """The job's name."""
    site: str
    """The site profile it was submitted to."""
    backend: str
    """The backend that submitted it: slurm (the CLI tools), pyslurm or local."""
    submitted_at: float
    """When, seconds since the epoch."""
    state: str
    """The last state seen (Slurm's state name, or SUBMIT_FAILED)."""
    state_at: float
    """When that state was seen."""
    reason: str = ""
    """Slurm's reason, or why submission failed."""


class SubmitInfo(msgspec.Struct, kw_only=True):
    """submit.json: how the run was submitted, to submit it again."""

    job: str
    """The job file, as given."""
    site: str
    """The site, as given."""
    overrides: list[str] = []
    """The --set overrides, in order."""
    backend: str = ""
    """The --backend chosen, if any."""
    cwd: str = ""
    """The directory submit ran in."""


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
