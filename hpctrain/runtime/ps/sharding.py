"""Which server owns which parameter tensor: greedy largest-first bin packing, plus flat-buffer helpers."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def assign(sizes: Sequence[int], servers: int) -> list[int]:
    """Owner server of each tensor, balancing total elements per server.

    Largest tensors first, each to the currently lightest server (ties: lowest server index, then
    lowest tensor index), so the result is deterministic: every process computes the same map
    without talking, and a resumed job with the same model gets the same one.
    """
    if servers < 1:
        raise ValueError(f"need at least one server, got {servers}")
    load = [0] * servers
    owner = [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        target = min(range(servers), key=lambda s: (load[s], s))
        owner[index] = target
        load[target] += sizes[index]
    return owner


def shards(owner: Sequence[int], servers: int) -> list[list[int]]:
    """Tensor indices of each server, in model order."""
    out: list[list[int]] = [[] for _ in range(servers)]
    for index, server in enumerate(owner):
        out[server].append(index)
    return out


def imbalance(sizes: Sequence[int], owner: Sequence[int], servers: int) -> float:
    """Largest server load over the mean load (1.0 = perfect); for logs and tests."""
    load = [0] * servers
    for size, server in zip(sizes, owner, strict=True):
        load[server] += size
    mean = sum(load) / servers
    return max(load) / mean if mean else 1.0


def flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One contiguous fp32 CPU buffer: one message per server instead of one per tensor."""
    if not tensors:
        return torch.zeros(0)
    return torch.cat([t.detach().reshape(-1).float().cpu() for t in tensors])


def unflatten_into(flat: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
    """Copy a buffer made by :func:`flatten` back into ``tensors`` in place."""
    offset = 0
    with torch.no_grad():
        for tensor in tensors:
            count = tensor.numel()
            tensor.copy_(flat[offset : offset + count].view_as(tensor))
            offset += count
