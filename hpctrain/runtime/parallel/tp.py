"""Tensor parallel: the task's ``tensor_parallel_plan`` on the "tp" mesh dim, composed with FSDP2 and dp.

The plan is the user's (``Task.tensor_parallel_plan``, e.g. Megatron-style column/row splits via
``parallelize_module``); this module checks it exists, applies it to the "tp" sub-mesh and hands the
rest of the layout (dp / fsdp over the remaining dims, the loss under ``loss_parallel``) to
:class:`hpctrain.runtime.parallel.fsdp.ShardedStrategy`. Pipeline stages call
:func:`apply_tensor_parallel` on each stage module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch.distributed as dist
from torch import nn

from hpctrain.runtime.parallel.base import Strategy
from hpctrain.runtime.task import Task

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from hpctrain.runtime.bootstrap import DistInfo
    from hpctrain.spec import Resolved


def apply_tensor_parallel(model: nn.Module, task: Task, mesh: DeviceMesh | None) -> None:
    """Parallelize ``model`` in place over the job mesh's "tp" dim."""
    from hpctrain.runtime.parallel.fsdp import submesh

    tp_mesh = submesh(mesh, ("tp",))
    if tp_mesh is None:
        raise RuntimeError("tensor parallel needs a device mesh with a 'tp' dim > 1")
    if task.tensor_parallel_plan is None:
        raise ValueError(
            "train.parallel.tp > 1 but the entrypoint's Task has no tensor_parallel_plan "
            "(see hpctrain.examples.gpt for one)"
        )
    task.tensor_parallel_plan(model, tp_mesh)


def build(resolved: Resolved, dist_info: DistInfo, mesh: DeviceMesh | None, task: Task) -> Strategy:
    from hpctrain.runtime.parallel.fsdp import ShardedStrategy

    if not dist.is_initialized():
        raise RuntimeError("tp needs the process group (world size > 1)")
    return ShardedStrategy(resolved, dist_info, mesh, task)
