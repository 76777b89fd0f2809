"""`train.parallel.cpu_offload` reaches FSDP2's CPUOffloadPolicy, and training runs with it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
import torch.distributed as dist

from hpctrain import spec
from hpctrain.examples import gpt
from tests.conftest import SITES
from tests.launcher import run_one_process


def parallel(**fields: object) -> spec.Parallel:
    return msgspec.convert(fields, spec.Parallel)


def test_the_field_defaults_off_and_needs_fsdp_sharding() -> None:
    assert parallel().cpu_offload is False
    assert parallel(dp=1, fsdp=-1, cpu_offload=True).cpu_offload
    assert parallel(dp=2, fsdp=4, cpu_offload=True).cpu_offload  # HSDP
    for fields in ({}, {"dp": 1, "fsdp": -1, "pp": 2}, {"ps": {}}):
        with pytest.raises(msgspec.ValidationError, match="cpu_offload is FSDP2's CPUOffloadPolicy"):
            parallel(**fields, cpu_offload=True)


def test_resolving_on_one_gpu_keeps_it(tmp_path: Path) -> None:
    """resolve() replaces fsdp -1 by the world's 1; the field must survive that (and its check)."""
    resolved = spec.resolve(
        msgspec.convert(job({"dp": 1, "fsdp": -1, "cpu_offload": True}), spec.JobSpec),
        spec.load_site(SITES / "local.yaml"),
    )
    assert resolved.parallel.cpu_offload and resolved.parallel.fsdp == 1


@pytest.fixture
def gloo_world_of_one() -> Iterator[Any]:
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("offload", [False, True])
def test_apply_fsdp_hands_the_offload_policy_to_every_unit_and_the_root(
    gloo_world_of_one: Any, offload: bool
) -> None:
    from torch.distributed.fsdp import CPUOffloadPolicy

    from hpctrain.runtime.parallel.fsdp import apply_fsdp

    torch.manual_seed(0)
    model = gpt.GPT(gpt.config_from_options({"size": "tiny"}))
    apply_fsdp(model, gpt.shard_units(model), gloo_world_of_one, True, None, cpu_offload=offload)
    for module in [*gpt.shard_units(model), model]:
        group = module._get_fsdp_state()._fsdp_param_group
        assert isinstance(group.offload_policy, CPUOffloadPolicy) is offload
        if offload:
            assert group.offload_policy.pin_memory is False  # nothing to pin for on a CPU mesh
    assert all(p.device.type == "cpu" for p in model.parameters())
    x = torch.randint(64, (2, 32))
    loss = gpt.lm_loss(model(x), x)
    loss.backward()
    assert all(p.grad is not None and p.grad.device.type == "cpu" for p in model.parameters())


def job(parallel_dims: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "offload",
        "resources": {"nodes": 1, "tasks_per_node": 1},
        "train": {
            "entrypoint": "hpctrain.examples.gpt:build",
            "parallel": parallel_dims,
            "steps": 4,
            "batch_size": 8,
            "log_every": 1,
            "options": {"size": "tiny"},
        },
    }


def run(run_dir: Path, parallel_dims: dict[str, Any]) -> list[float]:
    return [x["loss"] for x in run_one_process(run_dir, job(parallel_dims)) if x.get("kind") == "train"]


def test_the_runtime_trains_and_saves_with_cpu_offload_as_without(tmp_path: Path) -> None:
    plain = run(tmp_path / "plain", {"dp": 1, "fsdp": -1})
    offloaded = run(tmp_path / "offload", {"dp": 1, "fsdp": -1, "cpu_offload": True})
    assert len(plain) == 4
    assert offloaded == pytest.approx(plain, rel=1e-5, abs=1e-6)
    assert list((tmp_path / "offload").rglob("*.distcp")), "the final checkpoint was not written"
