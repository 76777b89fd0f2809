"""Parameter-server building blocks: sharding, data order, batch descriptors, headers, roles, checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from hpctrain.rundir import RunDir
from hpctrain.runtime import bootstrap, checkpoint_folder
from hpctrain.runtime.ps import checkpoint, feed, roles, sharding
from hpctrain.runtime.ps.transport import PUSH, Header
from hpctrain.runtime.task import Task
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


def test_worker_shards_are_disjoint_parts_of_each_global_batch() -> None:
    """Between-graph workers and the in-graph feeder use the same sampler: worker k reads part k
    of global batch c, so W workers together read exactly what one process would."""
    data = torch.utils.data.TensorDataset(torch.arange(100).float().unsqueeze(1), torch.arange(100))
    task = Task(model=torch.nn.Linear(1, 1), train_data=data, loss=torch.nn.functional.mse_loss)
    train = Train(entrypoint="m:f", batch_size=12, seed=7)
    workers = 3
    shards = [feed.sampler(task, train, w, workers) for w in range(workers)]
    for clock in range(20):  # past the end of an epoch (8 global batches)
        parts = [feed.batch_at(task, shard, clock)[1].tolist() for shard in shards]
        assert all(len(p) == 4 for p in parts)
        assert len({i for part in parts for i in part}) == 12
    epoch0 = [i for c in range(8) for s in shards for i in feed.batch_at(task, s, c)[1].tolist()]
    assert len(set(epoch0)) == len(epoch0) == 96
    assert feed.batch_at(task, shards[1], 5)[1].tolist() == feed.batch_at(task, shards[1], 5)[1].tolist()
    with pytest.raises(ValueError, match="does not split over 5"):
        feed.sampler(task, train, 0, 5)


@pytest.mark.parametrize(
    "batch",
    [
        (torch.randn(4, 1, 8, 8), torch.arange(4)),
        (torch.randint(0, 255, (3, 5), dtype=torch.uint8), torch.randn(3, 2, dtype=torch.float64)),
    ],
)
def test_batch_descriptor_round_trip(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    buffers = feed.allocate(feed.describe(batch))
    assert [(b.shape, b.dtype) for b in buffers] == [(t.shape, t.dtype) for t in batch]
    with pytest.raises(ValueError, match="cannot send"):
        feed.describe((torch.zeros(2, dtype=torch.complex64), torch.zeros(2)))


def test_lr_schedule_is_the_runtimes() -> None:
    """Servers apply the runtime's lr_factor per update (no schedule of their own)."""
    from hpctrain.runtime.train import lr_factor

    assert lr_factor(0, 2, 10, "cosine") == pytest.approx(0.5)
    assert lr_factor(10, 2, 10, "cosine") == pytest.approx(0.0)


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


def test_roles_from_the_runtimes_bootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hetjob step (as Slurm sets it up, checked on the local cluster): global SLURM_PROCID,
    SLURM_STEP_NUM_TASKS over both components; servers first."""
    env = {
        "SLURM_PROCID": "2",
        "SLURM_STEP_ID": "0",
        "SLURM_NTASKS": "6",
        "SLURM_STEP_NUM_TASKS": "6",
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURMD_NODENAME": "node2",
        "SLURM_HET_SIZE": "2",
        "SLURM_NTASKS_HET_GROUP_0": "2",
        "SLURM_NTASKS_HET_GROUP_1": "4",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    info = bootstrap.discover(env)
    lay = roles.roles(info, 2)
    assert (lay.info.world_size, lay.is_server, lay.index, lay.workers, lay.info.hostname) == (
        6,
        False,
        0,
        4,
        "node2",
    )
    assert lay.name == "worker 0"
    assert roles.Roles(info, 3).name == "server 2"  # the spec's words, which the supervisor uses too
    with pytest.raises(ValueError, match="component 0 has 2 tasks"):
        roles.roles(info, 1)
    with pytest.raises(ValueError, match="leave no worker"):
        roles.roles(info, 6)


def _shard(value: float) -> dict:
    return {"params": {"w": torch.full((2,), value)}, "optim": {}, "clocks": {0: int(value)}, "version": 0}


def _events() -> tuple[list[tuple[str, dict]], Callable[..., None]]:
    seen: list[tuple[str, dict]] = []
    return seen, lambda event, **fields: seen.append((event, fields))


def test_checkpoint_manifest_only_when_complete_and_pruned(tmp_path: Path) -> None:
    seen, event = _events()
    checkpoint.save_shard(tmp_path, 10, 0, 2, _shard(1), keep=1)
    assert checkpoint.load_latest(tmp_path, event) is None  # server 1's shard is missing
    checkpoint.save_shard(tmp_path, 10, 1, 2, {**_shard(2), "params": {"b": torch.ones(1)}}, keep=1)
    step, state = checkpoint.load_latest(tmp_path, event)  # type: ignore[misc]
    assert step == 10 and set(state["params"]) == {"w", "b"}
    manifest = checkpoint_folder.read_manifest(RunDir(tmp_path).checkpoint(10))
    assert not isinstance(manifest, str) and manifest.servers == 2
    assert set(manifest.files) == {"server-0.pt", "server-1.pt"}
    for server in (0, 1):
        checkpoint.save_shard(tmp_path, 20, server, 2, _shard(3), keep=1)
    assert [p.name for p in checkpoint_folder.complete(RunDir(tmp_path).checkpoints)] == ["step-00000020"]
    assert not RunDir(tmp_path).checkpoint(10).exists()
    assert not list(RunDir(tmp_path).checkpoint(20).glob(".*tmp*"))
    assert seen == []


def test_a_corrupt_newest_shard_falls_back_to_the_previous_checkpoint(tmp_path: Path) -> None:
    seen, event = _events()
    for step, value in ((10, 1.0), (20, 2.0)):
        for server in (0, 1):
            checkpoint.save_shard(tmp_path, step, server, 2, _shard(value), keep=2)
    shard = RunDir(tmp_path).checkpoint(20) / "server-1.pt"
    shard.write_bytes(shard.read_bytes()[:-7])  # truncated, as by a full disk
    step, state = checkpoint.load_latest(tmp_path, event)  # type: ignore[misc]
    assert step == 10 and float(state["params"]["w"][0]) == 1.0
    assert [name for name, _ in seen] == ["checkpoint_corrupt"]
    assert "server-1.pt has" in seen[0][1]["problem"] and seen[0][1]["path"].endswith("step-00000020")


def test_a_restarted_server_forgets_its_shards_newer_than_its_resume(tmp_path: Path) -> None:
    _seen, event = _events()
    for server in (0, 1):
        checkpoint.save_shard(tmp_path, 10, server, 2, _shard(1), keep=3)
    checkpoint.save_shard(tmp_path, 20, 0, 2, _shard(2), keep=3)  # the attempt died before server 1's
    checkpoint.forget_newer_shards(tmp_path, 0, resumed=10)
    assert not (RunDir(tmp_path).checkpoint(20) / "server-0.pt").exists()
    checkpoint.save_shard(tmp_path, 20, 1, 2, _shard(5), keep=3)  # no manifest over two attempts' shards
    assert checkpoint.load_latest(tmp_path, event)[0] == 10  # type: ignore[index]
