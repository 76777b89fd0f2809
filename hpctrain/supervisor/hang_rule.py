"""When a rank is hung: pure arithmetic over the node heartbeat files (torch-free).

A rank is hung when its step has not advanced for longer than the allowance:
``max(hang_timeout, step_time_factor x median step time)``, raised to ``slow_phase_timeout``
while a running rank checkpoints or evaluates, and to ``startup_timeout`` while a running rank
has not finished its first step (imports, compile, checkpoint load). A rank that has not ticked
for the steady allowance, or (once it has trained, and while it neither saves nor evaluates) for
``stopped_timeout`` by its node's own file, does not run: it is hung at once and gets no extension.

Idle time is counted on each node's own clock (the node file's ``time`` minus the rank's
``step_since``) plus the file's age on the watchdog's clock, so clock skew between nodes only
shifts the file age, which is bounded by the node-silence rule anyway.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from hpctrain.rundir import Heartbeat, RankState
from hpctrain.rundir.slots import SILENT_AFTER_S
from hpctrain.spec.job import Watchdog

SLOW_PHASES = frozenset({"checkpoint", "eval"})


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
    stopped_after: float | None = None
    """``watchdog.stopped_timeout`` where it applies to the rank (see :func:`stopped_after`)."""
    unticked_s: float = 0.0
    """The part of `silent_s` its node's own file records: a rank STOPped on a node that still
    writes. The rest is the file's age (a whole node gone quiet: the node-silence rule's case)."""

    @property
    def stopped(self) -> bool:
        """Its node writes on, and it has not ticked for ``stopped_timeout``."""
        return self.unticked_s > (self.stopped_after or math.inf)

    @property
    def responsive(self) -> bool:
        return self.silent_s < SILENT_AFTER_S and not self.stopped

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


def stopped_after(stopped_timeout: float | None, step_s: float | None, phase: str) -> float | None:
    """`stopped_timeout` for a rank that has finished a step and neither saves nor evaluates; None
    otherwise: imports at start-up and long saves may hold the GIL (and so the ticks) for seconds."""
    if stopped_timeout is None or step_s is None or phase in SLOW_PHASES:
        return None
    return stopped_timeout


def seen_ranks(beats: Iterable[Heartbeat], now: float, stopped_timeout: float | None = None) -> list[Seen]:
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
                stopped_after=stopped_after(stopped_timeout, rank_beat.step_s, rank_beat.phase),
                unticked_s=max(0.0, beat.time - rank_beat.time),
            )
    return [found[rank] for rank in sorted(found)]


def median_step_s(samples: Iterable[float]) -> float | None:
    usable = [s for s in samples if s > 0]
    return statistics.median(usable) if usable else None


def steady_allowance(settings: Watchdog, median_s: float | None) -> float:
    return max(settings.hang_timeout, settings.step_time_factor * (median_s or 0.0))


def not_running(settings: Watchdog, seen: Seen, median_s: float | None) -> bool:
    """No tick for the whole steady allowance, or stopped (see :attr:`Seen.stopped`): STOPped or
    frozen."""
    return seen.silent_s > steady_allowance(settings, median_s) or seen.stopped


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
    """The ranks whose step has lasted longer than the allowance, and those that do not run: they do
    no work, so they get no startup or slow-phase extension."""
    ranks = list(ranks)
    limit = allowance(settings, ranks, median_s)
    return [r for r in ranks if not_running(settings, r, median_s) or r.idle_s > limit]
