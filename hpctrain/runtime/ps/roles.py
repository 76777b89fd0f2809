"""Who this process is in a parameter-server job: the runtime's DistInfo split into servers and workers."""

from __future__ import annotations

import os
from dataclasses import dataclass

from hpctrain.runtime.bootstrap import DistInfo
from hpctrain.spec import ParameterServer


@dataclass(frozen=True)
class Roles:
    """Ranks 0..servers-1 are servers, the rest are workers (hetjob component 0 = servers)."""

    info: DistInfo
    servers: int

    @property
    def workers(self) -> int:
        return self.info.world_size - self.servers

    @property
    def is_server(self) -> bool:
        return self.info.rank < self.servers

    @property
    def index(self) -> int:
        """Server index for servers, worker index (0-based) for workers."""
        return self.info.rank if self.is_server else self.info.rank - self.servers

    @property
    def name(self) -> str:
        """`server 0` or `worker 1`, the words the supervisor and status use too."""
        return ParameterServer(servers=self.servers).component(self.info.rank)


def roles(info: DistInfo, servers: int) -> Roles:
    """This process's role; rejects a world without workers and a hetjob whose component 0 is not
    exactly the servers (ranks would get the wrong role)."""
    if info.world_size <= servers:
        raise ValueError(f"{servers} parameter servers leave no worker among {info.world_size} processes")
    group0 = os.environ.get("SLURM_NTASKS_HET_GROUP_0")
    if os.environ.get("SLURM_HET_SIZE") and group0 and int(group0) != servers:
        raise ValueError(f"hetjob component 0 has {group0} tasks but train.parallel.ps.servers = {servers}")
    return Roles(info, servers)
