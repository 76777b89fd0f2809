"""The struct of every JSON file of a run directory, and of an unreadable one (msgspec; torch-free).

The metrics lines are in lines.py.
"""

from pathlib import Path
from typing import Annotated

import msgspec

from hpctrain.rundir.states import JobState


class Unreadable(msgspec.Struct, frozen=True):
    """A file (or line) that exists but does not decode: shown as one line, never raised."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: unreadable ({self.reason})"


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


class LogProgressState(msgspec.Struct, kw_only=True, omit_defaults=True):
    """log-progress.json: how rank 0's output met a command job's progress pattern (rewritten every few
    seconds while it prints), so that `status` can say when the pattern never matched."""

    pattern: str = ""
    """The regular expression lines are matched with."""
    lines: int = 0
    """Lines of rank 0's output seen, this attempt."""
    matched: int = 0
    """Of those, lines that matched and became metrics lines."""
    step: int | None = None
    """The step of the last matching line."""
    time: float | None = None
    """When the file was written, seconds since the epoch."""

    @property
    def never_matched(self) -> bool:
        return self.lines > 0 and self.matched == 0


class FunctionOutcome(msgspec.Struct, kw_only=True, omit_defaults=True):
    """function/rank-N.json: how a function job's call ended on rank N (rank 0's value: value.pkl)."""

    rank: int
    """The global rank that called the function."""
    node: str = ""
    """The node it ran on."""
    time: float | None = None
    """When the call ended, seconds since the epoch."""
    returned: bool = False
    """Whether the function returned (rank 0's value is then in value.pkl); false: it raised."""
    error_type: str = ""
    """The exception's class name, when it raised (or when its value could not be pickled)."""
    message: str = ""
    """The exception's text."""
    traceback: str = ""
    """The exception's traceback as Python prints it, from the remote process."""


SIGNALLED = "signal"
"""FailureReport.error_type of a rank that a signal ended, which could not report itself."""


class FailureReport(msgspec.Struct, kw_only=True):
    """failures/rank-N.json: who failed, where, and why (the runtime's own error text)."""

    rank: int
    """The global rank that failed."""
    hostname: str = ""
    """The node it ran on."""
    error_type: str = ""
    """The exception's class name; `signal` when a signal ended the rank (written by the fork launcher)."""
    message: str = ""
    """The exception's text (at most 2,000 characters); for `signal`, the signal as srun words it (Killed)."""
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
    """What it is doing: startup, data, forward, backward, optimizer, collective, checkpoint (to disk), eval,
    snapshot (a checkpoint into node memory)."""
    time: float
    """The rank's last sign of life (a thread ticks it 4 times a second; a STOPped process stops)."""
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
    allocated: float | None = None
    """start, the first attempt of an allocation: when the allocation began (the supervisor's first
    call in it), seconds since the epoch."""
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
    fault_time: float | None = None
    """end of a fault: when the fault happened, as its evidence dates it (the first failure report,
    the hang's last advance, the first rank to fall silent), seconds since the epoch."""


class RestartSummary(msgspec.Struct, kw_only=True):
    """What `status` shows of a run's restarts (and --json and the run record carry)."""

    restarts: int
    """Restarts after a fault so far (hang, rank failure, lost node)."""
    max: int | None = None
    """restart.max of the run's spec."""
    reasons: list[str] = []
    """Each restart's cause in words (`hang at step 130`, `node_failure node2`)."""
    excluded: list[str] = []
    """Nodes excluded from later attempts."""
    attempts: int = 0
    """Attempts started (training steps), requeues included."""
    last_outcome: str = ""
    """How the latest attempt ended (as AttemptLine.outcome)."""
    last_reason: str = ""
    """Why, in words."""
    last_failure: str = ""
    """The latest fault's diagnosis in words (the watchdog's, for a hang, with where the stacks are)."""
    budget_spent: bool = False
    """The latest fault found no restart left."""
    shrunk: str = ""
    """`running shrunk on 1 of 2 nodes (node1)` (or `ended shrunk on ...`) when the latest attempt ran
    on fewer nodes than the job asked for."""


class RunRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One run: its line in the login node's index (index.jsonl, with `"op": "add"`) and its own
    record.json in the run directory. Lines and records of earlier versions decode as this."""

    run_id: Annotated[str, msgspec.Meta(min_length=1)]
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
    state: JobState
    """The last state seen (Slurm's state folded, or SUBMIT_FAILED)."""
    state_at: float
    """When that state was seen."""
    reason: str = ""
    """Slurm's reason, or why submission failed."""
    run_dir: Path = Path()
    """The run directory, as the index knows it (record.json of early versions has none)."""
    restarts: RestartSummary | None = None
    """The restart history as of this state change (record.json of runs that recorded attempts)."""


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


class FileSum(msgspec.Struct, frozen=True):
    """One file of a checkpoint as it was written."""

    size: int
    """Bytes."""
    crc32: str
    """CRC32 of the contents, 8 hex digits."""


class CheckpointManifest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """checkpoints/step-N/manifest.json: every file of a complete checkpoint, written last.

    A folder whose files do not match it (truncated, missing, changed) is corrupt and never loaded.
    """

    step: int
    """The training step saved (for a parameter server: the parameter version)."""
    files: dict[str, FileSum] = {}
    """Each file's size and CRC32, by its path in the folder."""
    servers: int | None = None
    """Parameter server: the servers whose shards make up the checkpoint (one `server-N.pt` each)."""


class NodeFacts(msgspec.Struct, kw_only=True):
    """What one rank's preflight saw on its node; `problems` FAIL the node, `warnings` only report."""

    node: str
    """The node's name."""
    rank: int
    """The global rank that looked."""
    local_rank: int
    """Its rank on the node."""
    python: str
    """The Python version there."""
    hpctrain: str
    """The hpctrain version there."""
    gpus_asked: int
    """GPUs Slurm gave the node."""
    gpus_seen: int
    """GPUs the rank could see."""
    gpu_source: str
    """How they were counted: torch.cuda, or the gres device files."""
    ib_ports: list[str] = []
    """InfiniBand ports that are up."""
    problems: list[str] = []
    """What fails the node."""
    warnings: list[str] = []
    """What is reported without failing it."""
    node_busbw_gbps: float = 0.0
    """Bus bandwidth of an all-reduce among the node's own ranks, GB/s."""
    node_seconds: float = 0.0
    """Seconds of the node's fastest all-reduce."""
    global_busbw_gbps: float = 0.0
    """Bus bandwidth of the all-reduce over every rank, GB/s."""


class NodeVerdict(msgspec.Struct):
    """The preflight's verdict on one node."""

    problems: list[str] = []
    """Why it fails; empty: it passed."""


class PreflightReport(msgspec.Struct, kw_only=True):
    """preflight.json: the in-job preflight's checks of every node, written by rank 0."""

    seconds: float
    """Seconds the checks took inside the training processes."""
    backend: str
    """nccl or gloo."""
    ranks: int
    """Ranks that took part."""
    size_mb: float
    """The all-reduce's message size, MB."""
    busbw_gbps: float
    """The slowest rank's bus bandwidth over every rank, GB/s."""
    nodes: dict[str, NodeVerdict] = {}
    """The verdict by node."""
    bad_nodes: list[str] = []
    """The nodes that failed (written to preflight-exclude when the job is requeued without them)."""
    requeue: bool = False
    """Whether the job requeues itself without the bad nodes."""
    no_requeue_because: str | None = None
    """Why it does not, when nodes failed (too few would be left, for example)."""
    facts: list[NodeFacts] = []
    """What every rank saw."""


# A sweep's files: sweep.json in its root, stopped.json in a trial's folder.


SweepValue = str | int | float | bool
"""One value of a swept setting."""


class Trial(msgspec.Struct, frozen=True):
    """One point of a sweep's grid: its index (its array-N/ folder) and its settings."""

    index: int
    params: dict[str, SweepValue]


class ArrayChunk(msgspec.Struct, kw_only=True):
    """One sbatch of the sweep: trials offset .. offset+count-1 as array indices 0 .. count-1."""

    offset: int
    count: int
    throttle: int | None = None
    after: int | None = None
    """The chunk (by position) this one waits for: how --max-parallel holds across several arrays."""
    job_id: str | None = None

    @property
    def array(self) -> str:
        return f"0-{self.count - 1}" + (f"%{self.throttle}" if self.throttle else "")


class SweepRecord(msgspec.Struct, kw_only=True):
    """sweep.json: what was swept, how it was submitted, and where each trial lives."""

    sweep_id: str
    """The sweep's run id (its root's name)."""
    name: str
    """The job's name."""
    site: str
    """The site profile."""
    backend: str
    """The backend that submitted it."""
    submitted_at: float
    """When, seconds since the epoch."""
    metric: str
    """The metric trials are ranked by (a result or eval field)."""
    mode: str
    """min or max: which end of the metric is best."""
    max_parallel: int | None = None
    """At most this many trials run at once (--max-parallel)."""
    params: list[str]
    """The swept settings, as dotted keys."""
    trials: list[Trial]
    """Every trial: its index and its settings."""
    arrays: list[ArrayChunk]
    """The job arrays the trials went out as."""

    def chunk_of(self, trial: int) -> ArrayChunk:
        for chunk in self.arrays:
            if chunk.offset <= trial < chunk.offset + chunk.count:
                return chunk
        raise IndexError(trial)


class Stopped(msgspec.Struct, kw_only=True):
    """stopped.json: why early stopping ended this trial."""

    step: int
    """The step at which the trial was compared."""
    metric: str
    """The metric compared."""
    value: float
    """The trial's metric there."""
    median: float
    """The median of its peers' metric at that step."""
    peers: int
    """How many trials it was compared with."""
    reason: str
    """Why, in words."""
