"""What server 0 reports: per-worker progress, the metrics window, and the job's result."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hpctrain.spec import ParameterServer, Train

from .transport import Header


@dataclass
class WorkerStats:
    """One worker as its servers see it."""

    samples: int = 0
    pushes: int = 0
    first: float | None = None
    last: float = 0.0
    compute_s: float = 0.0
    wait_s: float = 0.0
    status: str = "running"
    reason: str = ""

    def record(self, header: Header, now: float) -> None:
        self.first = self.first if self.first is not None else now
        self.last, self.samples, self.pushes = now, self.samples + header.samples, self.pushes + 1
        self.compute_s += header.compute_s
        self.wait_s += header.wait_s

    def summary(self) -> dict[str, Any]:
        span = self.last - (self.first or self.last)
        steps = max(1, self.pushes - 1)  # the first push carries no previous step's times
        return {
            "status": self.status,
            "reason": self.reason,
            "steps": self.pushes,
            "samples": self.samples,
            "samples_per_s": self.samples / span if self.pushes > 1 and span > 0 else 0.0,
            "compute_s": self.compute_s / steps,
            "wait_s": self.wait_s / steps,
        }


@dataclass
class Window:
    """What server 0 saw since its last metrics line."""

    start: float = field(default_factory=time.time)
    losses: list[float] = field(default_factory=list)
    samples: int = 0
    staleness: list[int] = field(default_factory=list)

    def line(self, version: int, steps: int, alive: int, ps: ParameterServer) -> dict[str, Any]:
        stale = self.staleness or [0]
        return {
            "step": version,
            "steps": steps,
            "loss": sum(self.losses) / max(1, len(self.losses)),
            "samples_per_s": self.samples / max(1e-9, time.time() - self.start),
            "staleness_mean": sum(stale) / len(stale),
            "staleness_max": max(stale),
            "workers_alive": alive,
            "mode": ps.mode,
            "feeding": ps.feeding,
        }


def result(
    train: Train,
    ps: ParameterServer,
    version: int,
    stats: dict[int, WorkerStats],
    staleness: list[int],
    evaluation: dict[str, float],
    hosts: list[str],
    times: tuple[float, float],
    last_loss: float | None,
) -> dict[str, Any]:
    """The job's result, in the runtime's shape plus the parameter-server fields."""
    wall, train_time = times
    total = sum(s.samples for s in stats.values())
    stale = staleness or [0]
    return {
        "status": "completed" if version >= train.steps else "failed",
        "step": version,
        "steps": train.steps,
        "final_loss": last_loss,
        "eval_loss": evaluation.get("loss"),
        "eval_accuracy": evaluation.get("accuracy"),
        "wall_time_s": round(wall, 3),
        "train_time_s": round(train_time, 3),
        "samples_per_s": round(total / max(1e-9, train_time), 2),
        "step_time_median_s": None,
        "layout": "ps",
        "world_size": len(hosts),
        "mode": ps.mode,
        "feeding": ps.feeding,
        "servers": ps.servers,
        "workers": len(hosts) - ps.servers,
        "nodes": {"servers": hosts[: ps.servers], "workers": hosts[ps.servers :]},
        "staleness_mean": sum(stale) / len(stale),
        "staleness_max": max(stale),
        "per_worker": {str(w): s.summary() for w, s in stats.items()},
    }
