"""Random search against the optuna sweep's sampler and pruner, on the digits job trained in process.

What an optuna sweep does, without the cluster: the study's sampler and pruner are made by
hpctrain's own `sweep.study.search_policy` from the sweep settings of jobs/digits-optuna.yaml (learning
rate, batch size, width, dropout; 60 steps, evaluated every 20); each round's `round_size` trials are
asked together, then run, then told, as the round loop does (so the constant liar matters). A trial's
settings go through the sweep's own `plan.resolve_points`, and it trains with the runtime's own pieces
(the task's build under the job's seed, AdamW and its schedule, the sharded data order, the
evaluation sums) on one rank: the curve a one-task trial of the sweep writes. The trials of a round
run side by side, so the pruner judges each against the finished trials of earlier rounds only. The
random sampler is hpctrain's `sampler: random` (`samplers.points`), whose first N trials are the
sweep of budget N.

Printed, per budget and policy, over the seeds: the best final eval loss (mean, median, quartiles,
min-max), the seeds on which it beat random search, the regret against the best loss any policy
found, the trials pruned and the training steps saved.

    nice python benchmarks/bench_sampler_policy.py [--seeds 20] [--budgets 16 32 64]
        [--startup-trials N ...] [--prune-min-trials T ...]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "jobs" / "digits-optuna.yaml"

Curve = list[tuple[int, float]]
"""(step, eval loss) at each evaluation, the last one the final."""


@dataclass
class Outcome:
    """One sweep of one policy, seed and budget."""

    best: float
    pruned: int = 0
    steps: int = 0
    full_steps: int = 0


@dataclass
class Objective:
    """The trials' curves, trained once per distinct setting (training is deterministic under the
    job's seed, so a setting asked again by another sweep has the same curve)."""

    prepared: Any
    curves: dict[str, Curve] = field(default_factory=dict)
    trained: int = 0
    seconds: float = 0.0

    def curve(self, params: dict[str, Any]) -> Curve:
        from hpctrain.sweep import plan

        key = msgspec.json.encode(dict(sorted(params.items()))).decode()
        if key not in self.curves:
            _, (resolved,) = plan.resolve_points(self.prepared, [params])
            start = time.perf_counter()
            self.curves[key] = train_curve(resolved.job.train)
            self.seconds += time.perf_counter() - start
            self.trained += 1
        return self.curves[key]


def train_curve(train: Any) -> Curve:
    """The eval losses of one trial trained as one rank of the runtime trains it."""
    import torch

    from hpctrain.runtime import data
    from hpctrain.runtime.parallel.base import accumulate
    from hpctrain.runtime.train import (
        evaluation_result,
        evaluation_sums,
        load_task,
        lr_factor,
        make_optimizer,
        seed_everything,
    )

    task = load_task(train)
    seed_everything(train.seed + 1)  # data rank 0, as the loop seeds it
    optimizer = make_optimizer(task, task.model.parameters(), train)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, train.warmup_steps, train.steps, train.lr_schedule)
    )
    sampler = data.ShardedSampler(len(task.train_data), train.batch_size, 0, 1, train.seed)
    position = data.Position()
    curve: Curve = []
    device = torch.device("cpu")
    task.model.train()
    for step in range(1, train.steps + 1):
        batch = data.fetch(task.train_data, sampler.indices(position))
        micro = data.split(batch, train.grad_accum)
        accumulate(task.model, micro, task.loss, contextlib.nullcontext, _no_sync)
        if train.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(task.model.parameters(), train.grad_clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        position = sampler.advance(position)
        if (train.eval_every and step % train.eval_every == 0) or step == train.steps:
            task.model.eval()
            batches = data.eval_batches(task.eval_data, train.batch_size, 0, 1)
            sums = evaluation_sums(task, task.model, batches, device)
            task.model.train()
            curve.append((step, evaluation_result(task, sums)["loss"]))
    return curve


def _no_sync(_last: bool) -> None:
    return None


def random_sweep(objective: Objective, chosen: Any) -> Outcome:
    """`sampler: random`: every trial drawn up front and run to the end."""
    from hpctrain.sweep import samplers

    points = samplers.points(chosen)
    finals = [objective.curve(point)[-1] for point in points]
    steps = sum(step for step, _ in finals)
    return Outcome(best=min(loss for _, loss in finals), steps=steps, full_steps=steps)


def optuna_sweep(objective: Objective, chosen: Any) -> Outcome:
    """`sampler: optuna`: rounds asked whole, run, then told; the pruner sees each trial's evaluations."""
    import optuna

    from hpctrain.sweep import study

    sampler, pruner = study.search_policy(chosen)
    one = optuna.create_study(sampler=sampler, pruner=pruner, direction="minimize")
    space = study.distributions(chosen)
    outcome = Outcome(best=float("inf"))
    budget = chosen.budget
    while len(one.trials) < budget:
        asked = [one.ask(space) for _ in range(min(chosen.round_size, budget - len(one.trials)))]
        ended: list[Callable[[], None]] = []
        for trial in asked:
            curve = objective.curve(trial.params)
            outcome.full_steps += curve[-1][0]
            ended.append(_run_trial(one, trial, curve, outcome))
        for tell in ended:  # the round ends: its trials are told together
            tell()
    complete = one.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    outcome.best = min(t.value for t in complete)
    return outcome


def _run_trial(one: Any, trial: Any, curve: Curve, outcome: Outcome) -> Callable[[], None]:
    import optuna

    for step, loss in curve[:-1]:
        trial.report(loss, step)
        if trial.should_prune():
            outcome.pruned += 1
            outcome.steps += step
            return lambda: one.tell(trial, state=optuna.trial.TrialState.PRUNED)
    outcome.steps += curve[-1][0]
    return lambda: one.tell(trial, curve[-1][1])


POLICIES: dict[str, list[str]] = {
    "random": ["sweep.sampler=random"],
    "optuna as before: 1 round random, no pruning": ["sweep.startup_trials=4", "sweep.prune=false"],
    "optuna defaults, prune: false": ["sweep.prune=false"],
    "optuna defaults": [],
}
"""Each policy's `--set` overrides of the job's sweep section."""


def capped(override: str, budget: int) -> str:
    """sweep.startup_trials=N at most the budget (a larger start-up is the same random search)."""
    key, _, value = override.partition("=")
    return f"{key}={min(int(value), budget)}" if key == "sweep.startup_trials" else override


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budgets", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    parser.add_argument(
        "--startup-trials",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="also optuna with sweep.startup_trials=N (capped at the budget) and no pruning",
    )
    parser.add_argument(
        "--prune-min-trials",
        type=int,
        nargs="*",
        default=[],
        metavar="T",
        help="also optuna defaults pruning from the first evaluation once T trials have finished",
    )
    args = parser.parse_args()
    for count in args.startup_trials:
        name = f"optuna, startup_trials {count}, prune: false"
        POLICIES[name] = [f"sweep.startup_trials={count}", "sweep.prune=false"]
        args.policies.append(name)
    for count in args.prune_min_trials:
        name = f"optuna defaults, pruning once {count} finished"
        POLICIES[name] = ["sweep.early_stop.after_steps=20", f"sweep.early_stop.min_trials={count}"]
        args.policies.append(name)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import optuna
    import torch

    from hpctrain.examples import digits
    from hpctrain.sweep import plan

    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    digits.load = functools.lru_cache(maxsize=None)(digits.load)  # the data set read once, not per trial

    started = time.perf_counter()
    objective = Objective(plan.prepare(JOB, "local", [], []))
    round_size = objective.prepared.chosen.round_size
    results: dict[tuple[str, int], list[Outcome]] = {}
    for budget in args.budgets:
        for name in args.policies:
            for seed in range(args.seeds):
                # The sweep's own planning: the job file, the overrides, the defaults it settles.
                overrides = [capped(o, budget) for o in POLICIES[name]]
                chosen = plan.prepare(JOB, "local", overrides, [], budget=budget, seed=seed).chosen
                run = random_sweep if chosen.sampler == "random" else optuna_sweep
                results.setdefault((name, budget), []).append(run(objective, chosen))
            bests = [o.best for o in results[(name, budget)]]
            print(f"{budget:3d} trials, {name}: mean best {statistics.mean(bests):.4f}", flush=True)

    best_known = min(o.best for outcomes in results.values() for o in outcomes)
    print(
        f"\nbest final eval loss of digits (jobs/digits-optuna.yaml, rounds of {round_size}), "
        f"{args.seeds} seeds; best any policy found: {best_known:.4f}\n"
    )
    print(
        "| trials | policy | mean | median [IQR] | min-max | beats random | mean regret "
        "| pruned | steps saved |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for budget in args.budgets:
        baseline = [o.best for o in results.get(("random", budget), [])]
        for name in args.policies:
            outcomes = results[(name, budget)]
            bests = [o.best for o in outcomes]
            q1, q2, q3 = quartiles(bests)
            wins = "-"
            if name != "random" and baseline:
                wins = f"{sum(b < r for b, r in zip(bests, baseline, strict=True))}/{len(bests)}"
            regret = statistics.mean(b - best_known for b in bests)
            pruned = sum(o.pruned for o in outcomes) / len(outcomes)
            saved = 1 - sum(o.steps for o in outcomes) / sum(o.full_steps for o in outcomes)
            print(
                f"| {budget} | {name} | {statistics.mean(bests):.4f} | {q2:.4f} [{q1:.4f}-{q3:.4f}] "
                f"| {min(bests):.4f}-{max(bests):.4f} | {wins} | {regret:.4f} "
                f"| {pruned:.1f} | {saved:.0%} |"
            )
    load = os.getloadavg()
    print(
        f"\n{objective.trained} distinct trials trained ({objective.seconds:.0f} s); "
        f"{time.perf_counter() - started:.0f} s in all; load {load[0]:.1f}; python {sys.version.split()[0]}, "
        f"torch {torch.__version__}, optuna {optuna.__version__}"
    )


if __name__ == "__main__":
    main()
