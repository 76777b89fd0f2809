"""When a rank is hung, and how long collectives may wait: pure arithmetic over heartbeats (torch-free).

A rank is hung when its step has not advanced for longer than the allowance:
``max(hang_timeout, step_time_factor x median step time)``, raised to ``slow_phase_timeout``
while a running rank checkpoints or evaluates, and to ``startup_timeout`` while a running rank
has not finished its first step (imports, compile, checkpoint load). A rank that has not ticked
for the steady allowance gets no extension.

Idle time is counted on each node's own clock (the node file's ``time`` minus the rank's
``step_since``) plus the file's age on the watchdog's clock, so clock skew between nodes only
shifts the file age, which is bounded by the node-silence rule anyway.
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hpctrain.rundir import Heartbeat, RankState, RunDir
from hpctrain.spec.job import Watchdog

SLOW_PHASES = frozenset({"checkpoint", "eval"})
SILENT_AFTER_S = 5.0
"""A rank ticks every second: no tick for this long (margin for a loaded node) means it is not running."""
NODE_SILENT_MIN_S = 10.0
ENDING_MARGIN_S = 60.0
"""What the watchdog needs after a hang's allowance to notice it, collect stacks and end the step."""
NCCL_TRACE_ENTRIES = 2000


@dataclass(frozen=True)
class Seen:
    """One rank as the watchdog sees it in its node's heartbeat."""

    rank: int
    node: str
    step: int
    phase: str
    idle_s: float
    """Seconds since the rank's current step began."""
    silent_s: float
    """Seconds since the rank's last tick."""
    step_s: float | None
    pid: int | None

    @property
    def responsive(self) -> bool:
        return self.silent_s < SILENT_AFTER_S

    def state(self, waiting_in: str = "") -> RankState:
        return RankState(
            rank=self.rank,
            node=self.node,
            step=self.step,
            phase=self.phase,
            idle_s=round(self.idle_s, 1),
            silent_s=round(self.silent_s, 1),
            waiting_in=waiting_in,
        )


def observe(beats: Iterable[Heartbeat], now: float) -> list[Seen]:
    """Every rank of the given node files, sorted by rank (a rank in two files: the newer wins)."""
    found: dict[int, Seen] = {}
    for beat in sorted(beats, key=lambda b: b.time):
        age = max(0.0, now - beat.time)
        for rank, rank_beat in beat.ranks.items():
            since = rank_beat.step_since if rank_beat.step_since is not None else rank_beat.time
            found[rank] = Seen(
                rank=rank,
                node=beat.node,
                step=rank_beat.step,
                phase=rank_beat.phase,
                idle_s=max(0.0, beat.time - since) + age,
                silent_s=max(0.0, beat.time - rank_beat.time) + age,
                step_s=rank_beat.step_s,
                pid=rank_beat.pid,
            )
    return [found[rank] for rank in sorted(found)]


def median_step_s(samples: Iterable[float]) -> float | None:
    usable = [s for s in samples if s > 0]
    return statistics.median(usable) if usable else None


def steady_allowance(settings: Watchdog, median_s: float | None) -> float:
    return max(settings.hang_timeout, settings.step_time_factor * (median_s or 0.0))


def not_running(settings: Watchdog, seen: Seen, median_s: float | None) -> bool:
    """No tick for the whole steady allowance: STOPped or frozen. A shorter silence is not enough:
    loading a big C library (torch's, at startup) holds the GIL for seconds on a loaded node."""
    return seen.silent_s > steady_allowance(settings, median_s)


def allowance(settings: Watchdog, ranks: Iterable[Seen], median_s: float | None) -> float:
    """Seconds a step may last, for the whole job: the ranks wait for each other, so one rank
    that saves a checkpoint (or has not finished its first step) extends everyone's allowance."""
    limit = steady_allowance(settings, median_s)
    working = [r for r in ranks if not not_running(settings, r, median_s)]
    if any(r.phase in SLOW_PHASES for r in working):
        limit = max(limit, settings.slow_phase_timeout)
    if any(r.step_s is None for r in working):
        limit = max(limit, settings.startup_timeout)
    return limit


def overdue(settings: Watchdog, ranks: Iterable[Seen], median_s: float | None) -> list[Seen]:
    """The ranks whose step has lasted longer than the allowance; a rank that does not run does
    no work, so it gets no startup or slow-phase extension."""
    ranks = list(ranks)
    limit = allowance(settings, ranks, median_s)
    steady = steady_allowance(settings, median_s)
    return [r for r in ranks if r.idle_s > (steady if not_running(settings, r, median_s) else limit)]


def node_silent_after(settings: Watchdog) -> float:
    """A node file older than this: the node (or every rank on it) has stopped."""
    return max(3 * settings.heartbeat_interval, settings.heartbeat_interval + NODE_SILENT_MIN_S)


# ----------------------------------------------------------------------------------------------
# Collective timeouts: the backstop behind the watchdog
# ----------------------------------------------------------------------------------------------


def collective_timeout_s(settings: Watchdog, train_timeout_s: int) -> int:
    """The process group's timeout. With the watchdog on, it must outlast every fixed allowance
    (or a collective would time out before the watchdog could name the hung rank), and it bounds
    the job should the watchdog itself be gone: a job cannot outlive the watchdog by more than
    ENDING_MARGIN_S. A longer `train.timeout_s` is the user's choice and wins."""
    if not settings.enabled:
        return train_timeout_s
    longest = max(settings.hang_timeout, settings.startup_timeout, settings.slow_phase_timeout)
    backstop = longest + node_silent_after(settings) + ENDING_MARGIN_S
    return max(train_timeout_s, math.ceil(backstop))


def nccl_env(run: RunDir, timeout_s: int, flight_recorder_names: bool = True) -> dict[str, str]:
    """NCCL's own error handling, flight recorder and dump on timeout (into failures/).

    torch 2.7 renamed the flight recorder's variables TORCH_FR_* (the old TORCH_NCCL_* names still
    work there, with a warning on every rank); `flight_recorder_names` picks the new ones."""
    buffer, dump_file = (
        ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE")
        if flight_recorder_names
        else ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    )
    return {
        # A collective that times out tears the process down instead of hanging in NCCL forever.
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        # The flight recorder: the last collectives of each rank, dumped when one times out.
        buffer: str(NCCL_TRACE_ENTRIES),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        dump_file: str(run.failures / "nccl-trace-rank-"),
        # NCCL's own monitor thread kills a process whose watchdog thread is stuck: after ours.
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(timeout_s + int(ENDING_MARGIN_S)),
    }


def apply_nccl_env(run_dir: Path, timeout_s: int, backend: str, torch_version: str) -> None:
    """Set the NCCL variables the user (or the site) has not set; on NCCL, make room for the dumps."""
    run = RunDir(run_dir)
    major_minor = tuple(int(p) for p in re.findall(r"\d+", torch_version)[:2])
    for key, value in nccl_env(run, timeout_s, flight_recorder_names=major_minor >= (2, 7)).items():
        os.environ.setdefault(key, value)
    if backend == "nccl":
        run.failures.mkdir(parents=True, exist_ok=True)
