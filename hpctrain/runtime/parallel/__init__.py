"""One module per parallelism; each wraps the user's model for a slice of the device mesh.

``build_strategy`` picks the layout from the resolved dims: DDP (or a single process) here, and
for any fsdp/tp/pp dim > 1 the module ``hpctrain.runtime.parallel.<fsdp|tp|pp>`` by name, each
exposing ``build(resolved, dist, mesh, task) -> Strategy``. Combined layouts go to the outermost
special dim's module (pp, then tp, then fsdp), which composes the inner ones itself.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from hpctrain.runtime.mesh import requested_dims
from hpctrain.runtime.parallel.base import SingleStrategy, Strategy

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from hpctrain.runtime.bootstrap import DistInfo
    from hpctrain.runtime.task import Task
    from hpctrain.spec import Resolved

__all__ = ["Strategy", "build_strategy", "layout_module"]


def layout_module(resolved: Resolved) -> str:
    """The module name that builds this job's strategy: single, ddp, fsdp, tp or pp."""
    dims = resolved.parallel
    if dims.ps is not None:
        raise ValueError("parameter-server jobs do not use a collective strategy")
    kept = requested_dims(resolved)
    for name in ("pp", "tp", "fsdp"):
        if getattr(dims, name) > 1 or name in kept:
            return name
    return "ddp" if resolved.world_size > 1 else "single"


def build_strategy(resolved: Resolved, dist: DistInfo, mesh: DeviceMesh | None, task: Task) -> Strategy:
    name = layout_module(resolved)
    if name == "single":
        return SingleStrategy(resolved, dist, mesh, task)
    module = importlib.import_module(f"hpctrain.runtime.parallel.{name}")
    return module.build(resolved, dist, mesh, task)
