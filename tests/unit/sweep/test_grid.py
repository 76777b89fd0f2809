"""A sweep's grid: expansion, the random draw, its count before expansion, and the --grid options."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain import spec
from hpctrain.sweep import grid as sweep_grid
from hpctrain.sweep import samplers

KEYS = st.lists(st.sampled_from(["train.lr", "train.seed", "train.steps", "train.batch_size"]), unique=True)
GRIDS = KEYS.flatmap(
    lambda keys: st.fixed_dictionaries(
        {k: st.lists(st.integers(0, 10**6), min_size=1, max_size=5, unique=True) for k in keys}
    )
).filter(bool)


@given(GRIDS)
def test_grid_expands_to_every_combination_once(grid: dict[str, list[int]]) -> None:
    trials = sweep_grid.expand(grid)
    as_tuples = [tuple(t[k] for k in grid) for t in trials]
    assert as_tuples == list(itertools.product(*grid.values()))
    assert len(set(as_tuples)) == len(trials) == sweep_grid.grid_size(grid)


@given(GRIDS, st.data(), st.integers(0, 2**32))
def test_random_draw_is_distinct_deterministic_and_inside_the_grid(
    grid: dict[str, list[int]], data: st.DataObject, seed: int
) -> None:
    total = sweep_grid.grid_size(grid)
    draw = data.draw(st.integers(1, total))
    trials = sweep_grid.expand(grid, draw, seed)
    as_tuples = [tuple(t[k] for k in grid) for t in trials]
    assert len(trials) == draw == len(set(as_tuples))
    assert set(as_tuples) <= set(itertools.product(*grid.values()))
    assert sweep_grid.expand(grid, draw, seed) == trials


def test_random_draw_from_a_huge_grid_does_not_enumerate_it() -> None:
    # 10**24 combinations: enumerating them would never end (the suite's timeout fails it).
    grid = {f"train.options.k{i}": list(range(100)) for i in range(12)}
    trials = sweep_grid.expand(grid, 50, seed=3)
    assert len({tuple(t.values()) for t in trials}) == 50


@pytest.mark.parametrize(
    ("grid", "draw", "message"),
    [
        ({}, None, "nothing to sweep"),
        ({"train.lr": []}, None, "sweep.grid.train.lr: no values"),
        ({"train.lr": [0.1, 0.1]}, None, "0.1 is listed twice"),
        ({"train.lr": [0.1, 0.2]}, 3, "3 trials asked, the grid has only 2"),
    ],
)
def test_bad_grids_are_refused(grid: dict[str, list[float]], draw: int | None, message: str) -> None:
    with pytest.raises(spec.SpecError, match=message):
        sweep_grid.expand(grid, draw)


def test_grid_option_values_parse_like_set_values() -> None:
    assert sweep_grid.parse_grid_option("train.lr=1e-3,3e-3,0.01") == ("train.lr", [0.001, 0.003, 0.01])
    assert sweep_grid.parse_grid_option("train.parallel=ddp,fsdp") == ("train.parallel", ["ddp", "fsdp"])
    assert sweep_grid.parse_grid_option("train.compile=true,false") == ("train.compile", [True, False])
    with pytest.raises(spec.SpecError, match=r"expected dotted\.key=VALUE1"):
        sweep_grid.parse_grid_option("train.lr")


@given(
    st.lists(st.integers(1, 12), min_size=1, max_size=6),
    st.one_of(st.none(), st.integers(1, 50)),
)
def test_trial_count_is_what_expand_makes(lengths: list[int], draw: int | None) -> None:
    grid = {f"train.options.k{i}": list(range(n)) for i, n in enumerate(lengths)}
    count = samplers.trial_count(spec.Sweep(grid=grid, random=draw))
    assert count == (draw if draw is not None else sweep_grid.grid_size(grid))
    if count <= 2000 and (draw is None or draw <= sweep_grid.grid_size(grid)):
        assert len(sweep_grid.expand(grid, draw)) == count


def test_duplicates_are_found_by_type_and_value_without_comparing_every_pair() -> None:
    assert len(sweep_grid.expand({"env.X": [1, 1.5, True, "1"]})) == 4  # four different values
    # 2 * 10**10 pairs: comparing them all would not end within the suite's timeout.
    values = list(range(200_000))
    with pytest.raises(spec.SpecError, match="199999 is listed twice"):
        sweep_grid.expand({"train.options.x": [*values, 199_999]})


def test_a_repeated_grid_option_is_refused_with_the_merged_form() -> None:
    assert sweep_grid.parse_grid_options(["train.lr=1,2", "train.seed=3"]) == {
        "train.lr": [1, 2],
        "train.seed": [3],
    }
    with pytest.raises(spec.SpecError) as err:
        sweep_grid.parse_grid_options(["train.options.x=1,2", "train.lr=1", "train.options.x=2,3"])
    assert str(err.value) == (
        "--grid train.options.x is given twice; give its values once: --grid train.options.x=1,2,3"
    )
