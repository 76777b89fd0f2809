"""The lines of metrics.jsonl (and of a parameter-server worker's metrics file), tagged on `kind`."""

from typing import Any

import msgspec


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
    metrics: dict[str, float] = {}
    """Numbers this struct has no field for, by name: a command job's progress pattern groups
    (`epoch`, `grad_norm`) or the keywords of `hpctrain.client.step`."""


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


EVAL_FIELDS = {"eval_loss": "loss", "eval_accuracy": "accuracy"}
"""A sweep metric (``sweep.metric``) -> the field of an eval line that carries it."""


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
    """What happened: start, resumed, startup, checkpoint, checkpoint_corrupt, preempted, failed, done,
    shrunk, grew, straggler, worker_dropped.
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
    """Fields this struct has no name for (kept, not lost); startup: rank 0's start-up parts in
    seconds, `began` and `warm`."""


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
