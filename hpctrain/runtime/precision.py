"""Options applied to the model before a layout wraps it: fp8 linears, activation checkpointing.

``train.precision: fp8`` swaps the model's large linear layers for torchao's float8 training
linears (``train.fp8_recipe``, by default tensorwise dynamic scaling with fast accumulation in
the forward and both backward matmuls; matmuls in fp8 on the tensor cores, everything else under
bf16 autocast). Left in bf16, as usual: output layers (the LM head: its logits feed the loss directly),
layers with a dimension that is not a multiple of 16 (the fp8 matmul needs it) and small layers,
whose casts cost more than the faster matmul saves. Parameter names do not change, so checkpoints
load across precisions.

``train.activation_checkpointing`` recomputes activations in the backward pass for each of the
task's blocks (``Task.shard_units``): ``full`` keeps only each block's input, ``selective`` keeps the
outputs of matmuls and attention and recomputes the cheap element-wise ops (norms, activations).
Both replace the block's ``forward`` in place, so names stay and ``torch.compile`` sees them.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from hpctrain.runtime.task import Task
from hpctrain.spec import Train
from hpctrain.spec.job import DEFAULT_FP8_RECIPE, FP8Recipe

OUTPUT_LAYER_NAMES = frozenset({"head", "lm_head", "output", "classifier"})
MIN_FP8_FEATURES = 1024  # below this the per-step casts and amax reductions outweigh the fp8 matmul
FP8_MIN_CAPABILITY = (8, 9)  # Ada and Hopper have fp8 tensor cores
FP8_RECIPES: tuple[str, ...] = typing.get_args(FP8Recipe)


def prepare(task: Task, train: Train, device_type: str) -> None:
    """Apply the job's precision and activation-checkpointing options to ``task.model`` in place."""
    if train.precision == "fp8":
        convert_to_fp8(task.model, device_type, train.fp8_recipe)
    if train.activation_checkpointing != "none":
        if task.shard_units is None:
            raise ValueError(
                "train.activation_checkpointing needs the task to name its blocks (Task.shard_units)"
            )
        for block in task.shard_units(task.model):
            checkpoint_block(block, train.activation_checkpointing)


# ----------------------------------------------------------------------------------------------
# fp8
# ----------------------------------------------------------------------------------------------


def fp8_eligible(module: nn.Module, fqn: str) -> bool:
    """A linear whose matmul runs in fp8: not an output layer, aligned, and large enough."""
    if not isinstance(module, nn.Linear) or fqn.rsplit(".", 1)[-1] in OUTPUT_LAYER_NAMES:
        return False
    dims = (module.in_features, module.out_features)
    return all(d % 16 == 0 for d in dims) and min(dims) >= MIN_FP8_FEATURES


def fp8_unavailable_reason(device_type: str) -> str | None:
    """Why fp8 training cannot run here (one line), or None."""
    if device_type != "cuda":
        return (
            "train.precision: fp8 needs a CUDA GPU with fp8 tensor cores (H100/H200/L40S); "
            f"this task runs on {device_type}"
        )
    capability = torch.cuda.get_device_capability()
    if capability < FP8_MIN_CAPABILITY:
        name = torch.cuda.get_device_name()
        return (
            "train.precision: fp8 needs compute capability 8.9 or newer; "
            f"{name} has {capability[0]}.{capability[1]}"
        )
    try:
        import torchao.float8  # noqa: F401
    except ImportError as error:
        return f"train.precision: fp8 needs torchao on the compute nodes (pip install torchao): {error}"
    return None


def convert_to_fp8(
    model: nn.Module,
    device_type: str,
    recipe: str = DEFAULT_FP8_RECIPE,
    *,
    exclude: tuple[str, ...] = (),
    fast_accum_backward: bool = False,
) -> list[str]:
    """Swap eligible linears for torchao's Float8Linear (``recipe``) in place; returns their names.

    ``exclude``: name fragments (``"attn."``) of linears to leave in bf16 as well.
    ``fast_accum_backward``: the two backward matmuls accumulate like the forward one (the fast,
    less precise fp8 accumulation; torchao uses it only in the forward by default). The recipe
    ``tensorwise-fast`` is tensorwise with this on.
    """
    if recipe not in FP8_RECIPES:
        raise ValueError(f"fp8 recipe {recipe!r} is not one of {', '.join(FP8_RECIPES)}")
    problem = fp8_unavailable_reason(device_type)
    if problem is not None:
        raise ValueError(problem)
    import dataclasses

    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from torchao.float8.config import Float8GemmConfig

    def wanted(module: nn.Module, fqn: str) -> bool:
        return fp8_eligible(module, fqn) and not any(part in fqn for part in exclude)

    converted = [name for name, module in model.named_modules() if wanted(module, name)]
    if not converted:
        raise ValueError(
            f"train.precision: fp8 found no linear layer to convert (both dims multiples of 16 and at "
            f"least {MIN_FP8_FEATURES}, output layers excluded)"
        )
    fast_accum_backward = fast_accum_backward or recipe == "tensorwise-fast"
    config = Float8LinearConfig.from_recipe_name(recipe.removesuffix("-fast"))
    if fast_accum_backward:
        fast = Float8GemmConfig(use_fast_accum=True)
        config = dataclasses.replace(config, gemm_config_grad_input=fast, gemm_config_grad_weight=fast)
    convert_to_float8_training(model, config=config, module_filter_fn=wanted)
    return converted


# ----------------------------------------------------------------------------------------------
# Activation checkpointing
# ----------------------------------------------------------------------------------------------


@functools.cache
def _saved_ops() -> frozenset[Any]:
    """Ops whose outputs selective checkpointing keeps: the expensive ones (matmuls, attention)."""
    aten = torch.ops.aten
    names = (
        "mm",
        "addmm",
        "bmm",
        "_scaled_mm",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    )
    return frozenset(getattr(aten, name).default for name in names if hasattr(aten, name))


def _keep_expensive(_ctx: Any, op: Any, *_args: Any, **_kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in _saved_ops() else CheckpointPolicy.PREFER_RECOMPUTE


def checkpoint_block(block: nn.Module, mode: str) -> None:
    """Recompute ``block``'s activations in backward (``full`` or ``selective``), keeping its names."""
    if mode not in ("full", "selective"):
        raise ValueError(f"train.activation_checkpointing: unknown mode {mode!r} (none, selective, full)")
    forward: Callable[..., Any] = block.forward
    extra: dict[str, Any] = {}
    if mode == "selective":
        extra["context_fn"] = functools.partial(create_selective_checkpoint_contexts, _keep_expensive)

    def recomputed(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(forward, *args, use_reentrant=False, **extra, **kwargs)

    block.forward = recomputed  # type: ignore[method-assign]
