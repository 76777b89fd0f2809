"""fp8 and activation checkpointing on the CPU: one-line errors without GPU or torchao, same gradients."""

from __future__ import annotations

import copy
import sys

import msgspec
import pytest
import torch
from torch import nn

from hpctrain import spec
from hpctrain.examples import gpt
from hpctrain.runtime import precision
from hpctrain.runtime.task import Task


def train_section(**fields: object) -> spec.Train:
    return msgspec.convert({"entrypoint": "hpctrain.examples.gpt:build", **fields}, spec.Train)


def gpt_task(**options: object) -> Task:
    torch.manual_seed(0)
    return gpt.build(train_section(options={"size": "tiny", **options}))


def test_spec_accepts_the_new_options_and_rejects_unknown_modes() -> None:
    train = train_section(precision="fp8", activation_checkpointing="selective")
    assert (train.precision, train.activation_checkpointing) == ("fp8", "selective")
    with pytest.raises(msgspec.ValidationError, match="activation_checkpointing"):
        train_section(activation_checkpointing="some")
    with pytest.raises(msgspec.ValidationError, match="precision"):
        train_section(precision="fp4")


def test_fp8_on_the_cpu_is_a_one_line_error() -> None:
    task = gpt_task()
    with pytest.raises(ValueError, match="fp8 needs a CUDA GPU") as caught:
        precision.prepare(task, train_section(precision="fp8"), "cpu")
    assert "\n" not in str(caught.value)


def test_fp8_without_torchao_names_the_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a GPU but no torchao (simulated by blocking the import): a one-line error naming torchao."""
    monkeypatch.setitem(sys.modules, "torchao", None)
    monkeypatch.setitem(sys.modules, "torchao.float8", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (9, 0))
    with pytest.raises(ValueError, match="fp8 needs torchao") as caught:
        precision.convert_to_fp8(nn.Linear(2048, 2048), "cuda")
    assert "\n" not in str(caught.value)


def test_fp8_leaves_the_head_and_small_or_unaligned_layers_in_bf16() -> None:
    assert precision.fp8_eligible(nn.Linear(2048, 8192), "blocks.0.mlp.fc")
    assert not precision.fp8_eligible(nn.Linear(2048, 32768), "head")
    assert not precision.fp8_eligible(nn.Linear(2048, 32768), "model.lm_head")
    assert not precision.fp8_eligible(nn.Linear(2048, 1000), "blocks.0.mlp.fc")  # 1000 % 16 != 0
    assert not precision.fp8_eligible(nn.Linear(256, 256), "blocks.0.attn.q")  # too small to pay off
    assert not precision.fp8_eligible(nn.LayerNorm(2048), "blocks.0.ln1")


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_activation_checkpointing_gives_the_same_loss_gradients_and_names(mode: str) -> None:
    reference = gpt_task()
    task = gpt_task()
    task.model.load_state_dict(copy.deepcopy(reference.model.state_dict()))
    precision.prepare(task, train_section(activation_checkpointing=mode), "cpu")
    assert list(task.model.state_dict()) == list(reference.model.state_dict())
    inputs, targets = (torch.stack(t) for t in zip(*(task.train_data[i] for i in range(4)), strict=True))
    losses = []
    for model in (reference.model, task.model):
        loss = gpt.lm_loss(model(inputs), targets)
        loss.backward()
        losses.append(loss.detach())
    assert torch.equal(losses[0], losses[1])
    for (name, a), b in zip(reference.model.named_parameters(), task.model.parameters(), strict=True):
        assert b.grad is not None and torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-7), name


def test_activation_checkpointing_recomputes_in_backward() -> None:
    """The checkpointed block's forward runs again during backward (that is where memory is saved)."""
    task = gpt_task()
    calls = []
    block = task.shard_units(task.model)[0]  # type: ignore[misc]
    block.attn.register_forward_hook(lambda *_: calls.append(torch.is_grad_enabled()))
    precision.prepare(task, train_section(activation_checkpointing="full"), "cpu")
    inputs, targets = task.train_data[0]
    loss = gpt.lm_loss(task.model(inputs[None]), targets[None])
    assert len(calls) == 1
    loss.backward()
    assert len(calls) == 2


def test_activation_checkpointing_needs_named_blocks() -> None:
    task = Task(model=nn.Linear(4, 4), train_data=[], loss=nn.functional.mse_loss)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Task\.shard_units"):
        precision.prepare(task, train_section(activation_checkpointing="full"), "cpu")
