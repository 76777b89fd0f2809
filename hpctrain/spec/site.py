"""Site: a cluster's partitions, network and defaults, as a site profile describes them."""

import re
from typing import Annotated, Literal

from msgspec import Meta

from hpctrain.slurm_values import NAME, SLURM_WORD, check, check_env, memory_mb, time_minutes
from hpctrain.spec.base import Base, EnvValue, Line, NodeName, ShellLine, SlurmWord
from hpctrain.spec.job import Preemption

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
