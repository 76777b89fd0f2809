"""The parallel layout a job asks for (``train.parallel``): its dims, the shorthands, parameter servers.

The request is checked here as far as it can be without the world size; ``layout.Layout`` plans it
on the job's world (``Parallel.layout``) and is the one object both sides read.
"""

from typing import Annotated, Literal

from msgspec import Meta

from hpctrain.layout import DIMS, Layout, check_request
from hpctrain.spec.base import Base, Seconds, SlurmWord


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
