"""The sweep section of a job spec (``sweep:``): the grid, the draw, the metric, early stopping.

``hpctrain sweep`` reads it (``hpctrain/sweep/plan.py``); a plain submit ignores it.
"""

from typing import Annotated, Literal

from msgspec import Meta

from hpctrain.spec.base import Base, Count, EnvValue

MAX_TRIALS = 10_000
"""The default of sweep.max_trials: a typo in a grid must not write a million trial folders."""


class EarlyStop(Base):
    """Successive halving: at steps M, 2M, 4M... a trial in the worst half of its peers is ended."""

    after_steps: Count
    """M: the first step at which trials are compared (an eval step)."""
    min_trials: Annotated[int, Meta(ge=2)] = 3
    """Trials that must have reached a step before any is ended there."""


class Sweep(Base):
    """A hyper-parameter sweep: one trial per combination, all submitted as one Slurm job array."""

    grid: dict[Annotated[str, Meta(pattern=r"\A[A-Za-z_]\w*(\.[A-Za-z_]\w*)+\Z")], list[EnvValue]] = {}
    """Swept fields and their values, e.g. {train.lr: [0.001, 0.003]}; the product."""
    random: Count | None = None
    """Run this many distinct combinations drawn from the grid, not all of them."""
    seed: int = 0
    """Seed of the random draw: the same seed, the same trials."""
    max_parallel: Count | None = None
    """Trials running at once (the array's %K); unset = no limit."""
    metric: Annotated[str, Meta(pattern=r"\A[a-z_]+\Z")] = "eval_loss"
    """Result field that ranks trials: eval_loss, eval_accuracy, final_loss..."""
    mode: Literal["min", "max"] = "min"
    """Whether a lower or a higher metric is better."""
    early_stop: EarlyStop | None = None
    """End trials that fall behind (successive halving); unset = never."""
    max_trials: Count = MAX_TRIALS
    """A sweep of more trials is refused before anything is written: raise it knowingly."""
