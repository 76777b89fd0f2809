"""Function jobs on the real local Slurm: a function's value comes back from 2 nodes x 2 ranks, and an
exception comes back with its remote traceback (hpctrain.submit_function, Run.result)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

import hpctrain
from tests.integration.cluster import require_cluster

pytestmark = pytest.mark.cluster

RESOURCES = {"nodes": 2, "tasks_per_node": 2, "time": "00:05:00"}


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()
    # A function job's ranks run as a command job, through the per-rank wrapper of command jobs.
    if importlib.util.find_spec("hpctrain.command.__main__") is None:
        pytest.skip("command jobs on Slurm need the command wrapper (python -m hpctrain.command)")


def test_a_function_returns_its_value_from_every_rank_of_two_nodes(hpctrain_home: Path) -> None:
    def all_reduce(base: float) -> dict[str, object]:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        try:
            total = torch.tensor([base + dist.get_rank()])
            dist.all_reduce(total)
            return {"sum": total.item(), "world": dist.get_world_size(), "rank": os.environ["RANK"]}
        finally:
            dist.destroy_process_group()

    run = hpctrain.submit_function(
        all_reduce, (10.0,), site="local", backend="slurm", resources=RESOURCES, ranks="all"
    )
    try:
        value = run.result(timeout=300)
    finally:
        hpctrain.cancel([run])
    # Ranks 0..3 add 10, 11, 12, 13; the value is rank 0's.
    assert value == {"sum": 46.0, "world": 4, "rank": "0"}
    assert run.status().state == "COMPLETED"


def test_an_exception_on_the_cluster_shows_the_remote_traceback(hpctrain_home: Path) -> None:
    def parse_config(text: str) -> int:
        return int(text)

    run = hpctrain.submit_function(parse_config, ("twelve",), site="local", backend="slurm")
    with pytest.raises(hpctrain.FunctionFailed) as caught:
        run.result(timeout=300)
    assert caught.value.summary.startswith("the function raised ValueError: invalid literal for int()")
    assert "in parse_config" in caught.value.remote_traceback
    assert run.status().state == "FAILED"
