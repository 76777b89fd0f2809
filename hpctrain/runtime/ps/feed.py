"""Where a worker's batches come from: its own data shard (between-graph) or server 0 (in-graph).

``between-graph``: every worker builds the dataset and reads its part of each global batch itself
(the runtime's :class:`~hpctrain.runtime.data.ShardedSampler`, data rank = worker index).
``in-graph``: server 0 is the one feeder; it reads every worker's part with the same sampler and
sends it with its reply, so the worker receives batch ``c`` together with the parameters it
computes step ``c`` on. Both modes read the same samples in the same order, so sync training gives
the same parameters either way. The first batch travels with a small shape descriptor; after that
the shapes are fixed and the worker posts its receives together with the parameter receives.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from hpctrain.runtime import data
from hpctrain.runtime.task import Batch, Task
from hpctrain.spec import Train

from . import transport
from .transport import FEED_TAG

# Tensor types a batch may hold (gloo moves all of them); the descriptor stores the index.
DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
)
MAX_DIMS = 6
DESCRIPTOR = 2 * (2 + MAX_DIMS)  # per tensor: dtype, ndim, dims padded to MAX_DIMS


def sampler(task: Task, train: Train, worker: int, workers: int) -> data.ShardedSampler:
    """Worker ``worker``'s share of every global batch of ``train.batch_size``."""
    return data.ShardedSampler(len(task.train_data), train.batch_size, worker, workers, train.seed)  # type: ignore[arg-type]


def batch_at(task: Task, shard: data.ShardedSampler, clock: int) -> Batch:
    """The batch of the worker's step ``clock`` (deterministic, so a resumed worker continues)."""
    return data.fetch(task.train_data, shard.indices(shard.position_at(clock)))


def describe(tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
    desc = torch.zeros(DESCRIPTOR, dtype=torch.int64)
    for slot, tensor in enumerate(tensors):
        if tensor.dtype not in DTYPES or tensor.dim() > MAX_DIMS:
            raise ValueError(f"in-graph feeding cannot send a {tensor.dtype} batch of {tensor.dim()} dims")
        base = slot * (2 + MAX_DIMS)
        desc[base] = DTYPES.index(tensor.dtype)
        desc[base + 1] = tensor.dim()
        desc[base + 2 : base + 2 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
    return desc


def allocate(desc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values = desc.tolist()
    out = []
    for slot in range(2):
        base = slot * (2 + MAX_DIMS)
        shape = values[base + 2 : base + 2 + values[base + 1]]
        out.append(torch.empty(shape, dtype=DTYPES[values[base]]))
    return out[0], out[1]


def send_batch(batch: Batch, peer: int, first: bool) -> list[dist.Work]:
    """Server 0's side: the worker's next batch, after the descriptor when ``first``."""
    inputs, targets = (t.contiguous() for t in batch)
    works = [transport.send(describe((inputs, targets)), peer, FEED_TAG)] if first else []
    return [*works, transport.send(inputs, peer, FEED_TAG + 1), transport.send(targets, peer, FEED_TAG + 2)]


class ShardFeed:
    """Between-graph: this worker reads its own shard while the parameters are in flight."""

    def __init__(self, task: Task, train: Train, worker: int, workers: int) -> None:
        self.task = task
        self.shard = sampler(task, train, worker, workers)

    def post(self, clock: int) -> Batch:
        return batch_at(self.task, self.shard, clock)

    def take(self, posted: Batch, timeout_s: float) -> Batch:
        return posted


class ServerFeed:
    """In-graph: the batch comes from server 0 (rank 0) with its reply."""

    def __init__(self) -> None:
        self.buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def post(self, clock: int) -> list[tuple[torch.Tensor, dist.Work]]:
        if self.buffers is None:  # the shapes come with the first batch
            return []
        fresh = tuple(torch.empty_like(b) for b in self.buffers)
        return [(t, transport.recv(t, 0, FEED_TAG + 1 + i)) for i, t in enumerate(fresh)]

    def take(self, posted: list[tuple[torch.Tensor, dist.Work]], timeout_s: float) -> Batch:
        if not posted:
            desc = torch.zeros(DESCRIPTOR, dtype=torch.int64)
            transport.wait([transport.recv(desc, 0, FEED_TAG)], 0, timeout_s)
            self.buffers = allocate(desc)
            posted = [(t, transport.recv(t, 0, FEED_TAG + 1 + i)) for i, t in enumerate(self.buffers)]
        transport.wait([work for _, work in posted], 0, timeout_s)
        return posted[0][0], posted[1][0]
