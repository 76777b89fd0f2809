"""FSDP2 layouts: fully_shard per shard unit then the root, HSDP over dp x fsdp, and tensor parallel inside.

One strategy covers every mix of dp, fsdp and tp without pipelining:

* fsdp only: ``fully_shard`` over the 1-D "fsdp" mesh (ZeRO-3, or ZeRO-2 with
  ``reshard_after_forward: false``);
* dp x fsdp: HSDP, ``fully_shard`` over the 2-D ("dp", "fsdp") mesh: replicate across dp, shard
  within fsdp;
* tp (with any of the above): the task's ``tensor_parallel_plan`` on the "tp" mesh first, then
  FSDP2 over the data dims turns the TP DTensors into 2-D ones. With tp and dp but no fsdp the dp
  dim is sharded too (FSDP2 has no public pure-replicate mode for DTensor parameters; the maths is
  the same as DDP, the memory lower).

On a GPU the sharded parameters are gathered in bf16 and gradients reduced in fp32
(``MixedPrecisionPolicy``) unless ``train.precision`` is fp32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hpctrain.runtime.parallel import dtensors
from hpctrain.runtime.parallel.base import LossFn, Strategy, accumulate, maybe_compile
from hpctrain.runtime.parallel.tp import apply_tensor_parallel
from hpctrain.runtime.task import Batch, Task

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from hpctrain.runtime.bootstrap import DistInfo
    from hpctrain.runtime.mesh import TaskMesh
    from hpctrain.spec import Resolved


# ----------------------------------------------------------------------------------------------
# FSDP2 pieces (pp.py wraps its stages with them too)
# ----------------------------------------------------------------------------------------------


def apply_fsdp(
    model: nn.Module,
    units: Sequence[nn.Module],
    data_mesh: DeviceMesh,
    reshard_after_forward: bool,
    param_dtype: torch.dtype | None,
    cpu_offload: bool = False,
) -> None:
    """``fully_shard`` each unit, then the root (which picks up the remaining parameters).

    A 2-D ``data_mesh`` (dp, fsdp) gives HSDP. ``param_dtype`` bf16 gathers parameters in bf16
    while keeping fp32 master shards and fp32 gradient reduction. ``cpu_offload`` keeps the
    sharded parameters, their gradients and so the optimizer state in pinned host memory
    (``CPUOffloadPolicy``): each unit's parameters are copied to the GPU for its forward and
    backward only, and the optimizer step runs on the CPU.
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kwargs: dict[str, Any] = {"mesh": data_mesh}
    if cpu_offload:
        # Pinned host memory makes the copies asynchronous; it needs an accelerator to pin for.
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=data_mesh.device_type != "cpu")
    if param_dtype is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for unit in units:
        fully_shard(unit, reshard_after_forward=reshard_after_forward, **kwargs)
    # The root's parameters (embeddings, head) are needed right after the last unit's forward and
    # first in backward; resharding them would only add an all-gather.
    fully_shard(model, reshard_after_forward=False, **kwargs)


def fsdp_param_dtype(strategy: Strategy) -> torch.dtype | None:
    """bf16 gathered parameters on GPU unless the job asked for fp32."""
    if strategy.device.type == "cuda" and strategy.train.precision != "fp32":
        return torch.bfloat16
    return None


@contextlib.contextmanager
def gradient_sync(model: nn.Module, enabled: bool) -> Iterator[None]:
    """FSDP2's counterpart of DDP's ``no_sync``: reduce gradients only on the last micro-batch."""
    setter = getattr(model, "set_requires_gradient_sync", None)
    if setter is not None:
        setter(enabled)
    yield


# ----------------------------------------------------------------------------------------------
# The strategy
# ----------------------------------------------------------------------------------------------


class ShardedStrategy(Strategy):
    """dp / fsdp / tp in any mix (no pipeline): TP plan, then FSDP2 over the data dims."""

    name = "fsdp"

    def __init__(self, resolved: Resolved, dist_info: DistInfo, task_mesh: TaskMesh, task: Task) -> None:
        super().__init__(resolved, dist_info, task_mesh, task)
        cpu_offload = resolved.parallel.cpu_offload
        # With CPU offload the model stays in host memory: fully_shard takes one unit at a time
        # to the GPU to shard it and puts the shards back, so the whole model never has to fit.
        model = task.model if cpu_offload else task.model.to(self.device)
        self.tensor_parallel = self.layout.enabled("tp")
        if self.tensor_parallel:
            apply_tensor_parallel(model, task, task_mesh.submesh(("tp",)))
        data_mesh = task_mesh.submesh(("dp", "fsdp"))
        if data_mesh is not None:
            units = task.shard_units(model) if task.shard_units is not None else []
            apply_fsdp(
                model,
                units,
                data_mesh,
                resolved.parallel.reshard_after_forward,
                fsdp_param_dtype(self),
                cpu_offload=cpu_offload,
            )
        maybe_compile(model, self.train.compile)
        self.model = model
        self.name = self.layout.name

    def _step_context(self, last: bool) -> contextlib.AbstractContextManager[Any]:
        stack = contextlib.ExitStack()
        stack.enter_context(gradient_sync(self.model, last))
        if self.tensor_parallel:
            from torch.distributed.tensor.parallel import loss_parallel

            # Cross-entropy on the vocab-sharded logits without gathering them (forward and
            # backward both run inside: the context also rewrites the loss's backward).
            stack.enter_context(loss_parallel())
        return stack

    def train_step(self, microbatches: Sequence[Batch], loss_fn: LossFn) -> torch.Tensor:
        loss = accumulate(self.model, microbatches, loss_fn, self.autocast, self._step_context)
        if self.tensor_parallel:
            dtensors.align_grad_placements(list(self.model.parameters()))
        return dtensors.plain_loss(loss)

    def eval_forward(self, inputs: torch.Tensor) -> torch.Tensor | None:
        with self.autocast():
            return dtensors.local_output(self.model(inputs))

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        params = list(self.model.parameters())
        total = dtensors.grad_norm_squared(params).sqrt()
        dtensors.clip_scaled(params, total, max_norm)
        return total

    def describe(self) -> str:
        layout = self.layout
        return (
            f"{self.name} (dp={layout.dp} fsdp={layout.fsdp} tp={layout.tp}, "
            f"reshard_after_forward={self.resolved.parallel.reshard_after_forward}) " + super().describe()
        )
