"""Deterministic data sharding: which dataset indices each data-parallel rank reads at each step.

Every epoch has one permutation of the dataset, drawn from ``seed + epoch``. Global batch ``k`` of
an epoch is the slice ``perm[k*B:(k+1)*B]``; data rank ``r`` of ``D`` reads the ``r``-th of its
``D`` equal parts. So each rank touches only its own samples, the union over ranks is exactly the
global batch a single process would read, and the position (epoch, offset) is all a checkpoint
needs to resume the same order. The incomplete last global batch of an epoch is dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset, TensorDataset
from torch.utils.data._utils.collate import default_collate

from hpctrain.runtime.task import Batch


@dataclass(frozen=True)
class Position:
    """Where the data stream stands: the epoch and the next global batch within it."""

    epoch: int = 0
    offset: int = 0


class ShardedSampler:
    """This rank's indices for every global batch."""

    def __init__(
        self, size: int, global_batch: int, data_rank: int, data_world: int, seed: int, shuffle: bool = True
    ) -> None:
        if global_batch % data_world:
            raise ValueError(f"global batch {global_batch} does not split over {data_world} data ranks")
        if size < global_batch:
            raise ValueError(f"the dataset has {size} samples, fewer than one global batch ({global_batch})")
        self.size = size
        self.global_batch = global_batch
        self.per_rank = global_batch // data_world
        self.data_rank = data_rank
        self.seed = seed
        self.shuffle = shuffle
        self.steps_per_epoch = size // global_batch
        self._cached: tuple[int, torch.Tensor] | None = None

    def permutation(self, epoch: int) -> torch.Tensor:
        if self._cached is None or self._cached[0] != epoch:
            if self.shuffle:
                generator = torch.Generator().manual_seed(self.seed + epoch)
                perm = torch.randperm(self.size, generator=generator)
            else:
                perm = torch.arange(self.size)
            self._cached = (epoch, perm)
        return self._cached[1]

    def indices(self, position: Position) -> torch.Tensor:
        """This rank's part of global batch ``position.offset`` of ``position.epoch``."""
        start = position.offset * self.global_batch + self.data_rank * self.per_rank
        return self.permutation(position.epoch)[start : start + self.per_rank]

    def advance(self, position: Position) -> Position:
        offset = position.offset + 1
        if offset >= self.steps_per_epoch:
            return Position(position.epoch + 1, 0)
        return Position(position.epoch, offset)

    def position_at(self, step: int) -> Position:
        """The position after ``step`` optimizer steps from the start."""
        return Position(step // self.steps_per_epoch, step % self.steps_per_epoch)


def fetch(dataset: Dataset[Batch], indices: torch.Tensor) -> Batch:
    """Stack the samples at ``indices``; a TensorDataset is indexed in one gather per tensor."""
    if isinstance(dataset, TensorDataset):
        inputs, targets = (tensor[indices] for tensor in dataset.tensors)
        return inputs, targets
    return default_collate([dataset[int(i)] for i in indices])  # type: ignore[no-any-return]


def split(batch: Batch, parts: int) -> list[Batch]:
    """Split a per-rank batch into ``parts`` equal micro-batches (for gradient accumulation)."""
    inputs, targets = batch
    return list(zip(inputs.chunk(parts), targets.chunk(parts), strict=True))


def to_device(batch: Batch, device: torch.device) -> Batch:
    non_blocking = device.type == "cuda"
    inputs, targets = batch
    return inputs.to(device, non_blocking=non_blocking), targets.to(device, non_blocking=non_blocking)


def eval_batches(
    dataset: Dataset[Batch], batch_size: int, data_rank: int, data_world: int
) -> Iterator[Batch]:
    """This rank's strided share of the held-out set (every sample evaluated exactly once overall)."""
    size = len(dataset)  # type: ignore[arg-type]
    mine = torch.arange(data_rank, size, data_world)
    for start in range(0, len(mine), batch_size):
        yield fetch(dataset, mine[start : start + batch_size])
