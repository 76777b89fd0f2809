"""JobSpec: what a job asks for (resources, training, layout, faults), with field docs as help text.

The sweep section (``sweep:``) has its own module, ``sweep.py``.
"""

import re
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from hpctrain.layout import DIMS, Layout, check_request
from hpctrain.slurm_values import (
    MAIL_TYPES,
    NAME,
    PATTERN_WORDS,
    SBATCH_VALUE,
    ArrayIndices,
    Comment,
    Dependency,
    MailUser,
    check,
    check_env,
    memory_mb,
    sbatch_option_problem,
    signal_name,
    time_minutes,
)
from hpctrain.spec.base import Base, Count, EnvValue, NodeName, Seconds, ShellLine, SlurmWord
from hpctrain.spec.sweep import Sweep

# torchao's Float8LinearRecipeName values, plus tensorwise with fast accumulation in backward as well
FP8Recipe = Literal["tensorwise", "tensorwise-fast", "rowwise", "rowwise_with_gw_hp"]
DEFAULT_FP8_RECIPE: FP8Recipe = "tensorwise-fast"

# ----------------------------------------------------------------------------------------------
# Job spec
# ----------------------------------------------------------------------------------------------


class Resources(Base):
    nodes: Annotated[int, Meta(ge=1, description="Number of nodes.")] = 1
    gpus_per_node: Annotated[int, Meta(ge=0, description="GPUs per node; 0 runs on CPUs with gloo.")] = 0
    tasks_per_node: Annotated[
        int | None,
        Meta(description="Processes per node; defaults to gpus_per_node (or 1 on CPU jobs)."),
    ] = None
    cpus_per_task: Annotated[int, Meta(ge=1, description="CPU cores per task (per GPU).")] = 1
    mem: Annotated[
        str | None, Meta(description="Memory per node, Slurm syntax (16G); site default if unset.")
    ] = None
    time: Annotated[str, Meta(description="Time limit, Slurm syntax (HH:MM:SS, D-HH:MM).")] = "00:30:00"
    partition: Annotated[SlurmWord | None, Meta(description="Partition; site default if unset.")] = None
    account: Annotated[SlurmWord | None, Meta(description="Account to charge.")] = None
    qos: Annotated[SlurmWord | None, Meta(description="Quality of service.")] = None
    constraint: Annotated[SlurmWord | None, Meta(description="Node feature constraint (--constraint).")] = (
        None
    )
    exclusive: Annotated[bool, Meta(description="Ask for whole nodes (--exclusive).")] = False
    gpu_type: Annotated[
        SlurmWord | None,
        Meta(description="GPU type (--gres=gpu:TYPE:N); must be the partition's; default: the partition's."),
    ] = None
    exclude: Annotated[list[NodeName], Meta(description="Nodes never to run on (--exclude).")] = []
    nodelist: Annotated[
        list[NodeName], Meta(description="Nodes the job must include (--nodelist); at most `nodes` of them.")
    ] = []
    reservation: Annotated[SlurmWord | None, Meta(description="Run inside this reservation.")] = None
    licenses: Annotated[SlurmWord | None, Meta(description="Licenses to hold (--licenses=matlab:1).")] = None

    def __post_init__(self) -> None:
        check("time", time_minutes, self.time)
        if self.mem is not None:
            check("mem", memory_mb, self.mem)
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
    servers: Annotated[int, Meta(ge=1, description="Server processes holding parameter shards.")] = 1
    mode: Annotated[
        Literal["sync", "async", "bounded"],
        Meta(
            description="sync: average all workers per step; async: apply on arrival; "
            "bounded: async with at most `staleness` steps of lag."
        ),
    ] = "sync"
    staleness: Annotated[int, Meta(ge=0, description="Staleness limit for bounded mode.")] = 2
    heterogeneous: Annotated[
        bool,
        Meta(
            description="Submit servers as their own Slurm hetjob component; false runs them in "
            "the workers' allocation."
        ),
    ] = True
    partition: Annotated[SlurmWord | None, Meta(description="Partition for the servers.")] = None
    nodes: Annotated[int, Meta(ge=1, description="Nodes for the server component.")] = 1
    cpus_per_server: Annotated[int, Meta(ge=1, description="CPU cores per server.")] = 1
    mem: Annotated[str | None, Meta(description="Memory per server node (Slurm syntax).")] = None
    worker_timeout: Annotated[
        Seconds, Meta(description="Seconds of silence after which async servers drop a worker.")
    ] = 30.0
    feeding: Annotated[
        Literal["between-graph", "in-graph"],
        Meta(
            description="between-graph: each worker reads its own data shard; in-graph: server 0 "
            "reads the data and sends each worker its batch with its reply."
        ),
    ] = "between-graph"


class Parallel(Base):
    """Parallel dimensions; their product is the world size (one dimension may be -1 = the rest)."""

    dp: Annotated[int, Meta(description="Data-parallel replicas (DDP); -1 fills the rest.")] = -1
    fsdp: Annotated[int, Meta(description="Fully sharded (FSDP2) degree; -1 fills the rest.")] = 1
    tp: Annotated[int, Meta(description="Tensor-parallel degree, inside one node.")] = 1
    pp: Annotated[int, Meta(description="Pipeline stages.")] = 1
    pp_schedule: Annotated[
        Literal["gpipe", "1f1b", "interleaved1f1b"], Meta(description="Pipeline schedule.")
    ] = "1f1b"
    microbatches: Annotated[int, Meta(ge=1, description="Pipeline microbatches per step.")] = 4
    reshard_after_forward: Annotated[
        bool, Meta(description="FSDP: free gathered weights after forward (ZeRO-3) or keep (ZeRO-2).")
    ] = True
    cpu_offload: Annotated[
        bool,
        Meta(
            description="FSDP: keep parameters, gradients and optimizer state in host memory (FSDP2's "
            "CPUOffloadPolicy; the optimizer step runs on the CPU). Needs fsdp sharding, no pp."
        ),
    ] = False
    ps: Annotated[
        ParameterServer | None, Meta(description="Parameter-server training instead of collectives.")
    ] = None

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

    entrypoint: Annotated[
        str,
        Meta(
            pattern=r"\A[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*\Z",
            description="module:function returning an hpctrain.runtime.task.Task.",
        ),
    ]
    parallel: Annotated[
        Literal["ddp", "fsdp", "tp", "pp", "ps"] | Parallel,
        Meta(description="Shorthand (ddp, fsdp, tp, pp, ps) or explicit dims {dp, fsdp, tp, pp, ...}."),
    ] = "ddp"
    steps: Annotated[int, Meta(ge=1, description="Optimizer steps to train.")] = 100
    batch_size: Annotated[int, Meta(ge=1, description="Global batch size (samples per step).")] = 32
    grad_accum: Annotated[int, Meta(ge=1, description="Micro-steps accumulated per optimizer step.")] = 1
    lr: Annotated[float, Meta(gt=0, description="Peak learning rate.")] = 1e-3
    weight_decay: Annotated[float, Meta(ge=0, description="AdamW weight decay.")] = 0.0
    warmup_steps: Annotated[int, Meta(ge=0, description="Linear warm-up steps.")] = 0
    lr_schedule: Annotated[Literal["constant", "cosine"], Meta(description="LR decay.")] = "constant"
    grad_clip: Annotated[
        Annotated[float, Meta(gt=0)] | None, Meta(description="Clip gradient norm to this value (> 0).")
    ] = None
    seed: Annotated[int, Meta(description="Seed for model init, data order and dropout.")] = 0
    deterministic: Annotated[
        bool, Meta(description="Deterministic algorithms and data order (bitwise-repeatable runs).")
    ] = False
    precision: Annotated[
        Literal["auto", "fp32", "bf16", "fp8"],
        Meta(
            description="auto = bf16 autocast on GPU, fp32 on CPU; fp8 = torchao float8 matmuls for the "
            "large linear layers (H100/H200, needs torchao), bf16 autocast for the rest."
        ),
    ] = "auto"
    fp8_recipe: Annotated[
        FP8Recipe,
        Meta(
            description="With precision fp8: torchao's scaling recipe. tensorwise-fast (default) is "
            "tensorwise with fast accumulation in all three matmuls (1.16x bf16 on the 944M GPT, loss within "
            "1% after 200 steps); tensorwise accumulates the backward matmuls precisely (1.13x); rowwise and "
            "rowwise_with_gw_hp scale per row (slower on H100/H200 for GPT-sized layers)."
        ),
    ] = DEFAULT_FP8_RECIPE
    activation_checkpointing: Annotated[
        Literal["none", "selective", "full"],
        Meta(
            description="Recompute activations in backward per block (Task.shard_units): selective keeps "
            "matmul and attention outputs, full keeps only block inputs."
        ),
    ] = "none"
    compile: Annotated[bool, Meta(description="torch.compile the model.")] = False
    log_every: Annotated[int, Meta(ge=1, description="Steps between metrics lines.")] = 10
    tensorboard: Annotated[
        bool,
        Meta(
            description="Rank 0 also writes TensorBoard event files into the run directory's tensorboard/ "
            "(one curve across requeues; needs the tensorboard package)."
        ),
    ] = True
    wandb: Annotated[
        str | None,
        Meta(
            description="W&B project rank 0 also logs to: one W&B run per hpctrain run (id = run id), "
            "resumed after requeues and restarts (needs wandb; WANDB_MODE=offline works without a server)."
        ),
    ] = None
    eval_every: Annotated[int, Meta(ge=0, description="Steps between evaluations; 0 = at the end.")] = 0
    checkpoint_every: Annotated[int, Meta(ge=0, description="Steps between checkpoints; 0 = end only.")] = 0
    keep_checkpoints: Annotated[int, Meta(ge=1, description="Checkpoints kept on disk.")] = 2
    timeout_s: Annotated[
        int, Meta(ge=10, description="Collective timeout: a dead peer ends the job after this long.")
    ] = 120
    export_final: Annotated[
        bool, Meta(description="Rank 0 writes the full final weights to final_model.pt in the run dir.")
    ] = False
    options: Annotated[
        dict[str, Any], Meta(description="Free-form settings handed to the entrypoint (model size...).")
    ] = {}

    @property
    def parallel_dims(self) -> Parallel:
        return SHORTHANDS[self.parallel] if isinstance(self.parallel, str) else self.parallel


class Preemption(Base):
    signal: Annotated[
        str, Meta(description="Signal Slurm sends before the time limit (USR1, SIGTERM...).")
    ] = "USR1"
    lead_time: Annotated[
        int, Meta(ge=0, description="Seconds before the time limit that the signal comes.")
    ] = 90
    requeue: Annotated[bool, Meta(description="Checkpoint and requeue on the signal.")] = True

    def __post_init__(self) -> None:
        check("signal", signal_name, self.signal)


FAULTS = ("hang", "rank_failure", "node_failure")


class Restart(Base):
    """Recover by itself from the last good checkpoint when a fault ends the training step."""

    max: Annotated[
        int, Meta(ge=0, description="Restarts allowed over the whole run (0: the first fault ends the job).")
    ] = 3
    on: Annotated[
        list[Literal[FAULTS]],  # type: ignore[valid-type]
        Meta(
            description="Faults that lead to a restart: hang (the watchdog saw no progress), rank_failure "
            "(a rank exited or raised), node_failure (a node stopped answering)."
        ),
    ] = msgspec.field(default_factory=lambda: list(FAULTS))
    exclude_failed_nodes: Annotated[
        bool, Meta(description="Never run again on a node that failed or hung (ExcNodeList).")
    ] = True
    shrink: Annotated[
        bool,
        Meta(
            description="After a node loss, go on with the nodes left in the allocation (same global batch, "
            "more gradient accumulation) instead of going back to the queue."
        ),
    ] = True
    min_nodes: Annotated[
        Count | None,
        Meta(description="Fewest nodes to go on with when shrinking; default: 1."),
    ] = None
    warm_standby: Annotated[
        bool,
        Meta(
            description="Keep a second srun step ready on the attempt's nodes, its tasks with torch and the "
            "runtime already imported, so that a restart on the same nodes skips start-up (srun launcher). "
            "Costs one more process per rank (host memory) and its imports' CPU once per attempt."
        ),
    ] = False
    standby_delay: Annotated[
        float,
        Meta(
            ge=0,
            description="Seconds at the most that the warm standby waits for the attempt beside it to train "
            "before its own imports (on a node with few cores they would slow that attempt's start).",
        ),
    ] = 60.0


class Watchdog(Base):
    """Find the rank that stopped advancing, name it, collect every rank's stack, end the step."""

    enabled: Annotated[bool, Meta(description="Watch the ranks' heartbeats for hangs.")] = True
    hang_timeout: Annotated[
        Seconds,
        Meta(
            description="Seconds: a rank whose step has not advanced for max(hang_timeout, "
            "step_time_factor x median step time) is hung.",
        ),
    ] = 30.0
    step_time_factor: Annotated[
        float, Meta(gt=0, description="How many median step times a step may take before it is a hang.")
    ] = 10.0
    startup_timeout: Annotated[
        Seconds,
        Meta(description="Seconds allowed until the first steps (imports, compile, checkpoint load)."),
    ] = 600.0
    slow_phase_timeout: Annotated[
        Seconds, Meta(description="Seconds allowed for slow phases: checkpoint saves, evaluation.")
    ] = 600.0
    heartbeat_interval: Annotated[
        float,
        Meta(
            ge=0.5,
            description="Seconds between a node's heartbeat writes into the run directory (one file per "
            "node, whatever its rank count).",
        ),
    ] = 5.0


class JobSpec(Base):
    name: Annotated[str, Meta(pattern=NAME, description="Job name (letters, digits, . _ -).")]
    train: Annotated[Train, Meta(description="The training the runtime does.")]
    resources: Annotated[Resources, Meta(description="What to ask Slurm for.")] = Resources()
    launcher: Annotated[
        Literal["srun", "torchrun", "mpi"],
        Meta(
            description="srun: one task per GPU; torchrun: one torchrun per node; mpi: srun with "
            "the site's MPI plugin, ranks from mpi4py."
        ),
    ] = "srun"
    env: Annotated[dict[str, EnvValue], Meta(description="Environment variables for every task.")] = {}
    setup: Annotated[
        list[ShellLine],
        Meta(description="Shell lines run before launch (module loads, venv activation); run as written."),
    ] = []
    array: Annotated[ArrayIndices | None, Meta(description="Job array indices, Slurm syntax (0-7%2).")] = None
    dependency: Annotated[Dependency | None, Meta(description="Slurm dependency (afterok:123).")] = None
    preemption: Annotated[
        Preemption | None,
        Meta(description="Signal before the time limit, and requeue; site default if unset."),
    ] = None
    begin: Annotated[
        SlurmWord | None,
        Meta(description="Start no earlier than this (--begin: now+1hour, 2026-01-31T08:00)."),
    ] = None
    comment: Annotated[
        Comment | None,
        Meta(
            description="Free text shown by squeue/sacct (--comment): letters, digits, spaces, .,:+@%=/-_[]."
        ),
    ] = None
    mail_type: Annotated[
        list[Literal[MAIL_TYPES]],  # type: ignore[valid-type]
        Meta(description="When Slurm mails (--mail-type): BEGIN, END, FAIL, REQUEUE, ALL, TIME_LIMIT_90..."),
    ] = []
    mail_user: Annotated[
        MailUser | None,
        Meta(description="Who gets the mail (--mail-user); default: the submitting user."),
    ] = None
    sbatch: Annotated[
        dict[str, str | int | bool],
        Meta(
            description="Other sbatch options, {option: value} without `--` (true: a flag); "
            "options hpctrain sets itself are refused."
        ),
    ] = {}
    restart: Annotated[
        Restart, Meta(description="Restart by itself after a hang, a rank failure or a lost node.")
    ] = Restart()
    watchdog: Annotated[Watchdog, Meta(description="Hang detection (heartbeats, stacks).")] = Watchdog()
    preflight: Annotated[
        bool | None,
        Meta(
            description="Check nodes and an all-reduce before training; a bad node is excluded and the "
            "job requeued. Default: on for multi-node GPU jobs."
        ),
    ] = None
    sweep: Annotated[
        Sweep | None, Meta(description="Hyper-parameter sweep; submit with `hpctrain sweep`.")
    ] = None

    def __post_init__(self) -> None:
        check_env("env", self.env)
        for key, value in self.sbatch.items():
            problem = sbatch_option_problem(key)
            if problem:
                raise ValueError(f"sbatch: {problem}")
            if value is False:
                raise ValueError(f"sbatch: {key}: false is ambiguous; leave the option out instead")
            if isinstance(value, str) and not re.fullmatch(SBATCH_VALUE, value):
                raise ValueError(f"sbatch: {key}: {value!r} may hold only {PATTERN_WORDS[SBATCH_VALUE]}")
