"""The samplers without a study: the search space's syntax and checks, the grid unchanged, random draws."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain import spec
from hpctrain.errors import SpecError
from hpctrain.spec.sweep import Range
from hpctrain.sweep import grid as sweep_grid
from hpctrain.sweep import samplers
from tests.conftest import JOBS


@st.composite
def ranges(draw: st.DrawFn) -> Range:
    kind = draw(st.sampled_from(["int", "float", "log-int", "log-float", "step-int", "step-float"]))
    if kind.endswith("int"):
        low = draw(st.integers(1 if kind.startswith("log") else -(10**6), 10**6))
        high = draw(st.integers(low, low + 10**6))
        step = draw(st.integers(1, max(1, min(1000, high - low)))) if kind.startswith("step") else None
        return Range(low=low, high=high, log=kind.startswith("log"), step=step)
    low_f = draw(st.floats(1e-8 if kind.startswith("log") else -1e6, 1e6))
    step_f = draw(st.floats(1e-3, 1e3)) if kind.startswith("step") else None
    high_f = draw(st.floats(low_f + (step_f or 0), abs(low_f) * 1e3 + 2e3))
    return Range(low=low_f, high=high_f, log=kind.startswith("log"), step=step_f)


CHOICES = st.lists(st.one_of(st.integers(), st.text(max_size=5), st.booleans()), min_size=1, max_size=4)
SPACES = st.dictionaries(
    st.sampled_from(["train.lr", "train.seed", "train.batch_size", "train.options.width"]),
    st.one_of(ranges(), CHOICES),
    min_size=1,
)


def inside(value: object, dimension: Range | list) -> bool:
    if isinstance(dimension, list):
        return value in dimension
    assert isinstance(value, int | float)
    if samplers.is_integer(dimension):
        assert isinstance(value, int)
        on_step = (value - dimension.low) % (dimension.step or 1) == 0
        return on_step and dimension.low <= value <= dimension.high
    return dimension.low <= value <= dimension.high


@given(SPACES, st.integers(1, 20), st.integers(0, 2**32))
def test_random_trials_stay_inside_the_declared_space(space: dict, budget: int, seed: int) -> None:
    chosen = spec.Sweep(grid=space, sampler="random", budget=budget, seed=seed)
    trials = samplers.points(chosen)
    assert len(trials) == budget
    for trial in trials:
        assert list(trial) == list(space)
        for key, value in trial.items():
            assert inside(value, space[key]), (key, value, space[key])


@given(SPACES, st.integers(1, 20), st.integers(0, 2**32))
def test_the_same_seed_draws_the_same_trials(space: dict, budget: int, seed: int) -> None:
    chosen = spec.Sweep(grid=space, sampler="random", budget=budget, seed=seed)
    assert samplers.points(chosen) == samplers.points(chosen)


def test_another_seed_draws_other_trials() -> None:
    space = {"train.lr": Range(low=1e-5, high=1e-1, log=True)}
    one, other = (samplers.points(spec.Sweep(grid=space, sampler="random", budget=5, seed=s)) for s in (1, 2))
    assert one != other


def test_a_log_range_spreads_over_its_decades() -> None:
    """Evenly on the log scale: each of four decades gets about a quarter of the draws."""
    rng = random.Random(0)
    values = [samplers.draw(Range(low=1e-5, high=1e-1, log=True), rng) for _ in range(4000)]
    decades = [math.floor(math.log10(v)) for v in values]
    shares = [decades.count(d) / len(values) for d in (-5, -4, -3, -2)]
    assert all(0.2 < share < 0.3 for share in shares), shares


def test_the_grid_sampler_is_the_grid_unchanged() -> None:
    space = {"train.lr": [0.1, 0.2, 0.3], "train.batch_size": [16, 32]}
    assert samplers.points(spec.Sweep(grid=space)) == sweep_grid.expand(space)
    assert samplers.points(spec.Sweep(grid=space, random=3, seed=7)) == sweep_grid.expand(space, 3, 7)


def test_a_range_and_a_list_decode_from_a_job_file() -> None:
    job = spec.load_job(JOBS / "digits-optuna.yaml")
    assert job.sweep is not None and job.sweep.sampler == "optuna"
    assert job.sweep.grid["train.lr"] == Range(low=0.0001, high=0.3, log=True)
    assert job.sweep.grid["train.batch_size"] == [16, 32, 64, 128]
    assert job.sweep.grid["train.options.hidden"] == Range(low=16, high=256, log=True)
    assert samplers.is_integer(job.sweep.grid["train.options.hidden"])


@pytest.mark.parametrize(
    ("chosen", "message"),
    [
        (spec.Sweep(grid={"train.lr": Range(low=0.1, high=1.0)}), "sweep.grid.train.lr: a range needs"),
        (spec.Sweep(grid={"train.lr": [0.1]}, sampler="random"), "sweep.budget: sampler random needs"),
        (
            spec.Sweep(grid={"train.lr": Range(low=0.0, high=1.0, log=True)}, sampler="random", budget=2),
            "sweep.grid.train.lr: a log range needs low above 0",
        ),
        (
            spec.Sweep(grid={"train.lr": Range(low=2.0, high=1.0)}, sampler="random", budget=2),
            "sweep.grid.train.lr: low 2.0 is above high 1.0",
        ),
        (
            spec.Sweep(grid={"train.lr": Range(low=1, high=9, log=True, step=2)}, sampler="random", budget=2),
            "either log or stepped",
        ),
        (spec.Sweep(grid={"train.lr": [0.1]}, sampler="random", budget=2, random=1), "sweep.random:"),
        (
            spec.Sweep(
                grid={"train.options.hidden": Range(low=16, high=256, step=512)}, sampler="random", budget=2
            ),
            r"sweep.grid.train.options.hidden: step 512 is wider than the range \[16, 256\]",
        ),
        (
            spec.Sweep(grid={"train.lr": Range(low=0.1, high=0.2, step=0.5)}, sampler="optuna", budget=2),
            r"sweep.grid.train.lr: step 0.5 is wider than the range \[0.1, 0.2\]",
        ),
    ],
)
def test_a_space_the_sampler_cannot_draw_from_is_one_clear_error(chosen: spec.Sweep, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        samplers.points(chosen)


def test_a_random_sweep_resolves_each_trial_with_its_drawn_values() -> None:
    from hpctrain.sweep import plan

    chosen, trials, resolved = plan.resolve_trials(
        JOBS / "digits-optuna.yaml", "local", [], [], sampler="random", budget=5, seed=3
    )
    assert chosen.sampler == "random" and len(trials) == len(resolved) == 5
    for trial, one in zip(trials, resolved, strict=True):
        assert one.job.train.lr == trial.params["train.lr"]
        assert one.job.train.batch_size == trial.params["train.batch_size"]
        assert 0.0001 <= one.job.train.lr <= 0.3
