"""Training on another number of ranks than the spec planned: the layout and the accumulation re-planned.

After a node loss the batch script relaunches the step on the nodes that are left (``restart.shrink``),
and a later requeue may bring the full node count back: the world size comes from the step, not
from the spec. :func:`replan` then plans the spec's parallel request on that world (the dim asked
for with -1, normally dp or fsdp, absorbs the change; tp and pp keep their degrees) and raises
gradient accumulation so that the global batch, and with it the optimisation, stays the same.
Checkpoints are DCP, so the state saved on one world loads resharded on another; the data order
is global (``runtime/data.py``), so the samples of every step do not depend on the world either.

Torch-free except for the RNG file count of a checkpoint; imported by the training loop only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from hpctrain.errors import HpctrainError
from hpctrain.rundir import CHECKPOINT_RNG, list_names, numbered
from hpctrain.spec.layout import Layout, LayoutError

if TYPE_CHECKING:
    from hpctrain.runtime.checkpoint import Restored
    from hpctrain.runtime.metrics import Metrics
    from hpctrain.spec import Resolved

log = logging.getLogger(__name__)


class ElasticError(HpctrainError):
    """This job cannot go on with the ranks it was given (one line: why)."""


def accumulation_for(batch_size: int, planned_data_world: int, grad_accum: int, data_world: int) -> int:
    """Micro-steps per optimizer step on ``data_world`` data shards for the same global batch.

    The micro-batch (samples a rank holds at once) must not grow, or the job that fitted in memory
    no longer does: the smallest accumulation >= ``grad_accum * planned / data_world`` that splits
    the global batch evenly. Raises :class:`ElasticError` when there is none.
    """
    micro_batch = batch_size // (planned_data_world * grad_accum)
    needed = -(-batch_size // (data_world * micro_batch))  # ceil: micro-batches no larger than planned
    for accumulation in range(max(1, needed), batch_size // data_world + 1):
        if batch_size % (data_world * accumulation) == 0:
            return accumulation
    raise ElasticError(
        f"cannot keep the global batch of {batch_size} on {data_world} data shards: "
        f"{batch_size} is not divisible by {data_world} x any accumulation of at least {needed}"
    )


@dataclass(frozen=True)
class Replan:
    """The job as this step runs it: ``resolved`` carries this world's size and accumulation."""

    resolved: Resolved
    planned_world: int
    planned_accum: int

    @property
    def world(self) -> int:
        return self.resolved.world_size

    @property
    def grad_accum(self) -> int:
        return self.resolved.job.train.grad_accum

    @property
    def changed(self) -> bool:
        return self.world != self.planned_world

    def announce(self, metrics: Metrics, restored: Restored | None) -> None:
        """Log ``shrunk``/``grew`` when this world differs from the one before (the checkpoint's
        writers, else the plan): from A to B ranks, the accumulation now used."""
        before = saved_world(restored.path) if restored is not None else None
        before = before or self.planned_world
        if before == self.world:
            return
        event = "shrunk" if self.world < before else "grew"
        fields = {  # world_size is a named field of the event line; the rest lands in its detail
            "world_size": self.world,
            "from_world": before,
            "planned_world": self.planned_world,
            "grad_accum": self.grad_accum,
            "planned_grad_accum": self.planned_accum,
            "step": restored.step if restored is not None else 0,
        }
        log.warning(
            "%s from %d to %d ranks; gradient accumulation %d", event, before, self.world, self.grad_accum
        )
        metrics.event(event, **fields)


def replan(resolved: Resolved, world_size: int, tasks_per_node: int | None = None) -> Replan:
    """The job re-planned on ``world_size`` ranks (unchanged when that is the planned world)."""
    train = resolved.job.train
    planned = Replan(resolved, resolved.world_size, train.grad_accum)
    if world_size == resolved.world_size or resolved.parallel.ps is not None:
        return planned
    request = train.parallel_dims
    before = request.layout(resolved.world_size)
    try:
        layout = Layout.plan(request.degrees, world_size, tasks_per_node)
    except LayoutError as error:
        move = f"from {resolved.world_size} to {world_size} ranks"
        raise ElasticError(f"cannot re-plan the layout {before.name} {move}: {error}") from None
    accumulation = accumulation_for(train.batch_size, before.data_world, train.grad_accum, layout.data_world)
    job = msgspec.structs.replace(resolved.job, train=msgspec.structs.replace(train, grad_accum=accumulation))
    return Replan(
        msgspec.structs.replace(resolved, job=job, world_size=world_size),
        resolved.world_size,
        train.grad_accum,
    )


def saved_world(checkpoint: Path) -> int | None:
    """How many ranks wrote a checkpoint: each rank saves its own RNG file."""
    count = len(list(numbered(list_names(checkpoint), CHECKPOINT_RNG)))
    return count or None
