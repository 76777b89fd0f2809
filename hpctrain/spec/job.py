"""JobSpec: what a job asks for (resources, training, layout, faults), with field docs as help text.

The sweep section (``sweep:``) has its own module, ``sweep.py``.
"""

import re
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from hpctrain.rundir.attempts import FAULTS
from hpctrain.spec.base import (
    Base,
    Count,
    EnvValue,
    NodeName,
    NonNegative,
    Positive,
    Seconds,
    ShellLine,
    SlurmMemory,
    SlurmTime,
    SlurmWord,
    Whole,
)
from hpctrain.spec.layout import DIMS, Layout, check_request
from hpctrain.spec.slurm_values import (
    CONTAINER_IMAGE,
    CONTAINER_PATH,
    ENTRYPOINT,
    ENV_NAME,
    LINE,
    MAIL_TYPES,
    NAME,
    PATTERN_WORDS,
    SBATCH_VALUE,
    ArrayIndices,
    Comment,
    Dependency,
    Line,
    MailUser,
    check,
    check_env,
    sbatch_option_problem,
    settle,
    signal_name,
    spec_memory,
    spec_time,
)
from hpctrain.spec.sweep import Sweep

# torchao's Float8LinearRecipeName values, plus tensorwise with fast accumulation in backward as well
FP8Recipe = Literal["tensorwise", "tensorwise-fast", "rowwise", "rowwise_with_gw_hp"]
DEFAULT_FP8_RECIPE: FP8Recipe = "tensorwise-fast"

# ----------------------------------------------------------------------------------------------
# Job spec
# ----------------------------------------------------------------------------------------------


class Resources(Base):
    nodes: Count = 1
    """Number of nodes."""
    gpus_per_node: Whole = 0
    """GPUs per node; 0 runs on CPUs with gloo."""
    tasks_per_node: int | None = None
    """Processes per node; defaults to gpus_per_node (or 1 on CPU jobs)."""
    cpus_per_task: Count = 1
    """CPU cores per task (per GPU)."""
    mem: SlurmMemory | None = None
    """Memory per node: Slurm syntax (16G, 4000M) or a whole number of megabytes (4000, as sbatch reads it);
    site default if unset.
    """
    time: SlurmTime = "00:30:00"
    """Time limit: a whole number of minutes (30, as sbatch reads it), HH:MM:SS, D-HH or D-HH:MM:SS. MM:SS is
    refused as ambiguous (Slurm reads 1:30 as 90 seconds): write 00:01:30 or 01:30:00.
    """
    partition: SlurmWord | None = None
    """Partition; site default if unset."""
    account: SlurmWord | None = None
    """Account to charge."""
    qos: SlurmWord | None = None
    """Quality of service."""
    constraint: SlurmWord | None = None
    """Node feature constraint (--constraint)."""
    exclusive: bool = False
    """Ask for whole nodes (--exclusive)."""
    gpu_type: SlurmWord | None = None
    """GPU type (--gres=gpu:TYPE:N); must be the partition's; default: the partition's."""
    exclude: list[NodeName] = []
    """Nodes never to run on (--exclude)."""
    nodelist: list[NodeName] = []
    """Nodes the job must include (--nodelist); at most `nodes` of them."""
    reservation: SlurmWord | None = None
    """Run inside this reservation."""
    licenses: SlurmWord | None = None
    """Licenses to hold (--licenses=matlab:1)."""

    def __post_init__(self) -> None:
        settle(self, "time", spec_time)
        if self.mem is not None:
            settle(self, "mem", spec_memory)
        if self.tasks_per_node is not None and self.tasks_per_node < 1:
            raise ValueError("tasks_per_node: must be >= 1")
        if len(self.nodelist) > self.nodes:
            raise ValueError(f"nodelist: {len(self.nodelist)} nodes named, the job asks for {self.nodes}")
        both = sorted(set(self.nodelist) & set(self.exclude))
        if both:
            raise ValueError(f"nodelist: {', '.join(both)} also in exclude")

    @property
    def ntasks_per_node(self) -> int:
        if self.tasks_per_node is not None:
            return self.tasks_per_node
        return self.gpus_per_node or 1


class ParameterServer(Base):
    servers: Count = 1
    """Server processes holding parameter shards."""
    mode: Literal["sync", "async", "bounded"] = "sync"
    """sync: average all workers per step; async: apply on arrival; bounded: async with at most `staleness`
    steps of lag.
    """
    staleness: Whole = 2
    """Staleness limit for bounded mode."""
    heterogeneous: bool = True
    """Submit servers as their own Slurm hetjob component; false runs them in the workers' allocation."""
    partition: SlurmWord | None = None
    """Partition for the servers."""
    nodes: Count = 1
    """Nodes for the server component."""
    cpus_per_server: Count = 1
    """CPU cores per server."""
    mem: SlurmMemory | None = None
    """Memory per server node: Slurm syntax (16G) or a whole number of megabytes."""
    worker_timeout: Seconds = 30.0
    """Seconds of silence after which async servers drop a worker."""
    feeding: Literal["between-graph", "in-graph"] = "between-graph"
    """between-graph: each worker reads its own data shard; in-graph: server 0 reads the data and sends each
    worker its batch with its reply.
    """

    def component(self, rank: int) -> str:
        """`server 0` or `worker 1`: what global rank `rank` is (ranks 0..servers-1 serve, the rest work)."""
        return f"server {rank}" if rank < self.servers else f"worker {rank - self.servers}"

    def __post_init__(self) -> None:
        if self.mem is not None:
            settle(self, "mem", spec_memory)


class Parallel(Base):
    """Parallel dimensions; their product is the world size (one dimension may be -1 = the rest)."""

    dp: int = -1
    """Data-parallel replicas (DDP); -1 fills the rest."""
    fsdp: int = 1
    """Fully sharded (FSDP2) degree; -1 fills the rest."""
    tp: int = 1
    """Tensor-parallel degree, inside one node."""
    pp: int = 1
    """Pipeline stages."""
    pp_schedule: Literal["gpipe", "1f1b", "interleaved1f1b"] = "1f1b"
    """Pipeline schedule."""
    microbatches: Count = 4
    """Pipeline microbatches per step."""
    reshard_after_forward: bool = True
    """FSDP: free gathered weights after forward (ZeRO-3) or keep (ZeRO-2)."""
    cpu_offload: bool = False
    """FSDP: keep parameters, gradients and optimizer state in host memory (FSDP2's CPUOffloadPolicy; the
    optimizer step runs on the CPU). Needs fsdp sharding, no pp.
    """
    ps: ParameterServer | None = None
    """Parameter-server training instead of collectives."""

    def __post_init__(self) -> None:
        check_request(self.degrees)
        # (dp -1 with fsdp and tp 1 is the ddp request; a resolved layout names every degree)
        plain_ddp = self.dp == -1 and self.fsdp == 1 and self.tp == 1
        if self.cpu_offload and (plain_ddp or self.pp != 1 or self.ps is not None):
            raise ValueError(
                "cpu_offload is FSDP2's CPUOffloadPolicy: it needs fsdp sharding and no pp or ps "
                "(e.g. parallel: {dp: 1, fsdp: -1, cpu_offload: true})"
            )

    @property
    def degrees(self) -> dict[str, int]:
        """The requested degree of every dim (-1: the rest of the world)."""
        return {name: getattr(self, name) for name in DIMS}

    def layout(self, world_size: int, tasks_per_node: int | None = None) -> Layout:
        """The validated layout of these dims on ``world_size`` tasks; LayoutError names the dim."""
        return Layout.plan(self.degrees, world_size, tasks_per_node)


SHORTHANDS: dict[str, Parallel] = {
    "ddp": Parallel(),
    "fsdp": Parallel(dp=1, fsdp=-1),
    "tp": Parallel(dp=1, tp=-1),
    "pp": Parallel(dp=1, pp=-1),
    "ps": Parallel(ps=ParameterServer()),
}


class Train(Base):
    """What the runtime does inside the allocation."""

    entrypoint: Annotated[str, Meta(pattern=ENTRYPOINT)]
    """module:function returning an hpctrain.runtime.task.Task."""
    parallel: Literal["ddp", "fsdp", "tp", "pp", "ps"] | Parallel = "ddp"
    """Shorthand (ddp, fsdp, tp, pp, ps) or explicit dims {dp, fsdp, tp, pp, ...}."""
    steps: Count = 100
    """Optimizer steps to train."""
    batch_size: Count = 32
    """Global batch size (samples per step)."""
    grad_accum: Count = 1
    """Micro-steps accumulated per optimizer step."""
    lr: Positive = 1e-3
    """Peak learning rate."""
    weight_decay: NonNegative = 0.0
    """AdamW weight decay."""
    warmup_steps: Whole = 0
    """Linear warm-up steps."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    """LR decay."""
    grad_clip: Positive | None = None
    """Clip gradient norm to this value (> 0)."""
    seed: int = 0
    """Seed for model init, data order and dropout."""
    deterministic: bool = False
    """Deterministic algorithms and data order (bitwise-repeatable runs)."""
    precision: Literal["auto", "fp32", "bf16", "fp8"] = "auto"
    """auto = bf16 autocast on GPU, fp32 on CPU; fp8 = torchao float8 matmuls for the large linear layers
    (H100/H200, needs torchao), bf16 autocast for the rest.
    """
    fp8_recipe: FP8Recipe = DEFAULT_FP8_RECIPE
    """With precision fp8: torchao's scaling recipe. tensorwise-fast (default) is tensorwise with fast
    accumulation in all three matmuls (1.16x bf16 on the 944M GPT, loss within 1% after 200 steps);
    tensorwise accumulates the backward matmuls precisely (1.13x); rowwise and rowwise_with_gw_hp scale per
    row (slower on H100/H200 for GPT-sized layers).
    """
    activation_checkpointing: Literal["none", "selective", "full"] = "none"
    """Recompute activations in backward per block (Task.shard_units): selective keeps matmul and attention
    outputs, full keeps only block inputs.
    """
    compile: bool = False
    """torch.compile the model."""
    compile_cache: str | None = None
    """Folder of the inductor and Triton compile caches, shared by every attempt of the run, so that a
    restart does not compile again: unset = the run directory's compile-cache/; a relative path is taken
    inside the run directory; ~ and $VARS are expanded on the node. The job's env entries
    TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR, when given, win.
    """
    log_every: Count = 10
    """Steps between metrics lines."""
    tensorboard: bool | None = None
    """Rank 0 also writes TensorBoard event files into the run directory's tensorboard/ (one curve across
    requeues). Unset: when the tensorboard package is installed (the `observe` extra), silently not
    otherwise; true: a warning when it is missing; false: never."""
    wandb: str | None = None
    """W&B project rank 0 also logs to: one W&B run per hpctrain run (id = run id), resumed after requeues and
    restarts (needs wandb; WANDB_MODE=offline works without a server).
    """
    eval_every: Whole = 0
    """Steps between evaluations; 0 = at the end."""
    checkpoint_every: Whole = 0
    """Steps between checkpoints; 0 = end only."""
    keep_checkpoints: Count = 2
    """Checkpoints kept on disk."""
    memory_checkpoint_every: Whole | None = None
    """Steps between checkpoints into node memory (/dev/shm), each rank's copy also held by a rank on
    another node; a restart after a crashed rank or a lost node loads the newest one when it is newer than
    the newest disk checkpoint. Training waits only for the copy to host memory. Unset: as often as keeps
    that wait under 1% of training time and the background store (write, send to the peer) under 10% of the
    time between saves (timed at the first three); 0 = off. DDP and single-process layouts (fsdp, tp and pp
    restart from disk).
    """
    timeout_s: Annotated[int, Meta(ge=10)] = 120
    """Collective timeout: a dead peer ends the job after this long."""
    export_final: bool = False
    """Rank 0 writes the full final weights to final_model.pt in the run dir."""
    options: dict[str, Any] = {}
    """Free-form settings handed to the entrypoint (model size...)."""

    @property
    def parallel_dims(self) -> Parallel:
        return SHORTHANDS[self.parallel] if isinstance(self.parallel, str) else self.parallel


class Preemption(Base):
    signal: str = "USR1"
    """Signal Slurm sends before the time limit (USR1, SIGTERM...)."""
    lead_time: Whole = 90
    """Seconds before the time limit that the signal comes."""
    requeue: bool = True
    """Checkpoint and requeue on the signal."""
    grace: Seconds = 60.0
    """Command jobs: seconds the ranks get after the signal to save and exit before they are ended (and
    the job requeues)."""

    def __post_init__(self) -> None:
        check("signal", signal_name, self.signal)


Fault = Literal[tuple(fault.value for fault in FAULTS)]  # type: ignore[valid-type]
"""The spec's spelling of rundir.attempts.FAULTS: msgspec decodes a Literal of their values."""


def every_fault() -> list[Fault]:  # type: ignore[valid-type]
    return [fault.value for fault in FAULTS]


class Restart(Base):
    """Recover by itself from the last good checkpoint when a fault ends the training step."""

    max: Whole = 3
    """Restarts allowed over the whole run (0: the first fault ends the job)."""
    on: list[Fault] = msgspec.field(default_factory=every_fault)  # type: ignore[valid-type]
    """Faults that lead to a restart: hang (the watchdog saw no progress), rank_failure (a rank exited or
    raised), node_failure (a node stopped answering).
    """
    exclude_failed_nodes: bool = True
    """Never run again on a node that stopped answering, or whose ranks hung or failed twice (ExcNodeList);
    one hung or failed process restarts on the same nodes."""
    shrink: bool = True
    """After a node loss, go on with the nodes left in the allocation (same global batch, more gradient
    accumulation) instead of going back to the queue.
    """
    min_nodes: Count | None = None
    """Fewest nodes to go on with when shrinking; default: 1."""
    warm_standby: bool = False
    """Keep a second srun step ready on the attempt's nodes, its tasks with torch and the runtime already
    imported, so that a restart on the same nodes skips start-up (srun and fork launchers). Costs one more
    process per rank (host memory) and its imports' CPU once per attempt.
    """
    standby_delay: NonNegative = 60.0
    """Seconds at the most that the warm standby waits for the attempt beside it to train (every rank has
    finished a step; without the watchdog's heartbeats, rank 0 has written metrics) before its steps start:
    on a node with few cores their start would slow that attempt's.
    """


NODE_SILENT_MIN_S = 10.0
"""The least silence of a node's heartbeat file before the watchdog asks whether the node still answers."""
ENDING_MARGIN_S = 60.0
"""What the watchdog needs after a hang's allowance to notice it, collect stacks and end the step: the
collective timeout and NCCL's own monitor wait this much longer, so the watchdog names the hung rank first."""


class Watchdog(Base):
    """Find the rank that stopped advancing, name it, collect every rank's stack, end the step."""

    enabled: bool = True
    """Watch the ranks' heartbeats for hangs."""
    hang_timeout: Seconds = 30.0
    """Seconds: a rank whose step has not advanced for max(hang_timeout, step_time_factor x median step time)
    is hung.
    """
    step_time_factor: Positive = 10.0
    """How many median step times a step may take before it is a hang."""
    startup_timeout: Seconds = 600.0
    """Seconds allowed until the first steps (imports, compile, checkpoint load)."""
    slow_phase_timeout: Seconds = 600.0
    """Seconds allowed for slow phases: checkpoint saves, evaluation."""
    stopped_timeout: Annotated[float, Meta(ge=1.0)] | None = 10.0
    """Seconds without a heartbeat tick (ticks come 4 times a second) after which a rank that has
    finished a step, and neither saves a checkpoint nor evaluates, is stopped or frozen: hung at
    once, whatever `hang_timeout`. None: only `hang_timeout`'s allowance.
    """
    heartbeat_interval: Annotated[float, Meta(ge=0.5)] = 5.0
    """Seconds between a node's heartbeat writes into the run directory (one file per node, whatever its rank
    count).
    """

    @property
    def node_silent_after(self) -> float:
        """A node file older than this: the node (or every rank on it) has stopped."""
        return max(3 * self.heartbeat_interval, self.heartbeat_interval + NODE_SILENT_MIN_S)


ContainerRuntime = Literal["pyxis", "oci", "apptainer", "none"]
CONTAINER_RUNTIMES: tuple[ContainerRuntime, ...] = ("pyxis", "oci", "apptainer")
"""The runtimes a site profile can list (`none` needs nothing)."""
_MOUNT = re.compile(r"\A(/[A-Za-z0-9_./+@=~\-]*)(?::(/[A-Za-z0-9_./+@=~\-]*))?(?::(ro|rw))?\Z")
# A local squashfs file that pyxis would read as a registry name unless it starts with / or ./.
_SQUASHFS_SUFFIXES = (".sqsh", ".squashfs", ".sqfs")


class Mount(msgspec.Struct, frozen=True):
    """One bind mount, as `container.mounts` writes it: HOST[:CONTAINER][:ro|rw]."""

    source: str
    target: str
    readonly: bool

    @classmethod
    def parse(cls, text: str) -> "Mount":
        found = _MOUNT.match(text)
        if found is None:
            raise ValueError(
                f"{text!r} is not HOST[:CONTAINER][:ro|rw] with absolute paths of letters, digits and "
                "_./+@=~-"
            )
        source, target, mode = found.groups()
        return cls(source, target or source, mode == "ro")


class Container(Base):
    """Run the ranks inside a container; the batch script, supervisor, watchdog and requeue stay on the
    host (docs/containers.md)."""

    runtime: ContainerRuntime = "none"
    """pyxis: srun --container-image (pyxis/enroot); oci: srun --container with an OCI bundle (Slurm's
    oci.conf); apptainer: apptainer exec inside each task (untested on a real Apptainer); none: no
    container. The site profile's `container_runtimes` must list it."""
    image: Annotated[str, Meta(pattern=CONTAINER_IMAGE)] | None = None
    """pyxis: a registry image (nvcr.io#nvidia/pytorch:24.05-py3) or an absolute .sqsh path; oci: the
    absolute path of the bundle folder on every node; apptainer: a .sif path or docker://... reference.
    The image must hold Python, torch and hpctrain at the submitting version (preflight checks)."""
    mounts: list[str] = []
    """Bind mounts HOST[:CONTAINER][:ro|rw] (pyxis, apptainer); the run directory is always mounted at its
    own path. oci: mounts come from the bundle's config.json."""
    workdir: Annotated[str, Meta(pattern=CONTAINER_PATH)] | None = None
    """Working directory of the ranks inside the container (pyxis, apptainer); default: the runtime's."""
    env: list[Annotated[str, Meta(pattern=ENV_NAME)]] = []
    """Host variables whose values replace the image's own (pyxis --container-env, apptainer's
    APPTAINERENV_); every other variable of the job reaches the ranks as the runtime passes it."""
    writable: bool = False
    """Let the ranks write into the container's file system (pyxis --container-writable, apptainer
    --writable-tmpfs); writes are lost when the step ends. oci: set root.readonly in the bundle."""
    python: Annotated[str, Meta(pattern=CONTAINER_IMAGE)] = "python3"
    """The interpreter inside the container that runs the ranks."""

    def __post_init__(self) -> None:
        for text in self.mounts:
            check("mounts", Mount.parse, text)
        if self.runtime == "none":
            if self.image is not None:
                raise ValueError("image: set, but runtime is none; name the runtime (pyxis, oci, apptainer)")
            return
        if self.image is None:
            raise ValueError(f"image: the {self.runtime} runtime needs an image")
        local = self.image.endswith(_SQUASHFS_SUFFIXES) or self.image.endswith(".sif")
        if (self.runtime == "oci" or local) and not self.image.startswith("/"):
            # pyxis takes `x.sqsh` for a registry image (pyxis#127); srun --container needs a path.
            raise ValueError(f"image: {self.image!r} must be an absolute path on the nodes")
        if self.runtime == "oci":
            for field, value in (
                ("mounts", self.mounts),
                ("workdir", self.workdir),
                ("writable", self.writable),
            ):
                if value:
                    raise ValueError(
                        f"{field}: Slurm's OCI support takes it from the bundle's config.json, not from srun"
                    )

    @property
    def enabled(self) -> bool:
        return self.runtime != "none"

    @property
    def bind_mounts(self) -> list[Mount]:
        return [Mount.parse(text) for text in self.mounts]


class Resume(Base):
    """Arguments added to a command in an attempt that finds its checkpoint."""

    if_exists: Annotated[str, Meta(min_length=1, pattern=LINE)]
    """A path (relative to the workdir; a glob; $HPCTRAIN_CHECKPOINT_DIR and other variables expanded on the
    node) whose existence means there is something to resume from."""
    args: list[Annotated[str, Meta(pattern=LINE)]]
    """Arguments appended to the command when `if_exists` matches (e.g. [--resume]); placeholders
    {HPCTRAIN_CHECKPOINT_DIR} and {match} (the newest match) are filled in."""

    def __post_init__(self) -> None:
        if not self.args:
            raise ValueError("args: give the arguments to add (e.g. [--resume])")


class Progress(Base):
    """Progress from rank 0's output: matching lines become metrics lines (status, report, sweeps)."""

    pattern: str | None = None
    """A Python regular expression with named groups: `step` (required), `loss`, `lr` and others."""
    preset: str | None = None
    """A ready pattern by name instead (see docs/scripts.md): step-loss, key-value, hf-trainer."""
    total_steps: Count | None = None
    """Steps the script is to do: status's total and ETA."""
    tensorboard: bool | None = None
    """Rank 0 also writes the parsed metrics as TensorBoard event files into the run directory's
    tensorboard/ (one curve across restarts and requeues). Unset: when the tensorboard package is installed
    (the `observe` extra), silently not otherwise; true: a warning when it is missing; false: never."""

    def __post_init__(self) -> None:
        from hpctrain.rundir.log_progress import compile_progress

        try:
            compile_progress(self.pattern, self.preset)
        except ValueError as err:
            raise ValueError(str(err).removeprefix("progress: ").removeprefix("progress.")) from None


class Code(Base):
    """What code the ranks run."""

    snapshot: bool | None = None
    """Copy the workdir's source into the run directory at submit and run from there (default for command
    jobs), so restarts, requeues and sweep trials run what was submitted; false runs in place. The rule of
    what is copied is in docs/scripts.md."""


CommandLine = str | list[Annotated[str, Meta(pattern=LINE)]]

SLURM_TASK_LAUNCHERS = ("srun", "fork")
"""Launchers whose ranks are Slurm tasks of one step (srun's own, or forked with srun's variables): one
rank per GPU, and a warm standby's tasks can take their place."""


class JobSpec(Base):
    name: Annotated[str, Meta(pattern=NAME)]
    """Job name (letters, digits, . _ -)."""
    train: Train | None = None
    """The training the runtime does (a Task); a job names either `train` or `command`."""
    command: CommandLine | None = None
    """Your own program, which each rank runs with torchrun's environment (docs/scripts.md): a string
    (`python train.py --batch_size=4`) or a list of words; a job names either `train` or `command`."""
    workdir: Line | None = None
    """Where a command runs: default, the job file's folder (a job built in Python: the current folder)."""
    resume: Resume | None = None
    """Command jobs: arguments added when a checkpoint exists."""
    progress: Progress | None = None
    """Command jobs: step and loss read from rank 0's output."""
    code: Code = Code()
    """Command jobs: the code snapshot."""
    resources: Resources = Resources()
    """What to ask Slurm for."""
    launcher: Literal["srun", "fork", "torchrun", "mpi"] = "srun"
    """srun: one task per GPU; fork: one srun task per node imports torch, the runtime and the task module
    once, then forks one rank per GPU (a cold start costs one import per node, not one per rank); torchrun:
    one torchrun per node; mpi: srun with the site's MPI plugin, ranks from mpi4py.
    """
    env: dict[str, EnvValue] = {}
    """Environment variables for every task."""
    setup: list[ShellLine] = []
    """Shell lines run before launch (module loads, exports); run as written. A venv activated here does
    not change the job's Python: name its interpreter in `python`."""
    python: Line | None = None
    """The Python that runs hpctrain and every rank in the job (a venv's bin/python); default: the site's
    `python`, else the one that ran `hpctrain submit`. The batch script checks that it imports hpctrain."""
    array: ArrayIndices | None = None
    """Job array indices, Slurm syntax (0-7%2)."""
    dependency: Dependency | None = None
    """Slurm dependency (afterok:123)."""
    preemption: Preemption | None = None
    """Signal before the time limit, and requeue; site default if unset."""
    begin: SlurmWord | None = None
    """Start no earlier than this (--begin: now+1hour, 2026-01-31T08:00)."""
    comment: Comment | None = None
    """Free text shown by squeue/sacct (--comment): letters, digits, spaces, .,:+@%=/-_[]."""
    mail_type: list[Literal[MAIL_TYPES]] = []  # type: ignore[valid-type]
    """When Slurm mails (--mail-type): BEGIN, END, FAIL, REQUEUE, ALL, TIME_LIMIT_90..."""
    mail_user: MailUser | None = None
    """Who gets the mail (--mail-user); default: the submitting user."""
    sbatch: dict[str, str | int | bool] = {}
    """Other sbatch options, {option: value} without `--` (true: a flag); options hpctrain sets itself are
    refused.
    """
    restart: Restart = Restart()
    """Restart by itself after a hang, a rank failure or a lost node."""
    watchdog: Watchdog = Watchdog()
    """Hang detection (heartbeats, stacks)."""
    preflight: bool | None = None
    """Check nodes and an all-reduce before training; a bad node is excluded and the job requeued. Default: on
    for multi-node GPU jobs.
    """
    sweep: Sweep | None = None
    """Hyper-parameter sweep; submit with `hpctrain sweep`."""
    container: Container = Container()
    """Run the ranks in a container (pyxis/enroot, Slurm's OCI support, Apptainer): docs/containers.md."""

    def __post_init__(self) -> None:
        if (self.train is None) == (self.command is None):
            raise ValueError(
                "a job names either train (an hpctrain Task) or command (your own program)"
                + (", not both" if self.train is not None else "; it names neither")
            )
        if self.command is not None:
            check("command", command_words, self.command)
        elif self.resume is not None or self.progress is not None:
            raise ValueError(f"{'resume' if self.resume else 'progress'}: only command jobs take it")
        check_env("env", self.env)
        for key, value in self.sbatch.items():
            problem = sbatch_option_problem(key)
            if problem:
                raise ValueError(f"sbatch: {problem}")
            if value is False:
                raise ValueError(f"sbatch: {key}: false is ambiguous; leave the option out instead")
            if isinstance(value, str) and not re.fullmatch(SBATCH_VALUE, value):
                raise ValueError(f"sbatch: {key}: {value!r} may hold only {PATTERN_WORDS[SBATCH_VALUE]}")

    @property
    def snapshot(self) -> bool:
        """Whether the ranks run from a copy of the workdir made at submit."""
        return self.command is not None and self.code.snapshot is not False

    @property
    def command_words(self) -> list[str]:
        """The command as a list of words ([] for a train job)."""
        return [] if self.command is None else command_words(self.command)


def command_words(command: str | list[str]) -> list[str]:
    """A command's words: a string is split as a shell would (quotes, no expansion); never empty."""
    import shlex

    if isinstance(command, str):
        if re.search(r"[\x00-\x1f\x7f]", command):
            raise ValueError("one line of text, no control characters")
        try:
            words = shlex.split(command)
        except ValueError as err:
            raise ValueError(f"{command!r}: {err}") from None
    else:
        words = list(command)
    if not words or not words[0]:
        raise ValueError("empty; name the program to run (e.g. python train.py)")
    return words
