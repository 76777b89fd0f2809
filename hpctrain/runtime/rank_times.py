"""Per-rank compute and collective-wait time per log interval, gathered on rank 0 to flag stragglers.

How a rank's step splits into compute and waiting, without an extra synchronisation:

* a gradient hook stamps the moment this rank's backward produced its last gradient ("ready");
  from then until ``train_step`` returns, the rank only waits for the gradient all-reduce, i.e.
  for the slowest peer (DDP, which synchronises inside backward);
* ``compute_s`` is the interval's wall time minus those waits: data, forward, backward, optimizer.

On CPU the stamps are ``perf_counter`` readings; on CUDA they are CUDA events, read after the
synchronisation the loop already does at each log interval. The times travel with the loss in the
log interval's one all-reduce (a vector of 1 + 2 x world floats instead of one), so stragglers
cost no collective of their own. Layouts whose hooks never fire (FSDP2 sets sharded gradients
without them) report their waits as compute: their ranks then look alike and nobody is flagged.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hpctrain.rundir import EventLine, RankTimesLine
from hpctrain.rundir.stragglers import StragglerRule, phrase

# Stamps are kept to the millisecond in metrics.jsonl: a 1024-rank line stays a few tens of KiB.
DIGITS = 3
PHASES = ("ready", "synced")


class _Step:
    """One step's 'ready' and 'synced' marks: perf_counter floats, or CUDA events (reused)."""

    def __init__(self, cuda: bool) -> None:
        self.events = {name: torch.cuda.Event(enable_timing=True) for name in PHASES} if cuda else {}
        self.marks: dict[str, Any] = {}

    def mark(self, name: str) -> None:
        if self.events:
            # Recording again moves the event: the last gradient of a step is the one that counts.
            self.events[name].record()
            self.marks[name] = self.events[name]
        else:
            self.marks[name] = time.perf_counter()

    def waited_s(self) -> float:
        ready, synced = self.marks.get("ready"), self.marks.get("synced")
        if ready is None or synced is None:
            return 0.0
        return ready.elapsed_time(synced) / 1000 if self.events else max(0.0, synced - ready)


class _Stamps:
    """The steps of one log interval; CUDA events are read only after the loop's interval sync."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.steps: list[_Step] = []
        self._spare: list[_Step] = []

    def start(self) -> None:
        step = self._spare.pop() if self._spare else _Step(self.cuda)
        step.marks.clear()
        self.steps.append(step)

    def mark(self, name: str) -> None:
        if self.steps:
            self.steps[-1].mark(name)

    def waited_s(self) -> float:
        """Seconds between 'ready' and 'synced', summed over the interval; starts the next interval."""
        total = sum(step.waited_s() for step in self.steps)
        self._spare.extend(self.steps)
        self.steps = []
        return total


class RankTimes:
    """One rank's side of straggler detection; rank 0 also applies the rule and writes the lines."""

    def __init__(
        self, rank: int, world_size: int, device: torch.device, write: Any, hostname: str = ""
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.write = write
        self.stamps = _Stamps(device)
        self.rule = StragglerRule()
        self.interval_start = time.perf_counter()
        self.compute_s: list[float] = []
        self.wait_s: list[float] = []
        self._hooks: list[Any] = []
        self._fired: list[int] = []
        self._pruned = False
        # Node names cross the wire once, at start-up, not every interval.
        self.nodes: list[Any] = [None] * world_size if rank == 0 else []
        dist.gather_object(hostname or socket.gethostname(), self.nodes if rank == 0 else None, dst=0)

    # -- the hot path: three stamps per step ------------------------------------------------------

    def hook_gradients(self, parameters: Iterable[nn.Parameter]) -> None:
        """Stamp 'ready' when a gradient lands. After the first step only the parameter whose gradient
        came last keeps its hook: one call per step, not one per tensor."""
        for parameter in parameters:
            if parameter.requires_grad:
                hook = self._hook(len(self._hooks))
                self._hooks.append(parameter.register_post_accumulate_grad_hook(hook))

    def _hook(self, index: int) -> Any:
        def on_gradient(_: torch.Tensor) -> None:
            self.stamps.mark("ready")
            if not self._pruned:
                self._fired.append(index)

        return on_gradient

    def step_started(self) -> None:
        # An interval runs from its first step to its all-reduce: evaluation and checkpoint writes
        # between intervals are left out (they are not what makes one rank slower than the others).
        if not self.stamps.steps:
            self.interval_start = time.perf_counter()
        self.stamps.start()

    def step_synced(self) -> None:
        """``train_step`` returned: gradients are synchronised (the wait for peers is over)."""
        self.stamps.mark("synced")
        if not self._pruned and self._fired:
            last = self._fired[-1]
            for index, handle in enumerate(self._hooks):
                if index != last:
                    handle.remove()
            self._hooks = [self._hooks[last]]
            self._pruned = True

    # -- once per log interval ---------------------------------------------------------------------

    def mean_with_loss(self, loss: torch.Tensor) -> float:
        """The mean loss over ranks, from the interval's one all-reduce, which also carries every
        rank's (compute, wait) seconds in its own slots (the others add zeros)."""
        wall = time.perf_counter() - self.interval_start
        wait = min(self.stamps.waited_s(), wall)
        packed = torch.zeros(1 + 2 * self.world_size, dtype=torch.float32, device=loss.device)
        packed[0] = loss.detach().float()
        packed[1 + 2 * self.rank] = wall - wait
        packed[2 + 2 * self.rank] = wait
        dist.all_reduce(packed, op=dist.ReduceOp.SUM)
        values = packed.tolist()
        self.compute_s = [round(v, DIGITS) for v in values[1::2]]
        self.wait_s = [round(v, DIGITS) for v in values[2::2]]
        return values[0] / self.world_size

    def report(self, step: int) -> None:
        """Rank 0: the interval's RankTimesLine, and an event for each rank that just became a straggler."""
        if self.rank != 0 or not self.compute_s:
            return
        flagged, newly = self.rule.update(self.compute_s)
        line = RankTimesLine(
            step=step,
            compute_s=self.compute_s,
            wait_s=self.wait_s,
            nodes=[str(n) for n in self.nodes],
            stragglers=flagged,
        )
        self.write(line)
        for rank in newly:
            self.write(EventLine(event="straggler", step=step, reason=phrase(line, rank)))
