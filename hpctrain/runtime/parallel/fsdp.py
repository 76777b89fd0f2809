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
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from hpctrain.runtime.parallel.base import LossFn, Strategy, accumulate, maybe_compile
from hpctrain.runtime.task import Batch, Task

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from hpctrain.runtime.bootstrap import DistInfo
    from hpctrain.spec import Resolved


# ----------------------------------------------------------------------------------------------
# Helpers shared with tp.py and pp.py
# ----------------------------------------------------------------------------------------------


def submesh(mesh: DeviceMesh | None, names: Sequence[str]) -> DeviceMesh | None:
    """The sub-mesh over those of ``names`` that the job's mesh has (it keeps only dims > 1)."""
    if mesh is None or mesh.mesh_dim_names is None:
        return None
    present = tuple(name for name in names if name in mesh.mesh_dim_names)
    if not present:
        return None
    return mesh[present[0]] if len(present) == 1 else mesh[present]


def apply_fsdp(
    model: nn.Module,
    units: Sequence[nn.Module],
    data_mesh: DeviceMesh,
    reshard_after_forward: bool,
    param_dtype: torch.dtype | None,
) -> None:
    """``fully_shard`` each unit, then the root (which picks up the remaining parameters).

    A 2-D ``data_mesh`` (dp, fsdp) gives HSDP. ``param_dtype`` bf16 gathers parameters in bf16
    while keeping fp32 master shards and fp32 gradient reduction.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs: dict[str, Any] = {"mesh": data_mesh}
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


def grad_norm_squared(params: Sequence[nn.Parameter]) -> torch.Tensor:
    """Sum of squared gradient entries over the whole (sharded) model, as a local fp32 scalar.

    Grouped by (mesh, placements) so each group of DTensors costs one reduction; plain tensors
    (replicated across the ranks that hold them) count as they are. ``clip_grad_norm_`` cannot mix
    DTensors of different meshes (TP's 2-D and the root's 1-D ones), hence this.
    """
    groups: dict[Any, list[torch.Tensor]] = {}
    total = torch.zeros((), dtype=torch.float32)
    for param in params:
        grad = param.grad
        if grad is None:
            continue
        if isinstance(grad, DTensor):
            groups.setdefault((grad.device_mesh, grad.placements), []).append(grad)
        else:
            total = total.to(grad.device) + grad.detach().float().pow(2).sum()
    for grads in groups.values():
        squares = torch.stack([g.float().pow(2).sum() for g in grads]).sum()
        total = total.to(squares.device) + squares.full_tensor()
    return total


def clip_scaled(params: Sequence[nn.Parameter], total_norm: torch.Tensor, max_norm: float) -> None:
    """Scale every gradient by ``min(1, max_norm / total_norm)`` in place."""
    # One host sync per step, and a plain float multiplies DTensor and tensor gradients alike.
    coef = float(torch.clamp(max_norm / (total_norm + 1e-6), max=1.0))
    if coef < 1.0:
        for param in params:
            if param.grad is not None:
                param.grad.mul_(coef)


def align_grad_placements(params: Sequence[nn.Parameter]) -> None:
    """Give each DTensor gradient its parameter's placements.

    A vocab-sharded embedding's gradient comes back replicated (full size) from TP's backward;
    resharding it (a local slice) keeps gradient memory and the optimizer's work per shard.
    """
    for param in params:
        grad = param.grad
        if isinstance(grad, DTensor) and isinstance(param, DTensor) and grad.placements != param.placements:
            param.grad = grad.redistribute(param.device_mesh, param.placements)


def local_output(out: torch.Tensor) -> torch.Tensor:
    """Full logits from a vocab-sharded DTensor (evaluation and metrics need the whole row)."""
    return out.full_tensor() if isinstance(out, DTensor) else out


def plain_loss(loss: torch.Tensor) -> torch.Tensor:
    """A loss computed under ``loss_parallel`` is a replicated DTensor; the loop wants a tensor."""
    return loss.full_tensor() if isinstance(loss, DTensor) else loss


# ----------------------------------------------------------------------------------------------
# The strategy
# ----------------------------------------------------------------------------------------------


class ShardedStrategy(Strategy):
    """dp / fsdp / tp in any mix (no pipeline): TP plan, then FSDP2 over the data dims."""

    name = "fsdp"

    def __init__(self, resolved: Resolved, dist_info: DistInfo, mesh: DeviceMesh | None, task: Task) -> None:
        from hpctrain.runtime.parallel.tp import apply_tensor_parallel

        super().__init__(resolved, dist_info, mesh, task)
        dims = resolved.parallel
        model = task.model.to(self.device)
        self.tensor_parallel = dims.tp > 1 or (mesh is not None and "tp" in (mesh.mesh_dim_names or ()))
        if self.tensor_parallel:
            apply_tensor_parallel(model, task, mesh)
        data_mesh = submesh(mesh, ("dp", "fsdp"))
        if data_mesh is not None:
            units = task.shard_units(model) if task.shard_units is not None else []
            apply_fsdp(model, units, data_mesh, dims.reshard_after_forward, fsdp_param_dtype(self))
        maybe_compile(model, self.train.compile)
        self.model = model
        present = mesh.mesh_dim_names or () if mesh is not None else ()
        used = [name for name in ("dp", "fsdp", "tp") if getattr(dims, name) > 1 or name in present]
        self.name = "x".join(used).replace("dpxfsdp", "hsdp") or "single"

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
            align_grad_placements(list(self.model.parameters()))
        return plain_loss(loss)

    def eval_forward(self, inputs: torch.Tensor) -> torch.Tensor | None:
        with self.autocast():
            return local_output(self.model(inputs))

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        params = list(self.model.parameters())
        total = grad_norm_squared(params).sqrt()
        clip_scaled(params, total, max_norm)
        return total

    def describe(self) -> str:
        dims = self.resolved.parallel
        return (
            f"{self.name} (dp={dims.dp} fsdp={dims.fsdp} tp={dims.tp}, "
            f"reshard_after_forward={dims.reshard_after_forward}) " + super().describe()
        )


def build(resolved: Resolved, dist_info: DistInfo, mesh: DeviceMesh | None, task: Task) -> Strategy:
    if not dist.is_initialized():
        raise RuntimeError("fsdp needs the process group (world size > 1)")
    return ShardedStrategy(resolved, dist_info, mesh, task)
