"""Data sharding: disjoint and covering shards, the single-process equivalence, positions."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from hpctrain.runtime.data import Position, ShardedSampler, eval_batches, fetch, split


def shards(size: int, batch: int, world: int, position: Position, seed: int = 0) -> list[torch.Tensor]:
    return [ShardedSampler(size, batch, r, world, seed).indices(position) for r in range(world)]


@pytest.mark.parametrize("world", [1, 2, 4])
def test_one_epoch_is_disjoint_and_covers_all_full_batches(world: int) -> None:
    size, batch = 103, 8
    sampler = ShardedSampler(size, batch, 0, world, seed=5)
    seen: list[int] = []
    for offset in range(sampler.steps_per_epoch):
        parts = shards(size, batch, world, Position(0, offset), seed=5)
        assert all(len(p) == batch // world for p in parts)
        seen.extend(int(i) for p in parts for i in p)
    assert len(seen) == len(set(seen)) == (size // batch) * batch  # disjoint; the remainder dropped
    assert set(seen) <= set(range(size))


def test_union_of_shards_is_the_single_process_batch() -> None:
    position = Position(3, 2)
    single = ShardedSampler(64, 16, 0, 1, seed=1).indices(position)
    assert torch.equal(torch.cat(shards(64, 16, 4, position, seed=1)), single)


def test_order_depends_on_seed_and_epoch_only() -> None:
    a = ShardedSampler(50, 10, 1, 2, seed=7)
    b = ShardedSampler(50, 10, 1, 2, seed=7)
    assert torch.equal(a.indices(Position(1, 3)), b.indices(Position(1, 3)))
    assert not torch.equal(a.permutation(0), a.permutation(1))
    assert not torch.equal(a.permutation(0), ShardedSampler(50, 10, 1, 2, seed=8).permutation(0))


def test_positions_advance_through_epochs() -> None:
    sampler = ShardedSampler(25, 10, 0, 1, seed=0)  # 2 steps per epoch
    position = Position()
    for step in range(1, 6):
        position = sampler.advance(position)
        assert position == sampler.position_at(step)
    assert position == Position(2, 1)


def test_refuses_impossible_batches() -> None:
    with pytest.raises(ValueError, match="does not split"):
        ShardedSampler(100, 10, 0, 4, seed=0)
    with pytest.raises(ValueError, match="fewer than one global batch"):
        ShardedSampler(5, 10, 0, 1, seed=0)


def test_fetch_split_and_eval_shards() -> None:
    data = TensorDataset(torch.arange(10.0).unsqueeze(1), torch.arange(10))
    inputs, targets = fetch(data, torch.tensor([4, 1, 7, 2]))
    assert targets.tolist() == [4, 1, 7, 2]
    micro = split((inputs, targets), 2)
    assert [m[1].tolist() for m in micro] == [[4, 1], [7, 2]]
    seen = [int(t) for r in range(3) for _, ts in eval_batches(data, 2, r, 3) for t in ts]
    assert sorted(seen) == list(range(10))
