"""The learned sampler's defaults for a budget: the random start-up, and pruning on evaluations."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain import spec
from hpctrain.errors import SpecError
from hpctrain.spec.sweep import Range
from hpctrain.sweep import plan, policy
from tests.conftest import JOBS

JOB = JOBS / "digits-optuna.yaml"


def optuna_sweep(budget: int, **given: object) -> spec.Sweep:
    grid = {"train.lr": Range(low=1e-4, high=0.3, log=True), "train.batch_size": [16, 32, 64]}
    return spec.Sweep(grid=grid, sampler="optuna", budget=budget, **given)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("budget", "round_size", "expected"),
    [(16, 4, 8), (32, 4, 8), (64, 4, 16), (100, 4, 28), (200, 8, 56), (6, 4, 6), (3, 4, 3), (64, 1, 16)],
)
def test_the_random_start_up_is_a_share_of_the_budget_in_whole_rounds(
    budget: int, round_size: int, expected: int
) -> None:
    assert policy.startup_trials(optuna_sweep(budget, round_size=round_size)) == expected


def test_a_given_start_up_is_kept_in_whole_rounds_and_within_the_budget() -> None:
    assert policy.startup_trials(optuna_sweep(64, startup_trials=6)) == 8
    assert policy.startup_trials(optuna_sweep(64, startup_trials=4)) == 4
    assert policy.startup_trials(optuna_sweep(10, startup_trials=40)) == 10


def test_the_study_draws_its_start_up_trials_at_random_then_proposes(tmp_path: Path) -> None:
    """Through the sweep's own study: with a budget of 64 in rounds of 4, the first 16 trials are the
    random sampler's (seeded alike) and the 17th is TPE's."""
    optuna = pytest.importorskip("optuna", reason="sweep.sampler optuna needs the `sweep` extra (optuna)")
    from hpctrain.sweep import study

    chosen = optuna_sweep(64, seed=3)
    learned = study.open_study(tmp_path, chosen)
    drawn = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    space = study.distributions(chosen)
    for _ in range(5):  # rounds: asked whole, then told
        rounds = [(learned.ask(space), drawn.ask(space)) for _ in range(chosen.round_size)]
        for mine, theirs in rounds:
            loss = abs(mine.params["train.lr"] - 0.01) + mine.params["train.batch_size"] / 1000
            learned.tell(mine, loss)
            drawn.tell(theirs, loss)
    pairs = list(zip(learned.get_trials(), drawn.get_trials(), strict=True))
    assert [a.params for a, _ in pairs[:16]] == [b.params for _, b in pairs[:16]]
    assert all(a.params != b.params for a, b in pairs[16:])


def test_the_sampler_is_multivariate_tpe_with_the_start_up_of_the_budget() -> None:
    optuna = pytest.importorskip("optuna", reason="sweep.sampler optuna needs the `sweep` extra (optuna)")
    from hpctrain.sweep import study

    sampler, pruner = study.search_policy(optuna_sweep(64))
    assert isinstance(sampler, optuna.samplers.TPESampler)
    assert sampler._multivariate and sampler._constant_liar and sampler._n_startup_trials == 16
    assert isinstance(pruner, optuna.pruners.NopPruner)


def test_an_optuna_sweep_prunes_on_its_evaluations_by_default() -> None:
    """digits-optuna evaluates every 20 of its 60 steps: the study prunes from step 20 on, once the
    random start-up trials (8 of 16) have finished."""
    chosen = plan.prepare(JOB, "local", [], []).chosen
    assert chosen.prune and chosen.early_stop == spec.EarlyStop(after_steps=20, min_trials=8)
    bigger = plan.prepare(JOB, "local", [], [], budget=64).chosen
    assert bigger.early_stop == spec.EarlyStop(after_steps=20, min_trials=16)
    optuna = pytest.importorskip("optuna", reason="sweep.sampler optuna needs the `sweep` extra (optuna)")
    from hpctrain.sweep import study

    _, pruner = study.search_policy(chosen)
    assert isinstance(pruner, optuna.pruners.MedianPruner)
    assert (pruner._n_warmup_steps, pruner._n_startup_trials) == (20, 8)


@pytest.mark.parametrize(
    "overrides",
    [
        ["sweep.prune=false"],
        ["train.eval_every=0"],  # evaluated only at the end
        ["train.eval_every=60"],  # the first evaluation is the last step's
        ["sweep.metric=final_loss"],  # not an evaluation
    ],
)
def test_no_pruning_when_switched_off_or_the_trials_do_not_evaluate_early(overrides: list[str]) -> None:
    assert plan.prepare(JOB, "local", overrides, []).chosen.early_stop is None


def test_a_given_early_stop_is_the_pruning() -> None:
    overrides = ["sweep.early_stop.after_steps=40", "sweep.early_stop.min_trials=5"]
    chosen = plan.prepare(JOB, "local", overrides, []).chosen
    assert chosen.early_stop == spec.EarlyStop(after_steps=40, min_trials=5)


def test_prune_false_with_early_stop_is_refused() -> None:
    with pytest.raises(SpecError, match=r"sweep.prune: false, but sweep.early_stop asks to prune"):
        plan.prepare(JOB, "local", ["sweep.prune=false", "sweep.early_stop.after_steps=20"], [])


def test_grid_and_random_sweeps_keep_their_settings() -> None:
    chosen = plan.prepare(JOB, "local", [], [], sampler="random").chosen
    assert chosen.early_stop is None
    with pytest.raises(SpecError, match=r"sweep.startup_trials: the random start-up of sampler optuna"):
        plan.prepare(JOB, "local", ["sweep.startup_trials=8"], [], sampler="random")
