"""JobSpec and Site: the one typed, validated source of truth for a job and the cluster it runs on.

Both halves read these types: the login-node CLI validates YAML into them, and the runtime decodes
the resolved copy (``spec.json`` in the run directory) back into the same types. Field docs are
the help text (``hpctrain explain``) and the reference in docs/job-spec.md.

Imports stay light (msgspec, yaml): the CLI must start fast on a login node.
"""

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from hpctrain.errors import SpecError
from hpctrain.layout import DIMS, Layout, LayoutError, check_request
from hpctrain.slurm_values import (
    MAIL_TYPES,
    NAME,
    PATTERN_WORDS,
    SBATCH_VALUE,
    SLURM_WORD,
    EnvValue,
    Line,
    NodeName,
    ShellLine,
    SlurmWord,
    check,
    check_env,
    memory_mb,
    sbatch_option_problem,
    signal_name,
    time_minutes,
)


class Base(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Common options: unknown keys are errors, fields are keyword-only and immutable."""


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
        float, Meta(gt=0, description="Seconds of silence after which async servers drop a worker.")
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
    ps: Annotated[
        ParameterServer | None, Meta(description="Parameter-server training instead of collectives.")
    ] = None

    def __post_init__(self) -> None:
        check_request(self.degrees)

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
    activation_checkpointing: Annotated[
        Literal["none", "selective", "full"],
        Meta(
            description="Recompute activations in backward per block (Task.shard_units): selective keeps "
            "matmul and attention outputs, full keeps only block inputs."
        ),
    ] = "none"
    compile: Annotated[bool, Meta(description="torch.compile the model.")] = False
    log_every: Annotated[int, Meta(ge=1, description="Steps between metrics lines.")] = 10
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


class EarlyStop(Base):
    """Successive halving: at steps M, 2M, 4M... a trial in the worst half of its peers is ended."""

    after_steps: Annotated[
        int, Meta(ge=1, description="M: the first step at which trials are compared (an eval step).")
    ]
    min_trials: Annotated[
        int, Meta(ge=2, description="Trials that must have reached a step before any is ended there.")
    ] = 3


class Sweep(Base):
    """A hyper-parameter sweep: one trial per combination, all submitted as one Slurm job array."""

    grid: Annotated[
        dict[Annotated[str, Meta(pattern=r"\A[A-Za-z_]\w*(\.[A-Za-z_]\w*)+\Z")], list[EnvValue]],
        Meta(description="Swept fields and their values, e.g. {train.lr: [0.001, 0.003]}; the product."),
    ] = {}
    random: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="Run this many distinct combinations drawn from the grid, not all of them."),
    ] = None
    seed: Annotated[int, Meta(description="Seed of the random draw: the same seed, the same trials.")] = 0
    max_parallel: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="Trials running at once (the array's %K); unset = no limit."),
    ] = None
    metric: Annotated[
        str,
        Meta(
            pattern=r"\A[a-z_]+\Z",
            description="Result field that ranks trials: eval_loss, eval_accuracy, final_loss...",
        ),
    ] = "eval_loss"
    mode: Annotated[
        Literal["min", "max"], Meta(description="Whether a lower or a higher metric is better.")
    ] = "min"
    early_stop: Annotated[
        EarlyStop | None, Meta(description="End trials that fall behind (successive halving); unset = never.")
    ] = None


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
    array: Annotated[
        Annotated[str, Meta(pattern=r"\A[0-9,\-:%]+\Z")] | None,
        Meta(description="Job array indices, Slurm syntax (0-7%2)."),
    ] = None
    dependency: Annotated[
        Annotated[str, Meta(pattern=r"\A[a-z]+(:[0-9_+]+)+([,?][a-z]+(:[0-9_+]+)+)*\Z")] | None,
        Meta(description="Slurm dependency (afterok:123)."),
    ] = None
    preemption: Annotated[
        Preemption | None,
        Meta(description="Signal before the time limit, and requeue; site default if unset."),
    ] = None
    begin: Annotated[
        SlurmWord | None,
        Meta(description="Start no earlier than this (--begin: now+1hour, 2026-01-31T08:00)."),
    ] = None
    comment: Annotated[
        Annotated[str, Meta(pattern=r"\A[A-Za-z0-9_.,:+@%=/\-\[\] ]{1,200}\Z")] | None,
        Meta(
            description="Free text shown by squeue/sacct (--comment): letters, digits, spaces, .,:+@%=/-_[]."
        ),
    ] = None
    mail_type: Annotated[
        list[Literal[MAIL_TYPES]],  # type: ignore[valid-type]
        Meta(description="When Slurm mails (--mail-type): BEGIN, END, FAIL, REQUEUE, ALL, TIME_LIMIT_90..."),
    ] = []
    mail_user: Annotated[
        Annotated[str, Meta(pattern=r"\A[A-Za-z0-9._%+\-]+(@[A-Za-z0-9.\-]+)?\Z")] | None,
        Meta(description="Who gets the mail (--mail-user); default: the submitting user."),
    ] = None
    sbatch: Annotated[
        dict[str, str | int | bool],
        Meta(
            description="Other sbatch options, {option: value} without `--` (true: a flag); "
            "options hpctrain sets itself are refused."
        ),
    ] = {}
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


# ----------------------------------------------------------------------------------------------
# Site profile
# ----------------------------------------------------------------------------------------------


class Partition(Base):
    nodes: Annotated[int, Meta(ge=1, description="Nodes in the partition.")]
    gpus_per_node: Annotated[int, Meta(ge=0, description="GPUs on each node.")] = 0
    gpu_type: Annotated[
        SlurmWord | None, Meta(description="GPU gres type (gpu:TYPE:N), e.g. h100; none = untyped.")
    ] = None
    cpus_per_node: Annotated[int, Meta(ge=1, description="CPU cores on each node.")] = 1
    mem_per_node: Annotated[str, Meta(description="Allocatable memory per node (Slurm syntax).")] = "1G"
    max_time: Annotated[str, Meta(description="Partition time limit (Slurm syntax).")] = "1-00:00:00"
    max_nodes: Annotated[int | None, Meta(description="Most nodes one job may have.")] = None
    default: Annotated[bool, Meta(description="Used when the job names no partition.")] = False
    node_names: Annotated[
        list[NodeName] | None,
        Meta(description="The partition's node names; when given, exclude/nodelist must name them."),
    ] = None

    def __post_init__(self) -> None:
        check("max_time", time_minutes, self.max_time)
        check("mem_per_node", memory_mb, self.mem_per_node)


class Network(Base):
    interconnect: Annotated[
        Literal["infiniband", "roce", "ethernet", "loopback"], Meta(description="Node interconnect.")
    ] = "ethernet"
    nccl_env: Annotated[
        dict[str, EnvValue],
        Meta(description="NCCL settings (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, NCCL_NET_GDR_LEVEL...)."),
    ] = {}
    ucx_env: Annotated[dict[str, EnvValue], Meta(description="UCX settings for MPI over InfiniBand.")] = {}
    gloo_socket_ifname: Annotated[Line | None, Meta(description="GLOO_SOCKET_IFNAME for CPU jobs.")] = None
    expected_busbw_gbps: Annotated[
        Annotated[float, Meta(gt=0)] | None,
        Meta(description="All-reduce bus bandwidth (GB/s) across nodes that doctor expects."),
    ] = None

    def __post_init__(self) -> None:
        check_env("nccl_env", self.nccl_env)
        check_env("ucx_env", self.ucx_env)


class Site(Base):
    name: Annotated[str, Meta(pattern=NAME, description="Site name.")]
    partitions: Annotated[dict[str, Partition], Meta(description="Partitions by name.")]
    description: Annotated[str, Meta(description="What cluster this is.")] = ""
    gres_name: Annotated[str, Meta(pattern=r"\A[A-Za-z0-9_]+\Z", description="Slurm gres name of GPUs.")] = (
        "gpu"
    )
    network: Annotated[Network, Meta(description="Interconnect and its NCCL/UCX settings.")] = Network()
    mpi: Annotated[Literal["pmix", "pmi2", "none"], Meta(description="srun --mpi plugin for MPI jobs.")] = (
        "none"
    )
    setup: Annotated[
        list[ShellLine], Meta(description="Shell lines before every job (module loads); run as written.")
    ] = []
    python: Annotated[
        Line | None,
        Meta(description="Python that runs the runtime inside the job; default: the submitting one."),
    ] = None
    env: Annotated[dict[str, EnvValue], Meta(description="Environment for every job at this site.")] = {}
    heterogeneous_jobs: Annotated[bool, Meta(description="Slurm hetjobs allowed here.")] = True
    preemption: Annotated[Preemption | None, Meta(description="Site default for the preemption signal.")] = (
        None
    )

    def __post_init__(self) -> None:
        check_env("env", self.env)
        for name in self.partitions:
            if not re.fullmatch(SLURM_WORD, name):
                raise ValueError(f"partition name {name!r} has characters Slurm does not accept")
        defaults = [n for n, p in self.partitions.items() if p.default]
        if len(defaults) > 1:
            raise ValueError(f"more than one default partition: {', '.join(defaults)}")

    def partition(self, name: str | None) -> tuple[str, "Partition"]:
        if name is None:
            for key, part in self.partitions.items():
                if part.default:
                    return key, part
            key = next(iter(self.partitions))
            return key, self.partitions[key]
        if name not in self.partitions:
            raise KeyError(name)
        return name, self.partitions[name]


# ----------------------------------------------------------------------------------------------
# Loading, overrides, cross-checks
# ----------------------------------------------------------------------------------------------


class Resolved(Base):
    """A job spec checked against a site: what gets recorded in the run directory as spec.json."""

    job: JobSpec
    site: Site
    partition: str
    world_size: int
    parallel: Parallel

    @property
    def preemption(self) -> Preemption:
        """The job's preemption settings, else the site's, else the defaults."""
        return self.job.preemption or self.site.preemption or Preemption()


def _read_yaml(path: Path) -> Any:
    from hpctrain import spec_yaml

    return spec_yaml.load(spec_yaml.read_text(path), str(path))


def _override_path(key: str, item: str) -> list[str]:
    parts = key.split(".")
    if not all(parts):
        raise SpecError(f"--set {item!r}: expected dotted.key=value")
    return parts


def apply_overrides(data: dict[str, Any], overrides: list[str], origin: str) -> dict[str, Any]:
    """Apply `dotted.key=value` overrides (values parsed as YAML scalars) to raw spec data."""
    from hpctrain import spec_yaml

    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SpecError(f"--set {item!r}: expected dotted.key=value")
        parts = _override_path(key, item)
        node = data
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if isinstance(child, str) and part == "parallel":
                if child not in SHORTHANDS:
                    where = ".".join(parts[: depth + 1])
                    raise SpecError(
                        f"{origin}: {where}: {child!r} is not one of {', '.join(SHORTHANDS)}, so "
                        f"--set {key} has nothing to change"
                    )
                child = {"dp": 1} if child != "ddp" else {}
                child.update(msgspec.to_builtins(SHORTHANDS[node[part]]))
            if child is None:
                child = {}
            if not isinstance(child, dict):
                raise SpecError(f"--set {key}: {part} is not a section in {origin}")
            node[part] = child
            node = child
        node[parts[-1]] = _override_value(raw, key, tuple(parts[:-1]) in spec_yaml.LITERAL_MAPS)
    return data


def _override_value(raw: str, key: str, literal: bool) -> Any:
    """A --set value as YAML reads it; env values keep their text (`--set env.X=0755` is "0755")."""
    from hpctrain import spec_yaml

    if literal and not raw:
        return ""
    try:
        return spec_yaml.load(raw, f"--set {key}", {()} if literal else ())
    except SpecError as err:
        if "invalid YAML" in str(err):
            return raw
        raise


def _field_path(message: str) -> tuple[str, str]:
    """Split msgspec's 'problem - at `$.a.b`' into ('a.b', 'problem')."""
    problem, sep, where = message.rpartition(" - at `")
    if not sep:
        return "", message
    path = where.rstrip("`").removeprefix("$").lstrip(".")
    return path, problem


def decode(kind: type[msgspec.Struct], data: Any, origin: str) -> Any:
    from hpctrain import spec_yaml

    spec_yaml.check_values(data, (), origin)
    try:
        return msgspec.convert(data, kind, strict=False)
    except msgspec.ValidationError as err:
        path, problem = _field_path(str(err))
        inner = re.match(r"^(\w+): (.*)$", problem)
        if inner and not problem.startswith("Expected"):
            path = f"{path}.{inner.group(1)}" if path else inner.group(1)
            problem = inner.group(2)
        problem = problem.replace("Object contains unknown field", "unknown field")
        for pattern, words in PATTERN_WORDS.items():
            problem = problem.replace(f"matching regex {pattern!r}", f"of {words}")
        where = f" {path}:" if path else ""
        raise SpecError(f"{origin}:{where} {problem}") from None


def load_job(path: str | Path, overrides: list[str] | None = None) -> JobSpec:
    path = Path(path)
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    data = apply_overrides(data, overrides or [], str(path))
    return decode(JobSpec, data, str(path))


def load_site(name_or_path: str | Path, search: list[Path] | None = None) -> Site:
    """A site by path, or by name from the search folders (site-configs/NAME.yaml)."""
    if not str(name_or_path).strip():
        raise SpecError("--site: empty; give a site name (e.g. local) or a path")
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        for folder in search or []:
            candidate = folder / f"{name_or_path}.yaml"
            if candidate.exists():
                path = candidate
                break
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    return decode(Site, data, str(path))


def resolve(job: JobSpec, site: Site, job_origin: str = "job", site_origin: str = "site") -> Resolved:
    """Check that `site` can run `job`; every refusal names the field and both files' facts."""
    res = job.resources
    try:
        part_name, part = site.partition(res.partition)
    except KeyError:
        raise SpecError(
            f"{job_origin}: resources.partition: {res.partition!r} is not a partition of site "
            f"{site.name} ({', '.join(site.partitions)})"
        ) from None
    where = f"partition {part_name} of site {site.name}"
    if res.gpus_per_node > part.gpus_per_node:
        raise SpecError(
            f"{job_origin}: resources.gpus_per_node: {res.gpus_per_node} GPUs per node asked, "
            f"{where} has {part.gpus_per_node}"
        )
    if res.nodes > (part.max_nodes or part.nodes):
        raise SpecError(
            f"{job_origin}: resources.nodes: {res.nodes} nodes asked, {where} allows "
            f"{part.max_nodes or part.nodes}"
        )
    if time_minutes(res.time) > time_minutes(part.max_time):
        raise SpecError(
            f"{job_origin}: resources.time: {res.time} is over the {part.max_time} limit of {where}"
        )
    cpus = res.ntasks_per_node * res.cpus_per_task
    if cpus > part.cpus_per_node:
        raise SpecError(
            f"{job_origin}: resources.cpus_per_task: {res.ntasks_per_node} tasks x "
            f"{res.cpus_per_task} CPUs = {cpus} per node, {where} has {part.cpus_per_node}"
        )
    if res.mem is not None and memory_mb(res.mem) > memory_mb(part.mem_per_node):
        raise SpecError(
            f"{job_origin}: resources.mem: {res.mem} per node asked, {where} has {part.mem_per_node}"
        )
    _check_nodes_and_gpus(res, part, where, job_origin)
    if res.gpus_per_node and res.tasks_per_node not in (None, res.gpus_per_node) and (job.launcher == "srun"):
        raise SpecError(
            f"{job_origin}: resources.tasks_per_node: the srun launcher runs one task per GPU "
            f"({res.gpus_per_node}), got {res.tasks_per_node}"
        )
    world_size = res.nodes * res.ntasks_per_node
    dims = job.train.parallel_dims
    if dims.ps is not None:
        ps = dims.ps
        if ps.heterogeneous and not site.heterogeneous_jobs:
            raise SpecError(
                f"{job_origin}: train.parallel.ps.heterogeneous: site {site.name} does not allow "
                "heterogeneous jobs; set it to false"
            )
        if ps.partition is not None and ps.partition not in site.partitions:
            raise SpecError(
                f"{job_origin}: train.parallel.ps.partition: {ps.partition!r} is not a partition of "
                f"site {site.name}"
            )
        if not ps.heterogeneous and ps.servers >= world_size:
            raise SpecError(
                f"{job_origin}: train.parallel.ps.servers: {ps.servers} servers leave no worker "
                f"among {world_size} tasks"
            )
        _check_servers(ps, site, ps.partition or part_name, job_origin)
        parallel = dims
    else:
        try:
            layout = dims.layout(world_size, res.ntasks_per_node)
            layout.check_batch(job.train.batch_size, job.train.grad_accum)
        except LayoutError as err:
            where = {"batch_size": "train.batch_size", "": "train.parallel"}.get(
                err.field, f"train.parallel.{err.field}"
            )
            raise SpecError(f"{job_origin}: {where}: {err.problem}") from None
        parallel = msgspec.structs.replace(dims, **layout.degrees)
    return Resolved(job=job, site=site, partition=part_name, world_size=world_size, parallel=parallel)


def _check_nodes_and_gpus(res: Resources, part: Partition, where: str, job_origin: str) -> None:
    """Typed GPUs and named nodes must exist in the partition the job runs in."""
    if res.gpu_type is not None and res.gpu_type != part.gpu_type:
        has = f"has {part.gpu_type} GPUs" if part.gpu_type else "lists no GPU type"
        raise SpecError(f"{job_origin}: resources.gpu_type: {res.gpu_type!r} asked, {where} {has}")
    if res.gpu_type is not None and not res.gpus_per_node:
        raise SpecError(f"{job_origin}: resources.gpu_type: set, but gpus_per_node is 0")
    if part.node_names is None:
        return
    for field in ("exclude", "nodelist"):
        unknown = [n for n in getattr(res, field) if n not in part.node_names]
        if unknown:
            raise SpecError(
                f"{job_origin}: resources.{field}: {', '.join(unknown)} not in {where} "
                f"({', '.join(part.node_names)})"
            )
    left = len(set(part.node_names) - set(res.exclude))
    if res.nodes > left:
        raise SpecError(
            f"{job_origin}: resources.exclude: {res.nodes} nodes asked, {left} left in {where} "
            "after the exclusions"
        )


def _check_servers(ps: ParameterServer, site: Site, part_name: str, job_origin: str) -> None:
    """The parameter servers' own request (their hetjob component) must fit their partition."""
    part = site.partitions[part_name]
    where = f"partition {part_name} of site {site.name}"

    def refuse(field: str, problem: str) -> SpecError:
        return SpecError(f"{job_origin}: train.parallel.ps.{field}: {problem}")

    if ps.mem is not None:
        try:
            mem = memory_mb(ps.mem)
        except ValueError as err:
            raise refuse("mem", str(err)) from None
        if mem > memory_mb(part.mem_per_node):
            raise refuse("mem", f"{ps.mem} per node asked, {where} has {part.mem_per_node}")
    if ps.cpus_per_server > part.cpus_per_node:
        raise refuse("cpus_per_server", f"{ps.cpus_per_server} CPUs asked, {where} has {part.cpus_per_node}")
    if not ps.heterogeneous:
        return
    if ps.nodes > (part.max_nodes or part.nodes):
        raise refuse("nodes", f"{ps.nodes} nodes asked, {where} allows {part.max_nodes or part.nodes}")
    if ps.nodes > ps.servers:
        raise refuse("nodes", f"{ps.nodes} nodes for {ps.servers} servers would leave a node empty")
    per_node = -(-ps.servers // ps.nodes)
    if per_node * ps.cpus_per_server > part.cpus_per_node:
        raise refuse(
            "cpus_per_server",
            f"{per_node} servers x {ps.cpus_per_server} CPUs = {per_node * ps.cpus_per_server} per node, "
            f"{where} has {part.cpus_per_node}",
        )


def dumps(resolved: Resolved) -> bytes:
    return msgspec.json.format(msgspec.json.encode(resolved), indent=2)


def loads(data: bytes | str) -> Resolved:
    return msgspec.json.decode(data, type=Resolved)


def field_docs(kind: type[msgspec.Struct], prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted field, type, description) for every field: the help text and the reference docs."""
    import typing

    rows: list[tuple[str, str, str]] = []
    hints = typing.get_type_hints(kind, include_extras=True)
    for name in kind.__struct_fields__:
        hint = hints[name]
        description = ""
        for meta in getattr(hint, "__metadata__", ()):
            if isinstance(meta, Meta) and meta.description:
                description = meta.description
        base = typing.get_args(hint)[0] if getattr(hint, "__metadata__", None) else hint
        rows.append((prefix + name, _type_name(base), description))
        for arg in (base, *typing.get_args(base)):
            if isinstance(arg, type) and issubclass(arg, msgspec.Struct):
                rows.extend(field_docs(arg, prefix + name + "."))
    return rows


def _type_name(hint: Any) -> str:
    import typing

    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _type_name(args[0])
    if origin is Literal:
        return "|".join(str(a) for a in args)
    if args:
        names = [_type_name(a) for a in args if a is not type(None)]
        if origin in (list, dict):
            return f"{origin.__name__}[{', '.join(names)}]"
        return " or ".join(names) + (" (optional)" if type(None) in args else "")
    return getattr(hint, "__name__", str(hint))
