"""Parameter-server building blocks: sharding, data order, headers, rank layout, checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hpctrain.runtime.ps import checkpoint, roles, sharding
from hpctrain.runtime.ps.common import batch_indices, lr_factor, worker_batch
from hpctrain.runtime.ps.transport import PUSH, Header
from hpctrain.spec import Train


def test_assign_balances_by_size_largest_first() -> None:
    sizes = [3, 6, 1, 5, 2, 4]
    owner = sharding.assign(sizes, 3)
    loads = [sum(s for s, o in zip(sizes, owner, strict=True) if o == k) for k in range(3)]
    assert loads == [7, 7, 7]
    assert sharding.imbalance(sizes, owner, 3) == pytest.approx(1.0)
    assert owner == sharding.assign(sizes, 3)  # every process computes the same map


def test_assign_real_model_is_balanced_and_complete() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Linear(128, 128), torch.nn.Linear(128, 10))
    sizes = [p.numel() for p in model.parameters()]
    owner = sharding.assign(sizes, 2)
    parts = sharding.shards(owner, 2)
    assert sorted(i for part in parts for i in part) == list(range(len(sizes)))
    # By-tensor sharding cannot split the 128x128 weight: it sits alone, everything else opposite.
    big = sizes.index(max(sizes))
    assert [i for i, o in enumerate(owner) if o == owner[big]] == [big]
    with pytest.raises(ValueError):
        sharding.assign(sizes, 0)


def test_more_servers_than_tensors_leaves_some_empty() -> None:
    assert sharding.shards(sharding.assign([5, 3], 4), 4) == [[0], [1], [], []]


def test_flatten_round_trip() -> None:
    tensors = [torch.randn(3, 4), torch.randn(5)]
    flat = sharding.flatten(tensors)
    targets = [torch.zeros(3, 4), torch.zeros(5)]
    sharding.unflatten_into(flat, targets)
    assert all(torch.equal(a, b) for a, b in zip(tensors, targets, strict=True))


def test_batch_indices_disjoint_per_epoch_and_deterministic() -> None:
    length, workers, batch = 100, 3, 8
    steps_per_epoch = len(range(2, length, workers)) // batch  # the shortest shard
    seen: list[int] = []
    for worker in range(workers):
        for clock in range(steps_per_epoch):
            seen += batch_indices(length, worker, workers, batch, seed=7, clock=clock)
    assert len(seen) == len(set(seen)) == workers * steps_per_epoch * batch
    assert batch_indices(length, 1, workers, batch, 7, 5) == batch_indices(length, 1, workers, batch, 7, 5)
    assert batch_indices(length, 1, workers, batch, 7, 0) != batch_indices(length, 1, workers, batch, 8, 0)
    with pytest.raises(ValueError):
        batch_indices(10, 0, 3, 8, 0, 0)


def test_worker_batch_splits_global_batch() -> None:
    assert [worker_batch(10, w, 4) for w in range(4)] == [3, 3, 2, 2]


def test_lr_factor_warmup_and_cosine() -> None:
    train = Train(entrypoint="m:f", steps=10, warmup_steps=2, lr_schedule="cosine")
    assert lr_factor(train, 0) == pytest.approx(0.5)
    assert lr_factor(train, 2) == pytest.approx(1.0)
    assert lr_factor(train, 10) == pytest.approx(0.0)


def test_header_round_trip() -> None:
    header = Header(kind=PUSH, clock=12, version=2**40, samples=32, loss=0.25, eval_version=5)
    parsed = Header.parse(header.tensor())
    assert (parsed.kind, parsed.clock, parsed.version, parsed.eval_version, parsed.loss) == (
        PUSH,
        12,
        2**40,
        5,
        0.25,
    )


def test_layout_from_env_and_hetjob(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "SLURM_HET_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "2")
    monkeypatch.setenv("SLURM_NTASKS", "4")  # one component's count: the het counts win
    monkeypatch.setenv("SLURM_HET_SIZE", "2")
    monkeypatch.setenv("SLURM_NTASKS_HET_GROUP_0", "2")
    monkeypatch.setenv("SLURM_NTASKS_HET_GROUP_1", "4")
    lay = roles.layout(2)
    assert (lay.world_size, lay.is_server, lay.index, lay.workers) == (6, False, 0, 4)
    roles.check_hetjob(lay)
    with pytest.raises(RuntimeError, match="component 0 has 2 tasks"):
        roles.check_hetjob(roles.layout(1))


def test_layout_prefers_dist_info() -> None:
    class Info:
        rank, world_size, master_addr, master_port, hostname = 0, 3, "node1", 1234, "node1"

    lay = roles.layout(1, Info())
    assert (lay.is_server, lay.workers, lay.master_addr, lay.node) == (True, 2, "node1", "node1")
    with pytest.raises(RuntimeError, match="leave no worker"):
        roles.layout(3, Info())


def _shard(value: float) -> dict:
    return {"params": {"w": torch.full((2,), value)}, "optim": {}, "clocks": {0: int(value)}, "version": 0}


def test_checkpoint_manifest_only_when_complete_and_pruned(tmp_path: Path) -> None:
    checkpoint.save_shard(tmp_path, 10, 0, 2, _shard(1), keep=1)
    assert checkpoint.load_latest(tmp_path) is None  # server 1's shard is missing
    checkpoint.save_shard(tmp_path, 10, 1, 2, {**_shard(2), "params": {"b": torch.ones(1)}}, keep=1)
    step, state = checkpoint.load_latest(tmp_path)  # type: ignore[misc]
    assert step == 10 and set(state["params"]) == {"w", "b"}
    for server in (0, 1):
        checkpoint.save_shard(tmp_path, 20, server, 2, _shard(3), keep=1)
    assert checkpoint.complete_steps(tmp_path) == [20]
    assert not (tmp_path / "checkpoints" / "step-10").exists()
    assert not list((tmp_path / "checkpoints" / "step-20").glob(".*tmp*"))
