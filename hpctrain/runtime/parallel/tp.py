"""Tensor parallel: apply the task's ``tensor_parallel_plan`` to a module over the "tp" sub-mesh.

The plan is the user's (``Task.tensor_parallel_plan``, e.g. Megatron-style column/row splits via
``parallelize_module``); this module checks it exists and applies it. The rest of a tp layout
(dp / fsdp over the remaining dims, the loss under ``loss_parallel``) is
:class:`hpctrain.runtime.parallel.fsdp.ShardedStrategy`'s; pipeline stages apply it per stage module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from hpctrain.runtime.task import Task

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


def apply_tensor_parallel(model: nn.Module, task: Task, tp_mesh: DeviceMesh | None) -> None:
    """Parallelize ``model`` in place over ``tp_mesh`` (the job mesh's "tp" dim)."""
    if tp_mesh is None:
        raise RuntimeError("tensor parallel needs a device mesh with a 'tp' dim")
    if task.tensor_parallel_plan is None:
        raise ValueError(
            "train.parallel.tp > 1 but the entrypoint's Task has no tensor_parallel_plan "
            "(see hpctrain.examples.gpt for one)"
        )
    task.tensor_parallel_plan(model, tp_mesh)
