"""Site: a cluster's partitions, network and defaults, as a site profile describes them."""

import re
from typing import Annotated, Literal

from msgspec import Meta

from hpctrain.spec.base import (
    Base,
    Count,
    EnvValue,
    Line,
    NodeName,
    Positive,
    ShellLine,
    SlurmMemory,
    SlurmTime,
    SlurmWord,
    Whole,
)
from hpctrain.spec.job import ContainerRuntime, Preemption
from hpctrain.spec.slurm_values import NAME, SLURM_WORD, check_env, settle, spec_memory, spec_time

# ----------------------------------------------------------------------------------------------
# Site profile
# ----------------------------------------------------------------------------------------------


class Partition(Base):
    nodes: Count
    """Nodes in the partition."""
    gpus_per_node: Whole = 0
    """GPUs on each node."""
    gpu_type: SlurmWord | None = None
    """GPU gres type (gpu:TYPE:N), e.g. h100; none = untyped."""
    cpus_per_node: Count = 1
    """CPU cores on each node."""
    mem_per_node: SlurmMemory = "1G"
    """Allocatable memory per node: Slurm syntax (16G) or a whole number of megabytes."""
    max_time: SlurmTime = "1-00:00:00"
    """Partition time limit: minutes, HH:MM:SS or D-HH:MM:SS (MM:SS is refused as ambiguous)."""
    max_nodes: int | None = None
    """Most nodes one job may have."""
    default: bool = False
    """Used when the job names no partition."""
    node_names: list[NodeName] | None = None
    """The partition's node names; when given, exclude/nodelist must name them."""

    def __post_init__(self) -> None:
        settle(self, "max_time", spec_time)
        settle(self, "mem_per_node", spec_memory)


class Network(Base):
    interconnect: Literal["infiniband", "roce", "ethernet", "loopback"] = "ethernet"
    """Node interconnect."""
    nccl_env: dict[str, EnvValue] = {}
    """NCCL settings (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, NCCL_NET_GDR_LEVEL...)."""
    ucx_env: dict[str, EnvValue] = {}
    """UCX settings for MPI over InfiniBand."""
    gloo_socket_ifname: Line | None = None
    """GLOO_SOCKET_IFNAME for CPU jobs."""
    expected_busbw_gbps: Positive | None = None
    """All-reduce bus bandwidth (GB/s) across nodes that doctor expects."""

    def __post_init__(self) -> None:
        check_env("nccl_env", self.nccl_env)
        check_env("ucx_env", self.ucx_env)


class Site(Base):
    name: Annotated[str, Meta(pattern=NAME)]
    """Site name."""
    partitions: dict[str, Partition]
    """Partitions by name."""
    description: str = ""
    """What cluster this is."""
    gres_name: Annotated[str, Meta(pattern=r"\A[A-Za-z0-9_]+\Z")] = "gpu"
    """Slurm gres name of GPUs."""
    network: Network = Network()
    """Interconnect and its NCCL/UCX settings."""
    mpi: Literal["pmix", "pmi2", "none"] = "none"
    """srun --mpi plugin for MPI jobs."""
    setup: list[ShellLine] = []
    """Shell lines before every job (module loads); run as written."""
    python: Line | None = None
    """Python that runs the runtime inside the job; default: the submitting one."""
    env: dict[str, EnvValue] = {}
    """Environment for every job at this site."""
    heterogeneous_jobs: bool = True
    """Slurm hetjobs allowed here."""
    preemption: Preemption | None = None
    """Site default for the preemption signal."""
    container_runtimes: list[ContainerRuntime] = []
    """Container runtimes the cluster has (pyxis, oci, apptainer); `hpctrain init-site` and `doctor` detect
    them. A job's container.runtime must be one of them."""
    expedited_requeue: bool = False
    """Submit with --requeue=expedite (Slurm 25.05+ with SlurmctldParameters=enable_expedited_requeue;
    `hpctrain init-site` sets it where the cluster takes it, `doctor` checks it): after the node running
    the batch script is lost, the job is eligible again at once and first in the queue, without Slurm's
    requeue hold or a `hpctrain status` poll to release it. A job pinned with resources.nodelist keeps
    the plain requeue (slurmctld refuses to drop the pin of an expediting job)."""
    share_with_group: Annotated[str, Meta(pattern=NAME)] | None = None
    """Unix group that may read this site's run directories (dirs 2750, files 0640, given to the group);
    default: none, every run directory is private to you (dirs 0700, files 0600). See docs/security.md."""

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
