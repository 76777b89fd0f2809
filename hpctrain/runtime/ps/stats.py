"""What parameter-server training reports: server 0's window and result, a worker's own lines."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hpctrain.rundir import Result, TrainLine, WorkerStats
from hpctrain.spec import ParameterServer, Train

from .transport import Header


@dataclass
class WorkerProgress:
    """One worker as its servers see it."""

    samples: int = 0
    pushes: int = 0
    loss_sum: float = 0.0
    first: float | None = None
    last: float = 0.0
    status: str = "running"
    reason: str = ""

    def record(self, header: Header, now: float) -> None:
        self.first = self.first if self.first is not None else now
        self.last, self.samples, self.pushes = now, self.samples + header.samples, self.pushes + 1
        self.loss_sum += header.loss

    def stats(self) -> WorkerStats:
        span = self.last - (self.first or self.last)
        return WorkerStats(
            status=self.status,
            reason=self.reason,
            steps=self.pushes,
            samples=self.samples,
            samples_per_s=self.samples / span if self.pushes > 1 and span > 0 else 0.0,
            loss=self.loss_sum / self.pushes if self.pushes else None,
        )


@dataclass
class Window:
    """What server 0 saw since its last metrics line."""

    start: float = field(default_factory=time.time)
    losses: list[float] = field(default_factory=list)
    samples: int = 0
    staleness: list[int] = field(default_factory=list)

    def line(self, version: int, steps: int, alive: int, mode: str) -> dict[str, Any]:
        """The fields of a train line (:class:`~hpctrain.rundir.TrainLine`) for the runtime's Metrics."""
        stale = self.staleness or [0]
        return {
            "step": version,
            "steps": steps,
            "loss": sum(self.losses) / max(1, len(self.losses)),
            "samples_per_s": self.samples / max(1e-9, time.time() - self.start),
            "staleness_mean": sum(stale) / len(stale),
            "staleness_max": max(stale),
            "workers_alive": alive,
            "mode": mode,
        }


@dataclass
class WorkerWindow:
    """A worker's own numbers since its last line in its metrics file."""

    start: float = field(default_factory=time.time)
    steps: int = 0
    loss: float = 0.0
    compute: float = 0.0
    wait: float = 0.0

    def add(self, loss: float, compute_s: float, wait_s: float) -> None:
        self.steps += 1
        self.loss += loss
        self.compute += compute_s
        self.wait += wait_s

    def line(self, worker: int, clock: int, version: int, batch: int) -> TrainLine:
        steps = max(1, self.steps)
        return TrainLine(
            worker=worker,
            step=clock,
            version=version,
            loss=self.loss / steps,
            samples_per_s=self.steps * batch / max(1e-9, time.time() - self.start),
            compute_s=self.compute / steps,
            wait_s=self.wait / steps,
        )


def result(
    train: Train,
    ps: ParameterServer,
    version: int,
    workers: dict[int, WorkerProgress],
    staleness: list[int],
    evaluation: dict[str, float],
    hosts: list[str],
    times: tuple[float, float],
    last_loss: float | None,
) -> Result:
    """The job's result: the runtime's one shape, with its parameter-server fields set."""
    wall, train_time = times
    total = sum(w.samples for w in workers.values())
    stale = staleness or [0]
    return Result(
        status="completed" if version >= train.steps else "failed",
        step=version,
        steps=train.steps,
        final_loss=last_loss,
        eval_loss=evaluation.get("loss"),
        eval_accuracy=evaluation.get("accuracy"),
        wall_time_s=round(wall, 3),
        train_time_s=round(train_time, 3),
        samples=total,
        samples_per_s=round(total / max(1e-9, train_time), 2),
        layout="ps",
        world_size=len(hosts),
        mode=ps.mode,
        servers=ps.servers,
        workers=len(hosts) - ps.servers,
        nodes={"servers": hosts[: ps.servers], "workers": hosts[ps.servers :]},
        staleness_mean=sum(stale) / len(stale),
        staleness_max=max(stale),
        per_worker={str(w): p.stats() for w, p in workers.items()},
    )
