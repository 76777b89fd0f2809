"""Pieces servers and workers share: the user's task, optimizer, LR schedule, data order, eval, JSON lines."""

from __future__ import annotations

import importlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpctrain.runtime.task import Task
from hpctrain.spec import Train


def build_task(train: Train) -> Task:
    """Import ``module:function`` and build the task with the seed set, so every process starts equal."""
    module_name, _, func_name = train.entrypoint.partition(":")
    torch.manual_seed(train.seed)
    task = getattr(importlib.import_module(module_name), func_name)(train)
    if not isinstance(task, Task):
        raise TypeError(f"{train.entrypoint} returned {type(task).__name__}, not hpctrain Task")
    return task


def make_optimizer(task: Task, train: Train, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    """The task's optimizer factory over this server's shard, else AdamW(train.lr, weight_decay)."""
    if not params:
        # A server that owns nothing (more servers than tensors) still answers; give it a no-op.
        params = [nn.Parameter(torch.zeros(0))]
    if task.optimizer is not None:
        return task.optimizer(params)
    return torch.optim.AdamW(params, lr=train.lr, weight_decay=train.weight_decay)


def lr_factor(train: Train, step: int) -> float:
    """Linear warm-up then constant or cosine decay; applied by servers per optimizer step."""
    if train.warmup_steps and step < train.warmup_steps:
        return (step + 1) / train.warmup_steps
    if train.lr_schedule == "cosine":
        span = max(1, train.steps - train.warmup_steps)
        progress = min(1.0, (step - train.warmup_steps) / span)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0


def worker_batch(batch_size: int, worker: int, workers: int) -> int:
    """This worker's share of the global batch (the first ``batch_size % workers`` get one more)."""
    return batch_size // workers + (1 if worker < batch_size % workers else 0)


def batch_indices(length: int, worker: int, workers: int, batch: int, seed: int, clock: int) -> list[int]:
    """Sample indices of ``worker``'s batch number ``clock``: deterministic, resumable from the clock.

    Each epoch shuffles the dataset with a seed of its own and deals it round-robin to workers, so
    worker shards are disjoint within an epoch; the short tail of a shard is dropped.
    """
    shard_len = len(range(worker, length, workers))
    per_epoch = shard_len // batch
    if per_epoch < 1:
        raise ValueError(f"worker {worker}'s data shard ({shard_len} samples) is smaller than its batch")
    epoch, within = divmod(clock, per_epoch)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    shard = torch.randperm(length, generator=gen)[worker::workers]
    return shard[within * batch : (within + 1) * batch].tolist()


def collate(dataset: Any, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    items = [dataset[i] for i in indices]
    return torch.stack([x for x, _ in items]), torch.stack([torch.as_tensor(y) for _, y in items])


@torch.no_grad()
def evaluate(task: Task, model: nn.Module, batch: int = 512) -> dict[str, float]:
    """Mean loss and accuracy (when the task has a metric) over the whole eval set."""
    if task.eval_data is None:
        return {}
    model.eval()
    total_loss, correct, count = 0.0, 0.0, 0
    length = len(task.eval_data)  # type: ignore[arg-type]
    for start in range(0, length, batch):
        inputs, targets = collate(task.eval_data, list(range(start, min(length, start + batch))))
        out = model(inputs)
        total_loss += float(task.loss(out, targets)) * len(targets)
        if task.metric is not None:
            correct += float(task.metric(out, targets))
        count += len(targets)
    model.train()
    result = {"loss": total_loss / max(1, count)}
    if task.metric is not None:
        result["accuracy"] = correct / max(1, count)
    return result


class JsonLines:
    """Append-only JSON lines, flushed per line so `hpctrain status` sees progress while it runs."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.start = time.time()
        self._handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run

    def write(self, record: dict[str, Any]) -> None:
        now = time.time()
        line = {**record, "time": round(now, 3), "elapsed_s": round(now - self.start, 3)}
        self._handle.write(json.dumps(line) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def write_json_atomic(path: Path, data: Any) -> None:
    """Write via tmp + rename so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
