"""The Strategy interface: how one parallel layout wraps the model, runs a step and reports memory.

A strategy is built once per task by ``hpctrain.runtime.parallel.build_strategy`` after the process
group and the task's :class:`~hpctrain.runtime.mesh.TaskMesh` (layout, device, DeviceMesh) exist,
and the training loop (``hpctrain.runtime.train``) drives it
without knowing the layout. The loop owns everything around the strategy:

* the optimizer, built over ``strategy.model.parameters()`` (so sharded parameters are what the
  optimizer sees), the LR schedule, ``optimizer.step()`` and ``optimizer.zero_grad()``;
* the data: it reads the shard ``strategy.data_rank`` of ``strategy.data_world`` (the dp x fsdp
  coordinate; tp and pp peers read the same shard), splits the per-rank batch into
  ``train.grad_accum`` micro-batches and moves them to ``strategy.device``;
* checkpoints: ``get_state_dict(strategy.model, optimizer)`` from
  ``torch.distributed.checkpoint.state_dict``, so a layout that shards parameters as DTensors
  (FSDP2, TP) is saved and reloaded without extra code;
* metrics, preemption, evaluation bookkeeping and the final export call.

A layout module (``parallel/ddp.py``, ``fsdp.py``, ``pp.py``) subclasses :class:`Strategy`, with
the constructor ``(resolved, dist, task_mesh, task)``, and is listed in the table of
``parallel/__init__.py``; the base class gives working defaults for everything except
:meth:`Strategy.train_step`.

Pipeline strategies own the loss computation: ``train_step`` receives ``loss_fn`` and must hand it
to the pipeline schedule (only the last stage computes it), and ``eval_forward`` returns outputs on
the last stage only (``None`` elsewhere). They must still return the loss on every rank (broadcast
from the last stage) so that logging and the preemption agreement stay layout-agnostic.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hpctrain.runtime import heartbeat
from hpctrain.runtime.task import Batch, Task

if TYPE_CHECKING:
    from hpctrain.runtime.bootstrap import DistInfo
    from hpctrain.runtime.mesh import TaskMesh
    from hpctrain.spec import Resolved

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class Strategy(ABC):
    """One parallel layout of one task's model, as seen by the training loop.

    Subclasses set ``self.model`` in ``__init__`` (after calling ``super().__init__``) and implement
    :meth:`train_step`. Attributes the loop reads:

    ``model``
        The module whose parameters the optimizer updates and whose state is checkpointed
        (e.g. the ``DistributedDataParallel`` wrapper, the ``fully_shard``-ed module, or this
        rank's pipeline stage). ``get_state_dict`` strips wrapper prefixes, so checkpoints keep
        the user's parameter names.
    ``layout``
        The job's :class:`hpctrain.spec.layout.Layout`: degrees, active dims, rank coordinates.
    ``device``
        Where batches go (``cuda:<local rank>`` or ``cpu``).
    ``data_rank`` / ``data_world``
        Which shard of the training data this rank reads, out of how many (dp x fsdp).
    ``mesh``
        The job's ``DeviceMesh`` (``None`` for a single process); see ``runtime/mesh.py``.
    """

    name: str = "base"

    def __init__(self, resolved: Resolved, dist: DistInfo, task_mesh: TaskMesh, task: Task) -> None:
        self.resolved = resolved
        self.dist = dist
        self.task_mesh = task_mesh
        self.layout = task_mesh.layout
        self.mesh = task_mesh.mesh
        self.device = task_mesh.device
        self.task = task
        self.train = resolved.job.train
        self.amp_dtype = autocast_dtype(self.train.precision, self.device)
        self.data_rank, self.data_world = self.layout.data_coordinate(dist.rank)
        self.model: nn.Module = task.model

    # ------------------------------------------------------------------------------------------
    # What a layout must provide
    # ------------------------------------------------------------------------------------------

    @abstractmethod
    def train_step(self, microbatches: Sequence[Batch], loss_fn: LossFn) -> torch.Tensor:
        """Forward and backward over this rank's micro-batches of one optimizer step.

        ``microbatches`` holds ``train.grad_accum`` ``(inputs, targets)`` pairs already on
        ``self.device`` (for pipeline layouts: the whole per-rank batch as one pair, which the
        schedule splits into ``parallel.microbatches`` itself). Gradients must end up as the
        mean over the *global* batch, ready for ``optimizer.step()``: scale each micro-batch loss
        by ``1 / len(microbatches)`` and let the layout average over data-parallel ranks.
        Synchronise gradients only once per step (DDP's ``no_sync`` on all but the last
        micro-batch; FSDP2's ``set_requires_gradient_sync``).

        Returns a detached scalar: this rank's mean loss over its micro-batches, valid on every
        rank (pipeline layouts broadcast it from the last stage). Must not call ``.item()``:
        the loop decides when to synchronise.
        """

    # ------------------------------------------------------------------------------------------
    # Defaults a layout may override
    # ------------------------------------------------------------------------------------------

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 autocast when the precision asks for it, else a no-op context."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def eval_forward(self, inputs: torch.Tensor) -> torch.Tensor | None:
        """Model outputs for one evaluation batch (in eval mode, under no_grad, set by the loop).

        Pipeline layouts return outputs on the last stage and ``None`` on the others; the loop
        sums loss, correct and count over the ranks that return something.
        """
        with self.autocast():
            return self.model(inputs)

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Clip the global gradient norm; layouts whose parameters are split over ranks that
        ``clip_grad_norm_`` cannot see (pipeline stages) must reduce the norm themselves."""
        return nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)

    def export_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The full, unsharded model state dict on rank 0 (``None`` on other ranks).

        Collective: every rank calls it. The default gathers DTensor shards with
        ``get_model_state_dict(full_state_dict=True, cpu_offload=True)``; pipeline layouts must
        gather the stages' pieces themselves.
        """
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(self.model, options=options)
        return state if self.dist.rank == 0 else None

    def train_mode(self, training: bool) -> None:
        """Switch dropout etc.; pipeline layouts switch their stage module."""
        self.model.train(training)

    def parameters(self) -> Iterator[nn.Parameter]:
        """What the optimizer updates."""
        return self.model.parameters()

    def memory_report(self, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
        """Bytes this rank holds for parameters, gradients and optimizer state (local shards only)."""
        return {
            "params": sum(_local_bytes(p) for p in self.model.parameters()),
            "grads": sum(_local_bytes(p.grad) for p in self.model.parameters() if p.grad is not None),
            "optimizer": _optimizer_bytes(optimizer) if optimizer is not None else 0,
        }

    def describe(self) -> str:
        """One line for the start log."""
        return f"{self.name} data shard {self.data_rank}/{self.data_world} on {self.device}"


class SingleStrategy(Strategy):
    """One process, no wrapper: the reference that every layout must reproduce."""

    name = "single"

    def __init__(self, resolved: Resolved, dist: DistInfo, task_mesh: TaskMesh, task: Task) -> None:
        super().__init__(resolved, dist, task_mesh, task)
        self.model = task.model.to(self.device)
        maybe_compile(self.model, self.train.compile)

    def train_step(self, microbatches: Sequence[Batch], loss_fn: LossFn) -> torch.Tensor:
        return accumulate(self.model, microbatches, loss_fn, self.autocast, lambda _last: None)


# ----------------------------------------------------------------------------------------------
# Helpers shared by layouts
# ----------------------------------------------------------------------------------------------


def accumulate(
    model: nn.Module,
    microbatches: Sequence[Batch],
    loss_fn: LossFn,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]],
    sync_context: Callable[[bool], contextlib.AbstractContextManager[Any] | None],
) -> torch.Tensor:
    """Forward/backward each micro-batch with its loss scaled by 1/n; returns the mean loss.

    ``sync_context(is_last)`` returns a context that suppresses gradient synchronisation for all
    but the last micro-batch (DDP's ``no_sync``), or ``None`` for no context.
    """
    count = len(microbatches)
    total: torch.Tensor | None = None
    for index, (inputs, targets) in enumerate(microbatches):
        context = sync_context(index == count - 1) or contextlib.nullcontext()
        with context:
            heartbeat.mark("forward")
            with autocast():
                loss = loss_fn(model(inputs), targets)
            heartbeat.mark("backward")
            (loss / count).backward()
        detached = loss.detach().float()
        total = detached if total is None else total + detached
    assert total is not None, "a step needs at least one micro-batch"
    return total / count


def maybe_compile(module: nn.Module, enabled: bool) -> None:
    """torch.compile in place (``nn.Module.compile``) so state-dict keys keep the user's names."""
    if enabled:
        module.compile()


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """bf16 for precision bf16 or fp8 (ops that are not fp8 matmuls), or auto on a GPU; else fp32."""
    if precision in ("bf16", "fp8") or (precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def _local_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def _optimizer_bytes(optimizer: torch.optim.Optimizer) -> int:
    return sum(
        _local_bytes(value)
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    )
