"""Pipeline parallel via torch.distributed.pipelining: GPipe, 1F1B or interleaved 1F1B, composed with dp/fsdp.

Each rank of the "pp" mesh dim holds one stage (two virtual stages, looped, for interleaved 1F1B),
cut by the task's ``pipeline_split``. Across the data dims each stage module is wrapped on its own:
DDP over "dp" alone, FSDP2 (or HSDP) when fsdp > 1. The schedule splits the per-rank batch into
``parallel.microbatches`` and calls the loss on the last stage; the step's loss is then summed over
the pp group so every rank reports it.

``strategy.model`` is a pruned view of the user's full model that holds exactly this rank's
submodules under their original names, so checkpoints of every layout share keys (the pp stages
together save the whole model) and the optimizer sees each parameter once.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from hpctrain.runtime.parallel import dtensors
from hpctrain.runtime.parallel.base import LossFn, Strategy
from hpctrain.runtime.parallel.fsdp import apply_fsdp, fsdp_param_dtype
from hpctrain.runtime.parallel.tp import apply_tensor_parallel
from hpctrain.runtime.task import Batch, Task

if TYPE_CHECKING:
    from hpctrain.runtime.bootstrap import DistInfo
    from hpctrain.runtime.mesh import TaskMesh
    from hpctrain.spec import Resolved

log = logging.getLogger(__name__)

VIRTUAL_STAGES = 2
"""Stages per rank for the interleaved schedule."""


def union_view(root: nn.Module, parts: Sequence[nn.Module]) -> nn.Module:
    """A shallow copy of ``root``'s module tree that keeps only what ``parts`` hold.

    Submodules shared with a part are kept as they are (so FSDP/TP changes to them show through);
    containers are copied with the missing children dropped. Parameter names are therefore the
    user's original ones.
    """
    keep_modules = {id(m) for part in parts for m in part.modules()}
    keep_tensors = {id(t) for part in parts for t in (*part.parameters(), *part.buffers())}

    def prune(module: nn.Module) -> nn.Module | None:
        if id(module) in keep_modules:
            return module
        children = {name: prune(child) for name, child in module._modules.items() if child is not None}
        kept_children = {name: child for name, child in children.items() if child is not None}
        params = {n: p for n, p in module._parameters.items() if p is not None and id(p) in keep_tensors}
        buffers = {n: b for n, b in module._buffers.items() if b is not None and id(b) in keep_tensors}
        if not (kept_children or params or buffers):
            return None
        clone = copy.copy(module)
        clone.__dict__.update(_modules=kept_children, _parameters=params, _buffers=buffers)
        return clone

    view = prune(root)
    held = sum(p.numel() for part in parts for p in part.parameters())
    if view is None or sum(p.numel() for p in view.parameters()) != held:
        # pipeline_split copied modules instead of sharing them: the parts are all we have.
        if len(parts) == 1:
            return parts[0]
        raise ValueError("pipeline_split must return views that share the model's submodules")
    return view


def schedule_class(name: str) -> type:
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    return {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved1f1b": ScheduleInterleaved1F1B}[name]


class PipelineStrategy(Strategy):
    """pp stages x (dp | fsdp | dp x fsdp), optionally with tp inside each stage."""

    name = "pp"

    def __init__(self, resolved: Resolved, dist_info: DistInfo, task_mesh: TaskMesh, task: Task) -> None:
        from torch.distributed.pipelining import PipelineStage

        super().__init__(resolved, dist_info, task_mesh, task)
        if task.pipeline_split is None:
            raise ValueError("train.parallel.pp > 1 but the entrypoint's Task has no pipeline_split")
        dims = resolved.parallel
        pp_mesh = task_mesh.submesh(("pp",))
        assert pp_mesh is not None, "an active pp dim is a mesh dim"
        self.pp_group = pp_mesh.get_group()
        self.pp_rank, self.pp_size = self.layout.coordinates(dist_info.rank)["pp"], self.layout.pp
        self.schedule_name, stage_ids, chunks = self._split(task, dims.pp_schedule)
        self.total_stages = self.pp_size * len(stage_ids)
        self.chunks = chunks
        stages = []
        for stage_id, chunk in zip(stage_ids, chunks, strict=True):
            chunk.to(self.device)
            if self.layout.enabled("tp"):
                apply_tensor_parallel(chunk, task, task_mesh.submesh(("tp",)))
            stages.append(
                PipelineStage(
                    self._wrap(chunk, task, len(chunks)),
                    stage_id,
                    self.total_stages,
                    self.device,
                    group=self.pp_group,
                )
            )
        self.holds_first = 0 in stage_ids
        self.holds_last = self.total_stages - 1 in stage_ids
        self.loss_fn: LossFn = task.loss
        self.evaluating = False
        cls = schedule_class(self.schedule_name)
        # The trampoline lets train_step swap the loss the loop hands in without rebuilding.
        loss = self._loss
        self.schedule = cls(
            stages if len(stages) > 1 else stages[0], n_microbatches=dims.microbatches, loss_fn=loss
        )
        self.model = union_view(task.model, chunks)
        # Eval batches are padded to the training batch: stages fix their p2p shapes on first use.
        self.batch_rows = self.train.batch_size // self.data_world
        self.name = self.layout.name

    def _split(self, task: Task, schedule: str) -> tuple[str, list[int], list[nn.Module]]:
        """(schedule, this rank's stage ids, their modules); interleaved falls back to 1F1B."""
        assert task.pipeline_split is not None
        if schedule == "interleaved1f1b":
            total = self.pp_size * VIRTUAL_STAGES
            ids = [self.pp_rank + k * self.pp_size for k in range(VIRTUAL_STAGES)]
            try:
                return schedule, ids, [task.pipeline_split(task.model, i, total) for i in ids]
            except ValueError as err:
                log.warning("interleaved 1F1B needs %d stages (%s): using 1F1B", total, err)
                schedule = "1f1b"
        return schedule, [self.pp_rank], [task.pipeline_split(task.model, self.pp_rank, self.pp_size)]

    def _wrap(self, chunk: nn.Module, task: Task, chunks: int) -> nn.Module:
        """Data parallel for one stage module: FSDP2/HSDP when fsdp > 1, DDP over dp alone.

        Interleaved stages use FSDP2 over dp even then: DDP's reducer miscounts gradients under
        the multi-stage schedule's split backward (an internal assert in reducer.cpp).
        """
        layout = self.layout
        if layout.enabled("fsdp") or (layout.enabled("dp") and chunks > 1):
            data_mesh = self.task_mesh.submesh(("dp", "fsdp"))
            assert data_mesh is not None
            units = task.shard_units(chunk) if task.shard_units is not None else []
            reshard = self.resolved.parallel.reshard_after_forward
            apply_fsdp(chunk, units, data_mesh, reshard, fsdp_param_dtype(self))
            return chunk
        if layout.enabled("dp"):
            dp_mesh = self.task_mesh.submesh(("dp",))
            assert dp_mesh is not None
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            return nn.parallel.DistributedDataParallel(
                chunk, device_ids=device_ids, process_group=dp_mesh.get_group()
            )
        return chunk

    def _loss_context(self) -> contextlib.AbstractContextManager[Any]:
        """``loss_parallel`` under tp: the last stage's logits are vocab-sharded DTensors."""
        if not self.layout.enabled("tp"):
            return contextlib.nullcontext()
        from torch.distributed.tensor.parallel import loss_parallel

        return loss_parallel()

    def _loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.evaluating:  # the loop computes eval losses itself from the outputs
            return torch.zeros((), device=output.device)
        return self.loss_fn(output, target)

    def train_step(self, microbatches: Sequence[Batch], loss_fn: LossFn) -> torch.Tensor:
        # The schedule's micro-batches do the accumulation: one step over the whole per-rank batch.
        inputs = torch.cat([m[0] for m in microbatches])
        targets = torch.cat([m[1] for m in microbatches])
        self.loss_fn = loss_fn
        losses: list[torch.Tensor] = []
        args = (inputs,) if self.holds_first else ()
        with self.autocast(), self._loss_context():
            self.schedule.step(*args, target=targets, losses=losses, return_outputs=False)
        if self.layout.enabled("tp"):
            dtensors.align_grad_placements(list(self.model.parameters()))
        total = torch.zeros((), dtype=torch.float32, device=self.device)
        if self.holds_last:
            total = dtensors.plain_loss(torch.stack([loss.detach().float() for loss in losses]).mean())
        # Only the last stage has the loss; a sum over the pp group hands it to every stage.
        dist.all_reduce(total, group=self.pp_group)
        return total

    def eval_forward(self, inputs: torch.Tensor) -> torch.Tensor | None:
        rows = inputs.shape[0]
        if rows < self.batch_rows:
            padding = inputs[-1:].expand(self.batch_rows - rows, *inputs.shape[1:])
            inputs = torch.cat([inputs, padding])
        args = (inputs,) if self.holds_first else ()
        # The schedule insists on targets for its last stage even in eval: hand it the inputs
        # (split the same way) and let the trampoline loss ignore them.
        self.evaluating = True
        try:
            with self.autocast():
                out = self.schedule.eval(*args, target=inputs)
        finally:
            self.evaluating = False
        return dtensors.local_output(out[:rows]) if self.holds_last else None

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        params = list(self.model.parameters())
        squared = dtensors.grad_norm_squared(params).to(self.device)
        dist.all_reduce(squared, group=self.pp_group)
        total = squared.sqrt()
        dtensors.clip_scaled(params, total, max_norm)
        return total

    def export_state_dict(self) -> dict[str, torch.Tensor] | None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(self.model, options=options)
        coords = self.layout.coordinates(self.dist.rank)
        if coords["dp"] or coords["fsdp"] or coords["tp"]:
            return None  # only the replica of rank 0 sends its stages
        pieces: list[Any] = [None] * self.pp_size if self.dist.rank == 0 else []
        dist.gather_object(state, pieces if self.dist.rank == 0 else None, dst=0, group=self.pp_group)
        if self.dist.rank != 0:
            return None
        return {key: value for piece in pieces for key, value in piece.items()}

    def train_mode(self, training: bool) -> None:
        for chunk in self.chunks:
            chunk.train(training)
        self.model.train(training)

    def describe(self) -> str:
        dims = self.resolved.parallel
        return (
            f"{self.name} ({self.schedule_name}, {self.total_stages} stages, "
            f"{dims.microbatches} microbatches, pp rank {self.pp_rank}) " + super().describe()
        )
