"""The samplers that need no study: the search space checked, and the trials of `grid` and `random`.

A space maps dotted keys to a list of values (the grid's choices) or a ``spec.Range``; ``grid.py``
does the grid's arithmetic, ``study.py`` hands the same space to Optuna.
"""

from __future__ import annotations

import math
import random

from hpctrain import spec
from hpctrain.errors import SpecError
from hpctrain.rundir.structs import SweepValue as Value
from hpctrain.spec.sweep import Dimension, Range
from hpctrain.sweep.grid import expand, grid_size

SIGNIFICANT_DIGITS = 6
"""Sampled floats are rounded to this many digits: trial tables and folders stay readable."""
MAX_SEED = 2**32 - 1
"""The largest seed (numpy's, under Optuna's samplers); one seed range for every sampler."""


def check_space(chosen: spec.Sweep) -> None:
    """Refuse a space the sampler cannot draw from, naming the field."""
    if not chosen.grid:
        raise SpecError("sweep.grid: nothing to sweep; give --grid KEY=V1,V2 or a sweep.grid section")
    if not 0 <= chosen.seed <= MAX_SEED:
        raise SpecError(f"sweep.seed: {chosen.seed} is outside 0..{MAX_SEED}, the seeds Optuna takes")
    for key, dimension in chosen.grid.items():
        if isinstance(dimension, list) and not dimension:
            raise SpecError(f"sweep.grid.{key}: no values")
        if isinstance(dimension, Range):
            check_range(f"sweep.grid.{key}", dimension)
            if chosen.sampler == "grid":
                raise SpecError(
                    f"sweep.grid.{key}: a range needs sweep.sampler random or optuna; the grid sampler "
                    "takes lists of values"
                )
    if chosen.sampler != "grid":
        if chosen.budget is None:
            raise SpecError(f"sweep.budget: sampler {chosen.sampler} needs a trial budget (--budget N)")
        if chosen.random is not None:
            raise SpecError("sweep.random: drawing from the grid is the grid sampler's; use sweep.budget")
    if chosen.startup_trials is not None and chosen.sampler != "optuna":
        raise SpecError(
            f"sweep.startup_trials: the random start-up of sampler optuna; sampler {chosen.sampler} "
            "has no study"
        )


def check_range(where: str, dimension: Range) -> None:
    if dimension.low > dimension.high:
        raise SpecError(f"{where}: low {dimension.low} is above high {dimension.high}")
    if dimension.log and dimension.low <= 0:
        raise SpecError(f"{where}: a log range needs low above 0, not {dimension.low}")
    if dimension.log and dimension.step is not None:
        raise SpecError(f"{where}: a range is either log or stepped, not both")
    if dimension.step is not None and dimension.step <= 0:
        raise SpecError(f"{where}: step must be above 0, not {dimension.step}")
    span = dimension.high - dimension.low
    if (
        dimension.step is not None
        and span > 0
        and dimension.step > span
        and not math.isclose(dimension.step, span)
    ):
        # Only low itself would be on a step: the range would silently shrink to one value.
        raise SpecError(
            f"{where}: step {dimension.step} is wider than the range [{dimension.low}, {dimension.high}]; "
            f"give a step of at most {span}"
        )


def is_integer(dimension: Range) -> bool:
    """An integer range: low, high (and step) all integers."""
    return all(isinstance(v, int) for v in (dimension.low, dimension.high, dimension.step or 1))


def points(chosen: spec.Sweep) -> list[dict[str, Value]]:
    """The trials of the grid or random sampler, in order: the grid's combinations (or `random` of
    them), or `budget` points drawn by `seed`."""
    check_space(chosen)
    if chosen.sampler == "grid":
        lists = {key: values for key, values in chosen.grid.items() if isinstance(values, list)}
        return expand(lists, chosen.random, chosen.seed)
    if chosen.sampler == "optuna":
        raise SpecError("sweep.sampler optuna: the study proposes its trials round by round (sweep/study.py)")
    assert chosen.budget is not None  # check_space
    rng = random.Random(chosen.seed)
    return [
        {key: draw(dimension, rng) for key, dimension in chosen.grid.items()} for _ in range(chosen.budget)
    ]


def trial_count(chosen: spec.Sweep) -> int:
    """How many trials the sweep runs at most, without making them."""
    if chosen.sampler != "grid":
        return chosen.budget or 0
    lists = {key: values for key, values in chosen.grid.items() if isinstance(values, list)}
    return grid_size(lists) if chosen.random is None else chosen.random


def draw(dimension: Dimension, rng: random.Random) -> Value:
    """One value of one dimension: a choice from a list, or a number of a range (evenly, on a log
    scale where it says so, on its steps where it has them)."""
    if isinstance(dimension, list):
        return rng.choice(dimension)
    low, high = dimension.low, dimension.high
    if dimension.step is not None:
        steps = int((high - low) // dimension.step)
        value = low + rng.randint(0, steps) * dimension.step
        return value if is_integer(dimension) else _rounded(value, low, high)
    if is_integer(dimension):
        if not dimension.log:
            return rng.randint(int(low), int(high))
        # Evenly on the log scale over [low, high + 1), floored: each integer gets its log-width share.
        value = math.floor(math.exp(rng.uniform(math.log(low), math.log(high + 1))))
        return min(max(value, int(low)), int(high))
    if dimension.log:
        return _rounded(math.exp(rng.uniform(math.log(low), math.log(high))), low, high)
    return _rounded(rng.uniform(low, high), low, high)


def _rounded(value: float, low: float, high: float) -> float:
    """`value` to SIGNIFICANT_DIGITS, kept inside [low, high] (rounding may step just past an end)."""
    return min(max(float(f"{value:.{SIGNIFICANT_DIGITS}g}"), float(low)), float(high))
