"""Which ranks are stragglers: the rule over per-rank compute times, and how `status` says it (torch-free).

The runtime (``hpctrain/runtime/rank_times.py``) measures each rank's compute and collective-wait
seconds per log interval and feeds the compute times to :class:`StragglerRule` on rank 0; the
login side reads the resulting :class:`~hpctrain.rundir.RankTimesLine` back and phrases it with
:func:`describe`. Both halves share this module, so the rule has one definition.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from hpctrain.rundir import RankTimesLine

# A rank is slow in an interval when its compute time is this far above the median of all ranks
# (a fraction: 0.2 = 20%), and a straggler once it has been slow this many intervals in a row:
# one slow interval is a hiccup (a page fault storm, a checkpoint write), three are a pattern.
SLOW_FRACTION = 0.20
SLOW_INTERVALS = 3


def excess(compute_s: Sequence[float]) -> list[float]:
    """Each rank's compute time over the median of all ranks, minus one (0.45 = 45% slower).

    All zeros when the median is not positive: nothing measured says nothing about anyone."""
    if not compute_s:
        return []
    middle = statistics.median(compute_s)
    if middle <= 0:
        return [0.0] * len(compute_s)
    return [value / middle - 1.0 for value in compute_s]


@dataclass
class StragglerRule:
    """Flags a rank once its compute time was > `fraction` above the median `intervals` times in a row.

    A flagged rank stays flagged until an interval where it is not slow; a change in the number
    of ranks (a restart on fewer nodes) starts the counts afresh.
    """

    fraction: float = SLOW_FRACTION
    intervals: int = SLOW_INTERVALS
    streaks: list[int] = field(default_factory=list)

    def update(self, compute_s: Sequence[float]) -> tuple[list[int], list[int]]:
        """Feed one interval; returns (flagged ranks, ranks flagged for the first time in this streak)."""
        if len(self.streaks) != len(compute_s):
            self.streaks = [0] * len(compute_s)
        # A single rank has no peers to be slower than.
        over = excess(compute_s) if len(compute_s) > 1 else [0.0] * len(compute_s)
        newly: list[int] = []
        for rank, amount in enumerate(over):
            self.streaks[rank] = self.streaks[rank] + 1 if amount > self.fraction else 0
            if self.streaks[rank] == self.intervals:
                newly.append(rank)
        flagged = [rank for rank, streak in enumerate(self.streaks) if streak >= self.intervals]
        return flagged, newly


def node_of(line: RankTimesLine, rank: int) -> str:
    return line.nodes[rank] if rank < len(line.nodes) else "?"


def phrase(line: RankTimesLine, rank: int) -> str:
    """`rank 3 on node2, +45%`: who, where, and how much slower than the median rank."""
    over = excess(line.compute_s)
    amount = over[rank] if rank < len(over) else 0.0
    return f"rank {rank} on {node_of(line, rank)}, {amount:+.0%}"


def describe(line: RankTimesLine | None) -> list[str]:
    """One `straggler: rank 3 on node2, +45%` line per rank the latest interval flagged."""
    if line is None:
        return []
    return [f"straggler: {phrase(line, rank)}" for rank in line.stragglers]
