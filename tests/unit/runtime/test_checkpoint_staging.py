"""Staging buffers allocated in the background after the first step: ready before the first save,
waited for by a save that comes while they are still being allocated, replaced by allocation at
the save when the background allocation fails."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from hpctrain.runtime.checkpoint import Checkpointer
from hpctrain.runtime.checkpoint_folder import verify
from hpctrain.runtime.staging import HostStaging, leaves


@pytest.fixture(autouse=True)
def world_of_one() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


def a_state() -> dict:
    return {"model": {"w": torch.randn(8, 4), "b": torch.randn(8)}, "optim": {"state": [torch.randn(3)]}}


def no_events(event: str, **fields: object) -> None:
    del event, fields


@pytest.mark.parametrize("writer", ["auto", "process"])
def test_the_first_save_finds_the_buffers_reserved_after_the_first_step(tmp_path: Path, writer: str) -> None:
    checkpoints = Checkpointer(tmp_path, 0, 2, no_events, writer=writer)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    assert checkpoints.load(model, optimizer) is None  # every attempt starts here: nothing to resume
    staging = checkpoints.staging
    # AdamW's state is foreseen: the weights and two moments per parameter, before the first step
    assert staging is not None and staging._foreseen is not None and staging._reservation is None
    foreseen = staging._foreseen.result(timeout=60)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert sum(b.numel() * b.element_size() for spare in foreseen.values() for b in spare) == 3 * weights
    pooled = {b.data_ptr() for spare in foreseen.values() for b in spare}
    train_step(model, optimizer)
    assert staging._reservation is not None
    reserved = staging._reservation.result(timeout=60)
    # model weights, and per parameter AdamW's step, exp_avg and exp_avg_sq
    assert len(reserved) == 4 + 3 * 4
    # every foreseen buffer went to the state; only the scalar step counters came after the step
    assert staging.foreseen_bytes == 3 * weights
    assert pooled == {b.data_ptr() for b in reserved.values() if b.dim()}
    assert staging.reserve_s is not None and staging.reserve_s >= 0
    train_step(model, optimizer)  # the hook ran once: a second step reserves nothing more
    expected = [p.detach().clone() for p in model.parameters()]
    checkpoints.save(2, model, optimizer, {"position": {"epoch": 0, "offset": 2}})
    assert staging.allocations == len(staging.buffers) == len(reserved)  # the save allocated nothing
    assert all(staging.buffers[path] is buffer for path, buffer in reserved.items())
    assert verify(tmp_path / "checkpoints" / "step-00000002") is None
    fresh = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    restored = checkpoints.load(fresh, torch.optim.AdamW(fresh.parameters(), lr=0.01))
    assert restored is not None and restored.step == 2
    for a, b in zip(fresh.parameters(), expected, strict=True):
        assert torch.equal(a, b)


def test_a_save_while_the_buffers_are_still_allocated_waits_for_them(monkeypatch: pytest.MonkeyPatch) -> None:
    staging = HostStaging(cuda=False, shared=False)
    released = threading.Event()
    allocate = HostStaging._allocate

    def slow_allocate(self: HostStaging, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        released.wait(30)
        return allocate(self, shape, dtype)

    monkeypatch.setattr(HostStaging, "_allocate", slow_allocate)
    state = a_state()
    staging.reserve(state)
    for _, tensor in leaves(state):
        tensor.add_(1.0)  # the save must copy the values as they are at the save, not at the reservation
    threading.Timer(0.3, released.set).start()
    began = time.perf_counter()
    staged = staging.stage(state)
    assert time.perf_counter() - began >= 0.25  # it waited for the reservation...
    assert staging.allocations == len(staging.buffers) == 3  # ...and allocated nothing twice
    for (path, original), (_, copy) in zip(leaves(state), leaves(staged), strict=True):
        assert copy is staging.buffers[path] and copy is not original
        assert torch.equal(copy, original)


def test_a_failed_reservation_leaves_the_save_to_allocate(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    staging = HostStaging(cuda=False, shared=False)
    allocate = HostStaging._allocate

    def refused_in_the_background(
        self: HostStaging, shape: tuple[int, ...], dtype: torch.dtype
    ) -> torch.Tensor:
        if threading.current_thread().name.startswith("ckpt-reserve"):
            raise RuntimeError("cudaHostRegister refused")
        return allocate(self, shape, dtype)

    monkeypatch.setattr(HostStaging, "_allocate", refused_in_the_background)
    state = a_state()
    staging.reserve(state)
    with caplog.at_level(logging.WARNING, logger="hpctrain.runtime.staging"):
        staged = staging.stage(state)
    assert "cudaHostRegister refused" in caplog.text
    assert staging.allocations == len(staging.buffers) == 3
    for (_, original), (_, copy) in zip(leaves(state), leaves(staged), strict=True):
        assert torch.equal(copy, original) and copy is not original


def test_an_optimizer_of_unknown_state_is_sized_after_its_first_step(tmp_path: Path) -> None:
    checkpoints = Checkpointer(tmp_path, 0, 2, no_events, writer="auto")
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.01)
    assert checkpoints.load(model, optimizer) is None
    assert checkpoints.staging is None  # nothing foreseen: its state's shapes are not known here
    train_step(model, optimizer)
    staging = checkpoints.staging
    assert staging is not None and staging._reservation is not None
    assert len(staging._reservation.result(timeout=60)) == 4 + 2 * 4  # weights; Adagrad's step and sum
    assert staging.foreseen_bytes == 0


def test_foreseen_buffers_the_state_does_not_use_are_given_back() -> None:
    staging = HostStaging(cuda=False, shared=False)
    staging.reserve_like([((3,), torch.float32), ((5,), torch.float32)])
    released: list[tuple[int, ...]] = []
    staging._release = lambda buffer: released.append(tuple(buffer.shape))  # type: ignore[method-assign]
    staging.reserve({"a": torch.zeros(3), "b": torch.zeros(2, dtype=torch.float64)})
    staging.close()
    assert released == [(5,)]
    assert staging.foreseen_bytes == 3 * 4
    assert staging.buffers["/a"].shape == (3,) and staging.buffers["/b"].dtype == torch.float64
