"""Who this process is in a parameter-server job: rank layout from the runtime's DistInfo or the env."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Layout:
    """Ranks 0..servers-1 are servers, the rest are workers (hetjob component 0 = servers)."""

    rank: int
    world_size: int
    servers: int
    master_addr: str
    master_port: int
    node: str

    @property
    def workers(self) -> int:
        return self.world_size - self.servers

    @property
    def is_server(self) -> bool:
        return self.rank < self.servers

    @property
    def index(self) -> int:
        """Server index for servers, worker index (0-based) for workers."""
        return self.rank if self.is_server else self.rank - self.servers

    @property
    def name(self) -> str:
        return f"{'server' if self.is_server else 'worker'} {self.index}"


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            return int(value)
    return None


def _world_from_env() -> int | None:
    """World size; in a heterogeneous step SLURM_NTASKS may be one component's count, so sum them."""
    het = _env_int("SLURM_HET_SIZE")
    if het:
        counts = [_env_int(f"SLURM_NTASKS_HET_GROUP_{i}") for i in range(het)]
        if all(c is not None for c in counts):
            return sum(c for c in counts if c is not None)
    return _env_int("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def layout(servers: int, dist_info: Any | None = None) -> Layout:
    """The one place that couples to the runtime: read a DistInfo-like object, else the environment.

    ``dist_info`` may have ``rank``, ``world_size`` (or ``world``), ``master_addr``, ``master_port``;
    anything missing falls back to torchrun/Slurm/MPI variables so this works before bootstrap exists.
    """

    def pick(attrs: tuple[str, ...], env: int | str | None) -> Any:
        for attr in attrs:
            value = getattr(dist_info, attr, None) if dist_info is not None else None
            if value is not None:
                return value
        return env

    rank = pick(("rank",), _env_int("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"))
    world = pick(("world_size", "world"), _world_from_env())
    if _env_int("SLURM_HET_SIZE"):
        # A heterogeneous step: the per-component task counts are the authority on the world size.
        world = _world_from_env() or world
    addr = pick(("master_addr",), os.environ.get("MASTER_ADDR", "127.0.0.1"))
    port = pick(("master_port",), _env_int("MASTER_PORT") or 29500)
    if rank is None or world is None:
        raise RuntimeError("cannot tell this process's rank: set RANK/WORLD_SIZE or run under srun")
    if int(world) <= servers:
        raise RuntimeError(f"{servers} parameter servers leave no worker among {world} processes")
    node = getattr(dist_info, "hostname", "") or os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    return Layout(int(rank), int(world), servers, str(addr), int(port), node)


def check_hetjob(lay: Layout) -> None:
    """In a hetjob, component 0 must be exactly the servers, or ranks would get the wrong role."""
    group0 = _env_int("SLURM_NTASKS_HET_GROUP_0")
    if _env_int("SLURM_HET_SIZE") and group0 is not None and group0 != lay.servers:
        raise RuntimeError(
            f"hetjob component 0 has {group0} tasks but train.parallel.ps.servers = {lay.servers}"
        )
