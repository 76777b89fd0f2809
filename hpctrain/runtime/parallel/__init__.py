"""One module per parallelism; each wraps the user's model for a slice of the device mesh.

``build_strategy`` looks up the strategy class for the job's layout (``Layout.strategy``) in
:data:`STRATEGIES`. Combined layouts go to the outermost active model-parallel dim (pp, then tp,
then fsdp), whose strategy composes the inner ones itself: the pipeline wraps its stages with
tp and FSDP2/DDP, and the sharded strategy applies tp before FSDP2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch.distributed as dist

from hpctrain.runtime.mesh import job_layout
from hpctrain.runtime.parallel.base import SingleStrategy, Strategy
from hpctrain.runtime.parallel.ddp import DDPStrategy
from hpctrain.runtime.parallel.fsdp import ShardedStrategy
from hpctrain.runtime.parallel.pp import PipelineStrategy

if TYPE_CHECKING:
    from hpctrain.runtime.bootstrap import DistInfo
    from hpctrain.runtime.mesh import TaskMesh
    from hpctrain.runtime.task import Task
    from hpctrain.spec import Resolved

__all__ = ["STRATEGIES", "Strategy", "build_strategy", "layout_module"]

STRATEGIES: dict[str, type[Strategy]] = {
    "single": SingleStrategy,
    "ddp": DDPStrategy,
    "fsdp": ShardedStrategy,
    "tp": ShardedStrategy,
    "pp": PipelineStrategy,
}
"""``Layout.strategy`` -> the class that runs it."""


def layout_module(resolved: Resolved) -> str:
    """The name of this job's strategy (single, ddp, fsdp, tp or pp), as metrics and results record it."""
    if resolved.parallel.ps is not None:
        raise ValueError("parameter-server jobs do not use a collective strategy")
    return job_layout(resolved).strategy


def build_strategy(resolved: Resolved, dist_info: DistInfo, task_mesh: TaskMesh, task: Task) -> Strategy:
    name = task_mesh.layout.strategy
    if name != "single" and not dist.is_initialized():
        raise RuntimeError(f"the {name} strategy needs the process group")
    return STRATEGIES[name](resolved, dist_info, task_mesh, task)
