"""A sweep's grid: its size, its combinations (drawn at random or all), and the `--grid` options.

Arithmetic on {dotted.key: [values]}, nothing of the cluster: ``plan.py`` validates each
combination as a trial and submits them.
"""

from __future__ import annotations

import math
import random

from hpctrain import spec
from hpctrain.errors import SpecError
from hpctrain.rundir.structs import SweepValue as Value


def grid_size(grid: dict[str, list[Value]]) -> int:
    return math.prod(len(values) for values in grid.values())


def combination(grid: dict[str, list[Value]], number: int) -> dict[str, Value]:
    """The `number`-th point of the grid's product, the last key varying fastest (as itertools.product)."""
    picked: dict[str, Value] = {}
    for key in reversed(list(grid)):
        values = grid[key]
        number, position = divmod(number, len(values))
        picked[key] = values[position]
    return {key: picked[key] for key in grid}


def expand(grid: dict[str, list[Value]], draw: int | None = None, seed: int = 0) -> list[dict[str, Value]]:
    """Every combination once, or `draw` distinct ones chosen by `seed` (in grid order)."""
    if not grid:
        raise SpecError("sweep.grid: nothing to sweep; give --grid KEY=V1,V2 or a sweep.grid section")
    for key, values in grid.items():
        if not values:
            raise SpecError(f"sweep.grid.{key}: no values")
        seen: set[tuple[type, Value]] = set()  # by type too: 1, 1.0 and true are different values
        for value in values:
            if (type(value), value) in seen:
                raise SpecError(f"sweep.grid.{key}: {value!r} is listed twice")
            seen.add((type(value), value))
    total = grid_size(grid)
    if draw is None:
        numbers: range | list[int] = range(total)
    elif draw > total:
        raise SpecError(f"sweep.random: {draw} trials asked, the grid has only {total} combinations")
    else:
        numbers = sorted(_draw(total, draw, random.Random(seed)))
    return [combination(grid, n) for n in numbers]


def _draw(total: int, count: int, rng: random.Random) -> list[int]:
    """`count` distinct numbers below `total`; a grid too large for `range` is drawn from by rejection."""
    if total < 2**62:
        return rng.sample(range(total), count)
    picked: set[int] = set()
    while len(picked) < count:  # count is far below total here: a repeat is rare
        picked.add(rng.randrange(total))
    return list(picked)


def parse_grid_options(texts: list[str]) -> dict[str, list[Value]]:
    """Every `--grid` option; a key given twice is refused, since which of its lists to keep is a guess."""
    grid: dict[str, list[Value]] = {}
    for text in texts:
        key, values = parse_grid_option(text)
        if key in grid:
            merged = ",".join(str(v) for v in dict.fromkeys([*grid[key], *values]))
            raise SpecError(f"--grid {key} is given twice; give its values once: --grid {key}={merged}")
        grid[key] = values
    return grid


def parse_grid_option(text: str) -> tuple[str, list[Value]]:
    """`train.lr=1e-3,3e-3` -> ('train.lr', [0.001, 0.003]); values parse as `--set` values do."""
    key, sep, raw = text.partition("=")
    if not sep or not key or not raw:
        raise SpecError(f"--grid {text!r}: expected dotted.key=VALUE1,VALUE2,...")
    values = [spec.apply_overrides({}, [f"value={item}"], "--grid")["value"] for item in raw.split(",")]
    return key, values


def describe(params: dict[str, Value]) -> str:
    return ", ".join(f"{key}={value}" for key, value in params.items())
