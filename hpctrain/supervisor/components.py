"""What each rank of a job is to the supervisor: a rank, or a parameter-server component (torch-free).

Every strategy reports through the same heartbeat slots and failure reports, keyed by global rank.
A parameter-server job gives its ranks roles: ranks 0..servers-1 are servers, the rest workers
(``spec.ParameterServer.component``). The watchdog and the supervisor name a rank by its role
("server 0 (rank 0) on node1"), and a worker is expendable: the servers drop a lost worker and
train on with the others, so its loss ends neither the step nor the attempt.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hpctrain.spec import ParameterServer, Resolved


@dataclass(frozen=True)
class Components:
    """The roles of a job's ranks; ``ps`` is None for every strategy but the parameter server."""

    ps: ParameterServer | None = None

    @classmethod
    def of(cls, resolved: Resolved) -> Components:
        return cls(resolved.parallel.ps)

    def name(self, rank: int | str) -> str:
        """`rank 3`, or `server 0 (rank 0)` / `worker 1 (rank 2)` in a parameter-server job."""
        if self.ps is None or not str(rank).isdigit():
            return f"rank {rank}"
        return f"{self.ps.component(int(rank))} (rank {rank})"

    def expendable(self, rank: int) -> bool:
        """A rank the job trains on without: a parameter-server worker."""
        return self.ps is not None and rank >= self.ps.servers

    def can_lose(self, ranks: Iterable[int], alive: Iterable[int]) -> bool:
        """Whether the job goes on without every rank of `ranks`: all are expendable and at least
        one expendable rank of `alive` (the ranks still running) is left."""
        lost = set(ranks)
        left = {rank for rank in alive if rank not in lost and self.expendable(rank)}
        return bool(lost) and all(self.expendable(rank) for rank in lost) and bool(left)
