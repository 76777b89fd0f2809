"""The sweep section of a job spec (``sweep:``): the search space, the sampler, the metric, early stopping.

``hpctrain sweep`` reads it (``hpctrain/sweep/plan.py``; the Optuna rounds in ``hpctrain/sweep/study.py``);
a plain submit ignores it.
"""

from typing import Annotated, Literal

from msgspec import Meta

from hpctrain.spec.base import Base, Count, EnvValue

MAX_TRIALS = 10_000
"""The default of sweep.max_trials: a typo in a grid must not write a million trial folders."""

SAMPLERS = ("grid", "random", "optuna")


class EarlyStop(Base):
    """Successive halving: at steps M, 2M, 4M... a trial in the worst half of its peers is ended."""

    after_steps: Count
    """M: the first step at which trials are compared (an eval step)."""
    min_trials: Annotated[int, Meta(ge=2)] = 3
    """Trials that must have reached a step before any is ended there."""


class Range(Base):
    """A range of numbers to sample from (samplers random and optuna): integers when low and high are
    both integers, else floats."""

    low: int | float
    """The smallest value, included."""
    high: int | float
    """The largest value, included."""
    log: bool = False
    """Sample evenly on a log scale (learning rates, weight decays); low must then be above 0."""
    step: int | float | None = None
    """Only values low + k*step; unset = any value (any integer for an integer range)."""


Dimension = list[EnvValue] | Range
"""One swept field: a list of values (the grid's choices, categorical to a sampler) or a Range."""


class Sweep(Base):
    """A hyper-parameter sweep: trials of one job with swept fields set, submitted as Slurm job arrays."""

    grid: dict[Annotated[str, Meta(pattern=r"\A[A-Za-z_]\w*(\.[A-Za-z_]\w*)+\Z")], Dimension] = {}
    """The search space: swept fields and their values, e.g. {train.lr: [0.001, 0.003]} (the grid
    sampler runs their product), or ranges for the samplers random and optuna, e.g.
    {train.lr: {low: 0.0001, high: 0.1, log: true}, train.batch_size: {low: 16, high: 128}}."""
    sampler: Literal["grid", "random", "optuna"] = "grid"
    """How trials are chosen. grid: every combination of the lists (or `random` of them), one array.
    random: `budget` points drawn from the space by `seed`, one array. optuna: rounds of `round_size`
    trials that an Optuna study (TPE) proposes from the results so far, one array per round; needs
    the `sweep` extra (pip install 'hpctrain[sweep]')."""
    budget: Count | None = None
    """How many trials the samplers random and optuna run (required for them)."""
    round_size: Count = 4
    """optuna: trials asked from the study, and submitted as one array, per round."""
    startup_trials: Count | None = None
    """optuna: trials drawn at random before the study's TPE proposes any, in whole rounds; unset =
    a quarter of the budget and at least 8 (16 of 64, 8 of 32 or 16), never more than the budget."""
    random: Count | None = None
    """grid: run this many distinct combinations drawn from the grid, not all of them."""
    seed: int = 0
    """Seed of the draw (grid with `random`, random) or of the study's sampler: the same seed, the same
    trials (for optuna, given the same results)."""
    max_parallel: Count | None = None
    """Trials running at once (the array's %K); unset = no limit."""
    metric: Annotated[str, Meta(pattern=r"\A[a-z_]+\Z")] = "eval_loss"
    """Result field that ranks trials: eval_loss, eval_accuracy, final_loss..."""
    mode: Literal["min", "max"] = "min"
    """Whether a lower or a higher metric is better."""
    early_stop: EarlyStop | None = None
    """End trials that fall behind (successive halving); unset = never for grid and random. With optuna
    the study's median pruner judges instead: from step after_steps, once min_trials trials have
    finished, a trial whose eval metric is worse than their median at the same step is cancelled (its
    stopped.json says why); unset, optuna prunes by the rule of `prune`."""
    prune: bool = True
    """optuna: with early_stop unset, the study's median pruner still ends trials that fall behind,
    from the first evaluation (train.eval_every) on, once the random start-up trials have finished,
    when the trials evaluate `metric` (eval_loss, eval_accuracy) before their last step; false =
    never prune. grid and random prune only with early_stop."""
    max_trials: Count = MAX_TRIALS
    """A sweep of more trials is refused before anything is written: raise it knowingly."""
