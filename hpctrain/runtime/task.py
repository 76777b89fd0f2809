"""The entrypoint contract: what a user's `module:function` returns to the runtime.

A job spec names `train.entrypoint: mypkg.mymodule:build`. Every task of the job imports the module
and calls ``build(train)`` with the job's ``Train`` section (``train.options`` holds the user's own
settings, such as the model size). The function returns a :class:`Task`.

The runtime then owns everything distributed: it shards ``train_data`` by data-parallel rank, wraps
``model`` for the job's parallel layout, builds the optimizer, runs the loop, evaluates on
``eval_data``, checkpoints and resumes. The user's code never calls torch.distributed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

Batch = tuple[torch.Tensor, torch.Tensor]
"""Every dataset item is ``(inputs, targets)``; a batch stacks them."""


@dataclass
class Task:
    """A model and the data it trains on. Only ``model``, ``train_data`` and ``loss`` are required."""

    model: nn.Module
    """Built on the CPU in fp32 with the seed already set; the runtime moves, wraps and casts it."""
    train_data: Dataset[Batch]
    """Map-style dataset of ``(inputs, targets)``; each data-parallel rank reads only its shard."""
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """``loss(model(inputs), targets)`` -> scalar mean loss over the batch."""
    eval_data: Dataset[Batch] | None = None
    """Held-out data; evaluated every ``train.eval_every`` steps and at the end."""
    metric: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    """``metric(model(inputs), targets)`` -> number of correct samples in the batch (for accuracy)."""
    optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None
    """Optimizer factory; default AdamW with ``train.lr`` and ``train.weight_decay``."""
    tokens_per_sample: int | None = None
    """Tokens in one sample, for tokens/s in the metrics (language models)."""
    flops_per_token: float | None = None
    """Training FLOPs per token (about 6 x parameters for a transformer), for MFU."""
    pipeline_split: Callable[[nn.Module, int, int], nn.Module] | None = None
    """``pipeline_split(model, stage, stages)`` -> the stage's module; needed for pipeline parallel."""
    tensor_parallel_plan: Callable[[nn.Module, Any], None] | None = None
    """``tensor_parallel_plan(model, tp_mesh)`` parallelizes the model in place; needed for tp > 1."""
    shard_units: Callable[[nn.Module], list[nn.Module]] | None = None
    """The submodules FSDP2 shards one by one (transformer blocks); default: the root only."""
