"""What the learned sampler (sweep.sampler optuna) does by default for a budget: how many trials it
draws at random before TPE proposes, and when the study prunes trials on their evaluations.

No Optuna here: ``plan.py`` settles the pruning when the sweep is planned (so ``study-settings.json``
holds what the study does), and ``study.py`` builds the sampler and pruner from these numbers.
benchmarks/bench_sampler_policy.py measures them (docs/sweeps.md, "Optuna against random search").
"""

from __future__ import annotations

import math

import msgspec

from hpctrain import spec
from hpctrain.errors import SpecError
from hpctrain.rundir.lines import EVAL_FIELDS

STARTUP_SHARE = 0.25
"""The share of the budget drawn at random before TPE proposes (sweep.startup_trials unset)."""
STARTUP_FLOOR = 8
"""The fewest random trials before TPE proposes (sweep.startup_trials unset): TPE splits the told
trials into a good and a bad group, and fewer than this make its model a guess."""


def startup_trials(chosen: spec.Sweep) -> int:
    """Trials drawn at random before TPE proposes: `sweep.startup_trials`, else STARTUP_SHARE of the
    budget and at least STARTUP_FLOOR; in whole rounds (TPE counts only told trials, so a round asked
    with too few is random whole), never above the budget."""
    wanted = chosen.startup_trials
    if wanted is None:
        wanted = max(STARTUP_FLOOR, math.ceil(STARTUP_SHARE * (chosen.budget or 0)))
    whole = math.ceil(wanted / chosen.round_size) * chosen.round_size
    return min(whole, chosen.budget) if chosen.budget else whole


def settle_pruning(chosen: spec.Sweep, job: spec.JobSpec) -> spec.Sweep:
    """An optuna sweep's pruning made explicit: `early_stop` as given; else, when `prune` is on and
    the trials evaluate `sweep.metric` before their last step, the median pruner from the first
    evaluation on, once the random start-up trials have finished (early_stop {after_steps:
    train.eval_every, min_trials: startup_trials}); `prune: false` never prunes."""
    if chosen.sampler != "optuna":
        return chosen
    if not chosen.prune:
        if chosen.early_stop is not None:
            raise SpecError("sweep.prune: false, but sweep.early_stop asks to prune; remove one of them")
        return chosen
    if chosen.early_stop is not None or job.train is None or chosen.metric not in EVAL_FIELDS:
        return chosen
    every = job.train.eval_every
    if every == 0 or every >= job.train.steps:
        return chosen  # no evaluation before the last step: nothing to judge a trial on early
    early = spec.EarlyStop(after_steps=every, min_trials=max(2, startup_trials(chosen)))
    return msgspec.structs.replace(chosen, early_stop=early)
