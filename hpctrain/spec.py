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

# Values that land in `#SBATCH` lines or in Slurm command arguments. Slurm parses directives itself,
# so shell quoting cannot protect them: they are restricted to characters with no meaning to sbatch.
SLURM_WORD = r"^[A-Za-z0-9_.,:+@%=/\-\[\]]+$"
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
SIGNAL = r"^(SIG)?[A-Z0-9]+$"

SlurmWord = Annotated[str, Meta(pattern=SLURM_WORD)]
# YAML users write `OMP_NUM_THREADS: 1`; templates render every value as a quoted string.
EnvValue = str | int | float | bool


class Base(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Common options: unknown keys are errors, fields are keyword-only and immutable."""


# ----------------------------------------------------------------------------------------------
# Slurm value formats
# ----------------------------------------------------------------------------------------------

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_MEM = re.compile(r"^(\d+)([KMGT]?)B?$", re.IGNORECASE)


def time_minutes(value: str) -> int:
    """Slurm time limit (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`) in whole minutes."""
    match = _TIME.match(value.strip())
    if not match:
        raise ValueError(f"{value!r} is not a Slurm time (e.g. 30, 01:30:00, 1-12:00:00)")
    days, first, second, third = match.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        total_s = int(days) * 86400 + int(first) * 3600 + int(second or 0) * 60 + int(third or 0)
    elif third is not None:  # HH:MM:SS
        total_s = int(first) * 3600 + int(second) * 60 + int(third)
    elif second is not None:  # MM:SS
        total_s = int(first) * 60 + int(second)
    else:  # MM
        total_s = int(first) * 60
    return -(-total_s // 60)


def memory_mb(value: str | int) -> int:
    """Slurm memory size (`4000`, `4000M`, `16G`, `1T`) in megabytes."""
    match = _MEM.match(str(value).strip())
    if not match:
        raise ValueError(f"{value!r} is not a Slurm memory size (e.g. 16G, 4000M)")
    number, unit = int(match.group(1)), match.group(2).upper()
    factor = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]
    return max(1, int(number * factor))


def _check(field: str, parse: Any, value: Any) -> None:
    """Run a parser in __post_init__ so that its error names the field."""
    try:
        parse(value)
    except ValueError as err:
        raise ValueError(f"{field}: {err}") from None


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

    def __post_init__(self) -> None:
        _check("time", time_minutes, self.time)
        if self.mem is not None:
            _check("mem", memory_mb, self.mem)
        if self.tasks_per_node is not None and self.tasks_per_node < 1:
            raise ValueError("tasks_per_node: must be >= 1")

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
        dims = {"dp": self.dp, "fsdp": self.fsdp, "tp": self.tp, "pp": self.pp}
        for key, value in dims.items():
            if value == 0 or value < -1:
                raise ValueError(f"{key}: must be >= 1 or -1, got {value}")
        if sum(1 for v in dims.values() if v == -1) > 1:
            raise ValueError("at most one of dp/fsdp/tp/pp may be -1")

    def resolved(self, world_size: int) -> "Parallel":
        """The dims with -1 filled in; raises ValueError naming the conflict."""
        dims = {"dp": self.dp, "fsdp": self.fsdp, "tp": self.tp, "pp": self.pp}
        fixed = 1
        for value in dims.values():
            if value != -1:
                fixed *= value
        free = [k for k, v in dims.items() if v == -1]
        if free:
            if world_size % fixed:
                raise ValueError(
                    f"{' x '.join(f'{k}={v}' for k, v in dims.items() if v != -1)} = {fixed} "
                    f"does not divide the world size {world_size}"
                )
            dims[free[0]] = world_size // fixed
        product = dims["dp"] * dims["fsdp"] * dims["tp"] * dims["pp"]
        if product != world_size:
            raise ValueError(
                f"dp*fsdp*tp*pp = {dims['dp']}*{dims['fsdp']}*{dims['tp']}*{dims['pp']} = {product}"
                f" but the job has {world_size} tasks"
            )
        return msgspec.structs.replace(self, **dims)

    @property
    def kind(self) -> str:
        """One word for logs and status: ddp, fsdp, tp, pp, ps or a product like fsdp x tp."""
        if self.ps is not None:
            return "ps"
        parts = [k for k in ("dp", "fsdp", "tp", "pp") if getattr(self, k) not in (1,)]
        parts = ["ddp" if p == "dp" else p for p in parts]
        return "x".join(parts) or "single"


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
            pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
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
    grad_clip: Annotated[float | None, Meta(description="Clip gradient norm to this value.")] = None
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
    signal: Annotated[str, Meta(pattern=SIGNAL, description="Signal Slurm sends before the time limit.")] = (
        "USR1"
    )
    lead_time: Annotated[
        int, Meta(ge=0, description="Seconds before the time limit that the signal comes.")
    ] = 90
    requeue: Annotated[bool, Meta(description="Checkpoint and requeue on the signal.")] = True


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
        list[str], Meta(description="Shell lines run before launch (module loads, venv activation).")
    ] = []
    array: Annotated[
        Annotated[str, Meta(pattern=r"^[0-9,\-:%]+$")] | None,
        Meta(description="Job array indices, Slurm syntax (0-7%2)."),
    ] = None
    dependency: Annotated[
        Annotated[str, Meta(pattern=r"^[a-z]+(:[0-9_+]+)+([,?][a-z]+(:[0-9_+]+)+)*$")] | None,
        Meta(description="Slurm dependency (afterok:123)."),
    ] = None
    preemption: Annotated[
        Preemption | None,
        Meta(description="Signal before the time limit, and requeue; site default if unset."),
    ] = None

    def __post_init__(self) -> None:
        for key in self.env:
            if not re.match(ENV_NAME, key):
                raise ValueError(f"env: {key!r} is not a valid variable name")


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

    def __post_init__(self) -> None:
        _check("max_time", time_minutes, self.max_time)
        _check("mem_per_node", memory_mb, self.mem_per_node)


class Network(Base):
    interconnect: Annotated[
        Literal["infiniband", "roce", "ethernet", "loopback"], Meta(description="Node interconnect.")
    ] = "ethernet"
    nccl_env: Annotated[
        dict[str, EnvValue],
        Meta(description="NCCL settings (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, NCCL_NET_GDR_LEVEL...)."),
    ] = {}
    ucx_env: Annotated[dict[str, EnvValue], Meta(description="UCX settings for MPI over InfiniBand.")] = {}
    gloo_socket_ifname: Annotated[str | None, Meta(description="GLOO_SOCKET_IFNAME for CPU jobs.")] = None

    def __post_init__(self) -> None:
        for key in (*self.nccl_env, *self.ucx_env):
            if not re.match(ENV_NAME, key):
                raise ValueError(f"{key!r} is not a valid variable name")


class Site(Base):
    name: Annotated[str, Meta(pattern=NAME, description="Site name.")]
    partitions: Annotated[dict[str, Partition], Meta(description="Partitions by name.")]
    description: Annotated[str, Meta(description="What cluster this is.")] = ""
    gres_name: Annotated[str, Meta(pattern=r"^\w+$", description="Slurm gres name of GPUs.")] = "gpu"
    network: Annotated[Network, Meta(description="Interconnect and its NCCL/UCX settings.")] = Network()
    mpi: Annotated[Literal["pmix", "pmi2", "none"], Meta(description="srun --mpi plugin for MPI jobs.")] = (
        "none"
    )
    setup: Annotated[list[str], Meta(description="Shell lines before every job (module loads).")] = []
    python: Annotated[
        str | None,
        Meta(description="Python that runs the runtime inside the job; default: the submitting one."),
    ] = None
    env: Annotated[dict[str, EnvValue], Meta(description="Environment for every job at this site.")] = {}
    heterogeneous_jobs: Annotated[bool, Meta(description="Slurm hetjobs allowed here.")] = True
    preemption: Annotated[Preemption | None, Meta(description="Site default for the preemption signal.")] = (
        None
    )

    def __post_init__(self) -> None:
        for name in self.partitions:
            if not re.match(SLURM_WORD, name):
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


def _yaml_loader() -> Any:
    """A safe YAML loader that reads `02:00:00` as a string, not YAML 1.1's base-60 integer 7200."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[valid-type,misc]
        pass

    Loader.yaml_implicit_resolvers = {
        first: [
            (tag, rx)
            for tag, rx in resolvers
            if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
        ]
        for first, resolvers in base.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:int",
        re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
        list("-+0123456789"),
    )
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
            r"|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+0123456789."),
    )
    return Loader


def _load_yaml_text(text: Any) -> Any:
    import yaml

    return yaml.load(text, Loader=_yaml_loader())


def _read_yaml(path: Path) -> Any:
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            return _load_yaml_text(handle)
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(f"{path}:{where} invalid YAML: {problem}") from None


def _parse_scalar(text: str) -> Any:
    import yaml

    try:
        return _load_yaml_text(text)
    except yaml.YAMLError:
        return text


def apply_overrides(data: dict[str, Any], overrides: list[str], origin: str) -> dict[str, Any]:
    """Apply `dotted.key=value` overrides (values parsed as YAML scalars) to raw spec data."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SpecError(f"--set {item!r}: expected dotted.key=value")
        parts = key.split(".")
        node = data
        for part in parts[:-1]:
            child = node.get(part)
            if isinstance(child, str) and part == "parallel":
                child = {"dp": 1} if child != "ddp" else {}
                child.update(msgspec.to_builtins(SHORTHANDS[node[part]]))
            if child is None:
                child = {}
            if not isinstance(child, dict):
                raise SpecError(f"--set {key}: {part} is not a section in {origin}")
            node[part] = child
            node = child
        node[parts[-1]] = _parse_scalar(raw)
    return data


def _field_path(message: str) -> tuple[str, str]:
    """Split msgspec's 'problem - at `$.a.b`' into ('a.b', 'problem')."""
    problem, sep, where = message.rpartition(" - at `")
    if not sep:
        return "", message
    path = where.rstrip("`").removeprefix("$").lstrip(".")
    return path, problem


def decode(kind: type[msgspec.Struct], data: Any, origin: str) -> Any:
    try:
        return msgspec.convert(data, kind, strict=False)
    except msgspec.ValidationError as err:
        path, problem = _field_path(str(err))
        inner = re.match(r"^(\w+): (.*)$", problem)
        if inner and not problem.startswith("Expected"):
            path = f"{path}.{inner.group(1)}" if path else inner.group(1)
            problem = inner.group(2)
        problem = problem.replace("Object contains unknown field", "unknown field")
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
        parallel = dims
    else:
        try:
            parallel = dims.resolved(world_size)
        except ValueError as err:
            raise SpecError(f"{job_origin}: train.parallel: {err}") from None
        per_node = res.ntasks_per_node
        if parallel.tp > 1 and (parallel.tp > per_node or per_node % parallel.tp):
            raise SpecError(
                f"{job_origin}: train.parallel.tp: tp={parallel.tp} must fit inside one node "
                f"({per_node} tasks per node)"
            )
        if job.train.batch_size % (parallel.dp * parallel.fsdp * job.train.grad_accum):
            raise SpecError(
                f"{job_origin}: train.batch_size: {job.train.batch_size} is not divisible by "
                f"dp*fsdp*grad_accum = {parallel.dp * parallel.fsdp * job.train.grad_accum}"
            )
    return Resolved(job=job, site=site, partition=part_name, world_size=world_size, parallel=parallel)


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
