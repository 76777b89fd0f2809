"""The training loop: data shard -> strategy step -> optimizer, with metrics, eval, checkpoints, preemption.

Layout-agnostic: everything parallel goes through the Strategy (``runtime/parallel/base.py``).
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hpctrain.rundir import EventLine, MemoryLine, Result, RunDir, TrainLine
from hpctrain.runtime import (
    data,
    elastic,
    heartbeat,
    precision,
    signals,
    startup_times,
    tensorboard_log,
    wandb_log,
)
from hpctrain.runtime.bootstrap import DistInfo
from hpctrain.runtime.checkpoint import Checkpointer
from hpctrain.runtime.memory_checkpoint import MemoryCheckpoints
from hpctrain.runtime.mesh import TaskMesh
from hpctrain.runtime.metrics import Metrics, peak_flops, peak_mem_mb, write_result
from hpctrain.runtime.parallel import build_strategy, layout_module
from hpctrain.runtime.rank_times import RankTimes
from hpctrain.runtime.task import Batch, Task
from hpctrain.spec import Resolved, Train

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------
# Setup
# ----------------------------------------------------------------------------------------------


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def configure_determinism(train: Train) -> None:
    """Deterministic kernels (and the cuBLAS workspace they need) when the job asks for them."""
    if not train.deterministic:
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def load_task(train: Train) -> Task:
    """Import ``module:function`` and call it with the Train section, under the job's seed."""
    module_name, _, function_name = train.entrypoint.partition(":")
    build = getattr(importlib.import_module(module_name), function_name)
    seed_everything(train.seed)  # same init on every rank (DDP broadcasts it anyway)
    task = build(train)
    if not isinstance(task, Task):
        raise TypeError(f"{train.entrypoint} returned {type(task).__name__}, not hpctrain.runtime.task.Task")
    return task


def lr_factor(step: int, warmup: int, total: int, schedule: str) -> float:
    """Multiplier of the peak LR for the 0-based optimizer step: linear warm-up, then constant or
    cosine decay to zero at ``total``."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def make_optimizer(
    task: Task, parameters: Iterable[torch.nn.Parameter], train: Train
) -> torch.optim.Optimizer:
    """The task's optimizer factory, else AdamW(train.lr, train.weight_decay)."""
    params = list(parameters)
    if task.optimizer is not None:
        return task.optimizer(params)
    # The fused CUDA kernel updates all parameters in a few launches instead of one per tensor.
    fused = bool(params) and all(p.device.type == "cuda" for p in params)
    return torch.optim.AdamW(params, lr=train.lr, weight_decay=train.weight_decay, fused=fused or None)


@torch.no_grad()
def evaluation_sums(
    task: Task,
    forward: Callable[[torch.Tensor], torch.Tensor | None],
    batches: Iterator[Batch],
    device: torch.device,
) -> torch.Tensor:
    """(loss x samples, metric sum, samples) over ``batches``: float64 on ``device``, to all-reduce."""
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    for batch in batches:
        inputs, targets = data.to_device(batch, device)
        outputs = forward(inputs)
        if outputs is None:  # a pipeline stage before the last
            continue
        count = targets.shape[0]
        sums[0] += task.loss(outputs, targets).double() * count
        if task.metric is not None:
            sums[1] += task.metric(outputs, targets).double()
        sums[2] += count
    return sums


def evaluation_result(task: Task, sums: torch.Tensor) -> dict[str, float]:
    """Mean loss (and accuracy, when the task has a metric) from :func:`evaluation_sums` totals."""
    loss_sum, correct, count = (float(v) for v in sums.tolist())
    result = {"loss": loss_sum / max(count, 1.0)}
    if task.metric is not None:
        result["accuracy"] = correct / max(count, 1.0)
    return result


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------


class Trainer:
    """One run of the job in this allocation (a requeued job makes a new Trainer that resumes)."""

    def __init__(self, resolved: Resolved, dist_info: DistInfo, run_dir: Path, signalled: threading.Event):
        # The step may have fewer (or again all) ranks than planned: layout and accumulation follow.
        self.replan = elastic.replan(resolved, dist_info.world_size)
        resolved = self.replan.resolved
        self.resolved = resolved
        self.train = resolved.job.train
        self.dist = dist_info
        self.run_dir = run_dir
        self.rank = dist_info.rank
        self.metrics = Metrics(run_dir, self.rank)
        self.started = time.perf_counter()

        configure_determinism(self.train)
        self.task = load_task(self.train)
        self.task_mesh = TaskMesh.for_task(resolved, dist_info.local_rank)
        precision.prepare(self.task, self.train, self.task_mesh.device.type)  # fp8, activation checkpointing
        self.strategy = build_strategy(resolved, dist_info, self.task_mesh, self.task)
        # Dropout differs between data shards but not between tp/pp peers of one replica.
        seed_everything(self.train.seed + 1 + self.strategy.data_rank)
        self.optimizer = make_optimizer(self.task, self.strategy.parameters(), self.train)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: lr_factor(s, self.train.warmup_steps, self.train.steps, self.train.lr_schedule),
        )
        self.sampler = data.ShardedSampler(
            len(self.task.train_data),  # type: ignore[arg-type]
            self.train.batch_size,
            self.strategy.data_rank,
            self.strategy.data_world,
            self.train.seed,
        )
        layout = layout_module(resolved)
        memory = MemoryCheckpoints(
            run_dir,
            self.rank,
            dist_info.hostname,
            layout,
            replicated=layout in ("single", "ddp"),
            # DTensor state (fsdp, tp) and pipeline stages load from disk only
            every=self.train.memory_checkpoint_every if layout in ("single", "ddp") else 0,
            event=self.metrics.event,
        )
        self.checkpoints = Checkpointer(
            run_dir, self.rank, self.train.keep_checkpoints, self.metrics.event, memory=memory
        )
        self.preemption = signals.StopAgreement(run_dir, signalled, self.rank, self.strategy.device)
        self.rank_times = RankTimes(
            self.rank, dist_info.world_size, self.strategy.device, self.metrics.write, dist_info.hostname
        )
        self.rank_times.hook_gradients(self.strategy.parameters())
        self.step = 0
        self.position = data.Position()
        self.last_saved = -1
        self.memory_pending = True
        self.step_times: list[float] = []
        self.data_time = 0.0  # seconds fetching batches since the last metrics line
        self.last_loss: float | None = None
        self.last_eval: dict[str, float] = {}

    # -- pieces ----------------------------------------------------------------------------------

    def resume(self) -> None:
        if self.rank == 0:
            self.checkpoints.clean_partial()
            signals.clear_stale(self.run_dir)
        heartbeat.mark("collective")
        dist.barrier()
        restored = self.checkpoints.load(self.strategy.model, self.optimizer)
        self.replan.announce(self.metrics, restored)
        common = {
            "layout": layout_module(self.resolved),
            "world_size": self.dist.world_size,
            "launcher": self.dist.launcher,
            "job_id": self.dist.job_id,
            "restart_count": self.dist.restart_count,
        }
        for sink in (
            tensorboard_log.open_log(
                self.run_dir, self.rank, self.train.tensorboard, restored.step if restored else 0
            ),
            wandb_log.open_run(self.run_dir, self.rank, self.train),
        ):
            if sink is not None:
                self.metrics.sinks.append(sink)
        if restored is None:
            self.metrics.event("start", step=0, **common)
            return
        self.step = restored.step
        self.last_saved = restored.step
        self.position = data.Position(**restored.trainer["position"])
        self.scheduler.load_state_dict(restored.trainer["scheduler"])
        # resolve(): a run started from another's checkpoint (submit --from) names that run's folder.
        log.info("resumed from %s at step %d", restored.path.resolve(), self.step)
        self.metrics.event("resumed", step=self.step, path=str(restored.path.resolve()), **common)

    def _started(self) -> None:
        """After the first step of this attempt: rank 0 records where its start-up went."""
        startup_times.mark("first_step")
        if self.rank == 0:
            self.metrics.event("startup", detail=startup_times.summary())

    def _batch(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        indices = self.sampler.indices(self.position)
        batch = data.to_device(data.fetch(self.task.train_data, indices), self.strategy.device)
        return data.split(batch, self.train.grad_accum)

    def _optimizer_step(self) -> float:
        lr = float(self.optimizer.param_groups[0]["lr"])
        if self.train.grad_clip is not None:
            self.strategy.clip_grad_norm(self.train.grad_clip)
        self.optimizer.step()
        if self.memory_pending:  # after the first step: gradients and optimizer state now exist
            self.memory_pending = False
            self._memory_report()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return lr

    def _log_train(self, losses: list[torch.Tensor], lr: float, interval_s: float) -> None:
        # The one all-reduce of the interval also carries every rank's compute and wait seconds.
        loss = self.rank_times.mean_with_loss(torch.stack(losses).mean())
        self.last_loss = loss
        steps = len(losses)
        step_time = interval_s / steps
        samples_per_s = self.train.batch_size / step_time
        line = TrainLine(
            step=self.step,
            steps=self.train.steps,
            loss=round(loss, 6),
            lr=lr,
            samples_per_s=round(samples_per_s, 2),
            step_time_s=round(step_time, 5),
            peak_mem_mb=peak_mem_mb(self.strategy.device),
            data_share=round(min(1.0, self.data_time / interval_s), 4) if interval_s > 0 else None,
        )
        self.data_time = 0.0
        if self.task.tokens_per_sample:
            tokens_per_s = samples_per_s * self.task.tokens_per_sample
            line.tokens_per_s = round(tokens_per_s, 1)
            peak = peak_flops(self.strategy.device)
            if peak and self.task.flops_per_token:
                line.mfu = round(tokens_per_s * self.task.flops_per_token / (peak * self.dist.world_size), 4)
        self.metrics.write(line)
        self.rank_times.report(self.step)
        log.info(
            "step %d/%d loss %.4f lr %.3g %.1f samples/s",
            self.step,
            self.train.steps,
            loss,
            lr,
            samples_per_s,
        )

    def _memory_report(self) -> None:
        report = MemoryLine(
            rank=self.rank,
            rank_bytes=self.strategy.memory_report(self.optimizer),
            peak_mem_mb=peak_mem_mb(self.strategy.device),
        )
        gathered: list[Any] = [None] * self.dist.world_size if self.rank == 0 else []
        dist.gather_object(report, gathered if self.rank == 0 else None, dst=0)
        for item in gathered:
            self.metrics.write(item)

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        if self.task.eval_data is None:
            return {}
        heartbeat.mark("eval")
        self.strategy.train_mode(False)
        per_rank = self.train.batch_size // self.strategy.data_world
        shard = data.eval_batches(
            self.task.eval_data, per_rank, self.strategy.data_rank, self.strategy.data_world
        )
        sums = evaluation_sums(self.task, self.strategy.eval_forward, shard, self.strategy.device)
        self.strategy.train_mode(True)
        heartbeat.mark("collective")
        dist.all_reduce(sums, op=dist.ReduceOp.SUM)
        result = evaluation_result(self.task, sums)
        self.metrics.write("eval", step=self.step, **{k: round(v, 6) for k, v in result.items()})
        log.info("eval at step %d: %s", self.step, result)
        self.last_eval = result
        return result

    def _trainer_state(self) -> dict[str, Any]:
        return {
            "position": {"epoch": self.position.epoch, "offset": self.position.offset},
            "scheduler": self.scheduler.state_dict(),
        }

    def save(self, blocking: bool = True) -> None:
        if self.last_saved == self.step:
            self.checkpoints.wait()
            return
        heartbeat.mark("checkpoint")
        self.checkpoints.save(self.step, self.strategy.model, self.optimizer, self._trainer_state(), blocking)
        self.last_saved = self.step

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> str:
        """Train to ``train.steps`` or until preempted; returns "completed" or "preempted"."""
        self.resume()
        startup_times.mark("restore")
        train = self.train
        self.strategy.train_mode(True)
        first_step = self.step
        losses: list[torch.Tensor] = []
        sync: Callable[[], None] = (
            torch.cuda.synchronize if self.strategy.device.type == "cuda" else lambda: None
        )
        interval_start = last = time.perf_counter()
        while self.step < train.steps:
            heartbeat.mark("data", self.step)
            self.rank_times.step_started()
            fetch_start = time.perf_counter()
            batch = self._batch()
            self.data_time += time.perf_counter() - fetch_start
            losses.append(self.strategy.train_step(batch, self.task.loss))
            self.rank_times.step_synced()
            heartbeat.mark("optimizer")
            lr = self._optimizer_step()
            self.step += 1
            if self.step == first_step + 1:
                self._started()
            self.position = self.sampler.advance(self.position)
            if self.step % train.log_every == 0 or self.step == train.steps:
                sync()
                self._log_train(losses, lr, time.perf_counter() - interval_start)
                losses = []
                interval_start = time.perf_counter()
            if train.eval_every and self.step % train.eval_every == 0 and self.step < train.steps:
                self.evaluate()
            if train.checkpoint_every and self.step % train.checkpoint_every == 0:
                self.save(blocking=False)
            elif self.checkpoints.memory_due(self.step):
                # Not a slow phase (a copy to host memory): a rank stopped here is named as fast as in a step.
                heartbeat.mark("snapshot")
                step_s = statistics.median(self.step_times[-20:]) if self.step_times else 0.0
                state = self._trainer_state()
                self.checkpoints.save_memory(self.step, self.strategy.model, self.optimizer, state, step_s)
            heartbeat.mark("collective")
            stop = self.preemption.poll()
            # A step's time is the whole iteration: data, compute, logging, the preemption check.
            now = time.perf_counter()
            self.step_times.append(now - last)
            last = now
            if stop:
                return self._preempted()
        self.preemption.drain()
        self.save(blocking=False)  # the files are written while the final evaluation and export run
        evaluation = self.evaluate()
        self._export()
        self.checkpoints.wait()
        self.checkpoints.forget_memory()
        self._finish(evaluation, sum(self.step_times), self.step - first_step)
        return "completed"

    def _preempted(self) -> str:
        log.warning("preemption agreed at step %d: checkpointing and stopping", self.step)
        self.save()
        requeue = self.resolved.preemption.requeue
        if self.rank == 0:
            if requeue:
                signals.request_requeue(self.run_dir, self.step)
            else:
                signals.clear_flag(self.run_dir)
        self.metrics.event("preempted", step=self.step, requeue=requeue)
        return "preempted"

    def _export(self) -> None:
        if not self.train.export_final:
            return
        state = self.strategy.export_state_dict()
        if state is not None:
            torch.save(state, RunDir(self.run_dir).final_model)

    def _finish(self, evaluation: dict[str, float], train_time: float, steps_run: int) -> None:
        if self.rank != 0:
            return
        steady = self.step_times[1:] or self.step_times
        result = Result(
            step=self.step,
            steps=self.train.steps,
            final_loss=self.last_loss,
            eval_loss=evaluation.get("loss"),
            eval_accuracy=evaluation.get("accuracy"),
            wall_time_s=round(time.perf_counter() - self.started, 3),
            train_time_s=round(train_time, 3),
            samples=steps_run * self.train.batch_size,
            samples_per_s=round(steps_run * self.train.batch_size / train_time, 2) if train_time else None,
            step_time_median_s=round(statistics.median(steady), 6) if steady else None,
            layout=layout_module(self.resolved),
            world_size=self.dist.world_size,
        )
        write_result(self.run_dir, result)
        self.metrics.write(EventLine(event="done", step=self.step, wall_time_s=result.wall_time_s))
