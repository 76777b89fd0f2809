"""DTensor helpers of the sharded and pipeline layouts: gradient norm, clipping, placements, plain results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor


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
