"""convert_to_fp8's recipe and exclusions are checked before anything needs a GPU or torchao."""

from __future__ import annotations

import pytest
from torch import nn

from hpctrain.runtime import precision


def test_an_unknown_recipe_is_named_with_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match="fp8 recipe 'blockwise' is not one of tensorwise, tensorwise-fast, rowwise"
    ):
        precision.convert_to_fp8(nn.Linear(2048, 2048), "cuda", recipe="blockwise")


def test_the_default_recipe_is_tensorwise_with_fast_accumulation() -> None:
    assert precision.DEFAULT_FP8_RECIPE == "tensorwise-fast"
    assert set(precision.FP8_RECIPES) == {"tensorwise", "tensorwise-fast", "rowwise", "rowwise_with_gw_hp"}


def test_a_known_recipe_on_the_cpu_still_gives_the_one_line_gpu_error() -> None:
    with pytest.raises(ValueError, match="fp8 needs a CUDA GPU"):
        precision.convert_to_fp8(nn.Linear(2048, 2048), "cpu", recipe="rowwise", fast_accum_backward=True)
