"""Mesh coordinates, data-parallel coordinate, strategy dispatch and the LR schedule."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from hpctrain import spec
from hpctrain.runtime.parallel import STRATEGIES, layout_module
from hpctrain.runtime.parallel.base import SingleStrategy
from hpctrain.runtime.parallel.ddp import DDPStrategy
from hpctrain.runtime.parallel.fsdp import ShardedStrategy
from hpctrain.runtime.parallel.pp import PipelineStrategy
from hpctrain.runtime.train import lr_factor
from hpctrain.spec.layout import Layout

SITE = Path(__file__).resolve().parents[3] / "site-configs" / "local.yaml"


def test_tp_is_innermost_and_pp_outermost() -> None:
    layout = Layout(world_size=8, pp=2, dp=2, fsdp=1, tp=2)
    assert layout.coordinates(0) == {"pp": 0, "dp": 0, "fsdp": 0, "tp": 0}
    assert layout.coordinates(1) == {"pp": 0, "dp": 0, "fsdp": 0, "tp": 1}
    assert layout.coordinates(2) == {"pp": 0, "dp": 1, "fsdp": 0, "tp": 0}
    assert layout.coordinates(7) == {"pp": 1, "dp": 1, "fsdp": 0, "tp": 1}
    with pytest.raises(ValueError):
        layout.coordinates(8)


def test_data_coordinate_is_dp_by_fsdp_and_shared_by_tp_pp_peers() -> None:
    layout = Layout(world_size=16, pp=2, dp=2, fsdp=2, tp=2)
    coords = [layout.data_coordinate(rank) for rank in range(16)]
    assert {world for _, world in coords} == {4}
    assert coords[0] == coords[1] == coords[8] == (0, 4)  # tp peer, pp peer
    assert [c[0] for c in coords[:8:2]] == [0, 1, 2, 3]


def _resolved(parallel: dict[str, object], tasks: int) -> spec.Resolved:
    job = spec.decode(
        spec.JobSpec,
        {
            "name": "x",
            "train": {"entrypoint": "m:f", "parallel": parallel, "batch_size": 16},
            "resources": {"nodes": 1, "tasks_per_node": tasks, "partition": "cpu"},
        },
        "test",
    )
    return spec.resolve(job, spec.load_site(SITE))


@pytest.mark.parametrize(
    ("parallel", "tasks", "module", "strategy"),
    [
        ("ddp", 1, "single", SingleStrategy),
        ("ddp", 4, "ddp", DDPStrategy),
        ({"dp": 2, "fsdp": 2}, 4, "fsdp", ShardedStrategy),
        ({"dp": 1, "fsdp": 2, "tp": 2}, 4, "tp", ShardedStrategy),
        ({"dp": 1, "tp": 2, "pp": 2}, 4, "pp", PipelineStrategy),
        # Asked for with -1 on one task: the layout's own code path, not a plain loop.
        ("fsdp", 1, "fsdp", ShardedStrategy),
        ("tp", 1, "tp", ShardedStrategy),
        ("pp", 1, "pp", PipelineStrategy),
    ],
)
def test_strategy_dispatch(parallel: object, tasks: int, module: str, strategy: type) -> None:
    resolved = _resolved(parallel, tasks)  # type: ignore[arg-type]
    assert layout_module(resolved) == module
    assert STRATEGIES[module] is strategy


def test_ps_jobs_have_no_collective_layout() -> None:
    with pytest.raises(ValueError):
        layout_module(_resolved({"ps": {"heterogeneous": False}}, 4))


def test_lr_warmup_then_cosine_to_zero() -> None:
    assert [lr_factor(s, 4, 20, "cosine") for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(4, 4, 20, "cosine") == 1.0
    assert lr_factor(12, 4, 20, "cosine") == pytest.approx(0.5)
    assert lr_factor(20, 4, 20, "cosine") == pytest.approx(0.0)
    decay = [lr_factor(s, 4, 20, "cosine") for s in range(4, 20)]
    assert all(a > b for a, b in itertools.pairwise(decay))
    assert lr_factor(0, 0, 10, "cosine") == 1.0
    assert lr_factor(5, 0, 10, "cosine") == pytest.approx(0.5 * (1 + math.cos(math.pi / 2)))


def test_lr_constant_after_warmup() -> None:
    assert [lr_factor(s, 2, 10, "constant") for s in range(5)] == [0.5, 1.0, 1.0, 1.0, 1.0]
