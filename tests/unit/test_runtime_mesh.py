"""Mesh coordinates, data-parallel coordinate, layout dispatch and the LR schedule."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from hpctrain.runtime.mesh import coordinates, data_coordinate
from hpctrain.runtime.parallel import layout_module
from hpctrain.runtime.train import lr_factor
from hpctrain.spec import Parallel, ParameterServer, Resolved, load_site


def test_tp_is_innermost_and_pp_outermost() -> None:
    dims = Parallel(pp=2, dp=2, fsdp=1, tp=2)
    assert coordinates(0, dims) == {"pp": 0, "dp": 0, "fsdp": 0, "tp": 0}
    assert coordinates(1, dims) == {"pp": 0, "dp": 0, "fsdp": 0, "tp": 1}
    assert coordinates(2, dims) == {"pp": 0, "dp": 1, "fsdp": 0, "tp": 0}
    assert coordinates(7, dims) == {"pp": 1, "dp": 1, "fsdp": 0, "tp": 1}
    with pytest.raises(ValueError):
        coordinates(8, dims)


def test_data_coordinate_is_dp_by_fsdp_and_shared_by_tp_pp_peers() -> None:
    dims = Parallel(pp=2, dp=2, fsdp=2, tp=2)
    coords = [data_coordinate(rank, dims) for rank in range(16)]
    assert {world for _, world in coords} == {4}
    assert coords[0] == coords[1] == coords[8] == (0, 4)  # tp peer, pp peer
    assert [c[0] for c in coords[:8:2]] == [0, 1, 2, 3]


def _resolved(parallel: Parallel, world: int) -> Resolved:
    from hpctrain.spec import JobSpec, Train

    job = JobSpec(name="x", train=Train(entrypoint="m:f"))
    return Resolved(
        job=job,
        site=load_site(Path(__file__).resolve().parents[2] / "site-configs" / "local.yaml"),
        partition="cpu",
        world_size=world,
        parallel=parallel,
    )


@pytest.mark.parametrize(
    ("dims", "world", "module"),
    [
        (Parallel(dp=1), 1, "single"),
        (Parallel(dp=4), 4, "ddp"),
        (Parallel(dp=2, fsdp=2), 4, "fsdp"),
        (Parallel(dp=1, fsdp=2, tp=2), 4, "tp"),
        (Parallel(dp=1, tp=2, pp=2), 4, "pp"),
    ],
)
def test_layout_dispatch(dims: Parallel, world: int, module: str) -> None:
    assert layout_module(_resolved(dims, world)) == module


def test_ps_jobs_have_no_collective_layout() -> None:
    with pytest.raises(ValueError):
        layout_module(_resolved(Parallel(ps=ParameterServer()), 4))


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
