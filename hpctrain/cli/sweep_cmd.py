"""`hpctrain sweep`: submit a hyper-parameter sweep as Slurm job arrays; its status, cancel and report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hpctrain.cli.view.arguments import add_job_arguments
from hpctrain.cli.view.table import print_json, table
from hpctrain.errors import SpecError

ACTIONS = ("status", "cancel", "report", "resume")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from hpctrain import api

    add_job_arguments(parser)
    parser._option_string_actions["--site"].required = False  # only submitting a sweep needs a site
    job = next(a for a in parser._actions if a.dest == "job")
    job.help = (
        "Job spec (YAML) to sweep, or one of: status [SWEEP...], cancel SWEEP..., report SWEEP, "
        "resume SWEEP (an optuna sweep's rounds)."
    )
    parser.add_argument("sweeps", nargs="*", metavar="SWEEP", help="Sweep ids (or array job ids) to act on.")
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="A swept field and its values, e.g. --grid train.lr=1e-3,3e-3 (repeatable; adds to sweep.grid).",
    )
    parser.add_argument("--random", type=_positive, metavar="N", help="N distinct grid points, not all.")
    parser.add_argument(
        "--sampler", choices=api.SAMPLERS, help="How trials are chosen (default sweep.sampler, grid)."
    )
    parser.add_argument(
        "--budget", type=_positive, metavar="N", help="Trials of the samplers random and optuna."
    )
    parser.add_argument(
        "--round-size", type=_positive, metavar="K", help="optuna: trials per round (one array)."
    )
    parser.add_argument("--seed", type=int, help="Seed of the random draw or of the study's sampler.")
    parser.add_argument("--max-parallel", type=_positive, metavar="K", help="Trials running at once.")
    parser.add_argument("--metric", help="Result field that ranks trials (default eval_loss).")
    parser.add_argument("--mode", choices=("min", "max"), help="Lower or higher metric is better.")
    parser.add_argument(
        "--max-trials",
        type=_positive,
        metavar="N",
        help=f"Refuse a sweep of more than N trials (default sweep.max_trials, {api.MAX_TRIALS}).",
    )
    add_status_arguments(parser)
    parser.add_argument(
        "--out",
        type=Path,
        help="report: its folder, or FILE.png for the metric-per-parameter figure "
        "(default: report/ in the sweep's run dir).",
    )


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    """`--trials` (and `--json`, unless the parser has it): shared with `hpctrain status SWEEP`."""
    parser.add_argument("--trials", action="store_true", help="One line per trial, best first.")
    if "--json" not in parser._option_string_actions:
        parser.add_argument("--json", action="store_true", help="Machine-readable output.")


def run(args: argparse.Namespace) -> int:
    if args.job in ACTIONS:
        action = {"status": status, "cancel": cancel, "report": report, "resume": resume}[args.job]
        return action(args.sweeps, args)
    if args.sweeps:
        raise SpecError(f"unexpected arguments after the job spec: {' '.join(args.sweeps)}")
    if not args.site:
        raise SpecError("--site is required to submit a sweep")
    return submit(args)


def submit(args: argparse.Namespace) -> int:
    from hpctrain import api

    handle = api.submit_sweep(
        args.job,
        args.site,
        args.overrides,
        args.grid,
        args.backend,
        progress=None if args.json else print,
        random=args.random,
        sampler=args.sampler,
        budget=args.budget,
        round_size=args.round_size,
        seed=args.seed,
        max_parallel=args.max_parallel,
        metric=args.metric,
        mode=args.mode,
        max_trials=args.max_trials,
    )
    record, root = handle.record, handle.root
    if args.json:
        print_json(
            {
                "sweep_id": record.sweep_id,
                "run_dir": str(root),
                "trials": len(record.trials),
                "arrays": [
                    {"job_id": c.job_id, "offset": c.offset, "count": c.count, "array": c.array}
                    for c in record.arrays
                ],
            }
        )
        return 0
    arrays = ", ".join(f"job {c.job_id} --array={c.array} (trials from {c.offset})" for c in record.arrays)
    print(f"Submitted sweep {record.sweep_id}: {len(record.trials)} trials as {arrays}")
    print(f"  run directory: {root}")
    return 0


def status(keys: list[str], args: argparse.Namespace) -> int:
    from hpctrain import api

    summaries = api.survey(api.list_sweeps(keys, by_name=True))
    if args.json:
        import msgspec

        print_json(msgspec.to_builtins(summaries))
        return 0
    for summary in summaries:
        print(summary_line(summary))
        if args.trials:
            print(trials_table(api.ranked(summary.trials, summary.mode), summary.metric))
    if not summaries:
        print("No sweeps tracked (submit one with `hpctrain sweep JOB.yaml --site SITE --grid KEY=V1,V2`).")
    return 0


def summary_line(summary: Any) -> str:
    counts = ", ".join(f"{state} {n}" for state, n in summary.counts.items())
    best = "no metric yet"
    if summary.best is not None:
        params = ", ".join(f"{k}={v}" for k, v in summary.best.params.items())
        best = f"best {summary.metric} {summary.best.metric:.4g} (trial {summary.best.index}: {params})"
    return f"{summary.sweep_id}  {len(summary.trials)} trials: {counts}; {best}"


def trials_table(trials: list[Any], metric: str) -> str:
    params = list(trials[0].params) if trials else []
    rows = [
        [
            str(t.index),
            t.job_id,
            t.state,
            "" if t.metric is None else f"{t.metric:.4g}",
            "" if t.step is None else f"{t.step}/{t.steps or '?'}",
            *(str(t.params.get(p, "")) for p in params),
            t.problem or t.reason,
        ]
        for t in trials
    ]
    return table(rows, ["TRIAL", "JOBID", "STATE", metric.upper(), "STEP", *params, "NOTE"])


def _all_sweeps(args: argparse.Namespace) -> list[str]:
    from hpctrain import api

    keys = list(getattr(args, "jobs", []) or [])
    every = keys and all(api.list_sweeps([key], require=False, by_name=True) for key in keys)
    return keys if every else []


def status_hook(args: argparse.Namespace) -> int | None:
    """For `hpctrain status KEY...`: when every key names a sweep, show them; else None (not mine)."""
    keys = _all_sweeps(args)
    return status(keys, args) if keys else None


def cancel(keys: list[str], args: argparse.Namespace) -> int:
    from hpctrain import api

    if not keys:
        raise SpecError("name the sweep to cancel: hpctrain sweep cancel SWEEP")
    for handle in api.list_sweeps(keys):
        ids = handle.cancel()  # one scancel for every array of the sweep
        print(f"Cancelled sweep {handle.sweep_id}: arrays {', '.join(ids)}")
    return 0


def resume(keys: list[str], args: argparse.Namespace) -> int:
    """Carry on an optuna sweep's rounds in the foreground (hpctrain.sweep.study)."""
    from hpctrain import api

    found = api.list_sweeps(keys)
    if len(found) != 1:
        raise SpecError("name one sweep to resume: hpctrain sweep resume SWEEP")
    handle = found[0]
    record = handle.resume(None if args.json else print)
    if args.json:
        print_json({"sweep_id": record.sweep_id, "run_dir": str(handle.root), "trials": len(record.trials)})
    return 0


def report(keys: list[str], args: argparse.Namespace) -> int:
    """The same report as `hpctrain report SWEEP` (hpctrain.report.sweep)."""
    from hpctrain import api
    from hpctrain.cli.view.report import show

    found = api.list_sweeps(keys)
    if len(found) != 1:
        raise SpecError("name one sweep to report: hpctrain sweep report SWEEP")
    show(found[0].report(args.out))
    return 0


def cancel_hook(args: argparse.Namespace) -> int | None:
    """For `hpctrain cancel KEY...`: when every key names a sweep, cancel every array; else None."""
    keys = _all_sweeps(args)
    return cancel(keys, args) if keys else None
