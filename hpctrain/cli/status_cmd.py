"""`hpctrain status`: state, progress and failures of tracked jobs, one scheduler query per poll."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from hpctrain.cli.common import ago, print_json, table

# A poll loop never asks the controller more often than this: admins of shared clusters care.
MIN_INTERVAL_S = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("jobs", nargs="*", metavar="JOBID", help="Job ids or run ids (default: recent jobs).")
    parser.add_argument("--all", action="store_true", help="Every tracked job, not only the last day's.")
    parser.add_argument("--watch", action="store_true", help="Poll until every shown job has ended.")
    parser.add_argument(
        "--interval",
        type=float,
        default=10.0,
        help=f"Seconds between polls with --watch (at least {MIN_INTERVAL_S:.0f}).",
    )
    parser.add_argument("--json", action="store_true", help="Machine-readable output.")


def _select(args: argparse.Namespace) -> list[Any]:
    from hpctrain.records import Index

    index = Index()
    if args.jobs:
        runs, missing = index.find(args.jobs)
        if missing:
            print(
                f"hpctrain: error: not tracked by hpctrain: {', '.join(missing)} (see `hpctrain list`)",
                file=sys.stderr,
            )
            if not runs:
                raise SystemExit(1)
        return runs
    # Without --all: runs still active or ended within a day, read from the journal alone.
    return index.runs() if args.all else index.recent()


def run(args: argparse.Namespace) -> int:
    runs = _select(args)
    if not args.watch:
        statuses = poll_and_show(runs, args.json, detail=bool(args.jobs))
        return 1 if any(s.state == "SUBMIT_FAILED" for s in statuses) and args.jobs else 0
    final = wait_for(runs, quiet=args.json, interval=args.interval, detail=bool(args.jobs))
    if args.json:
        print_json([as_dict(s) for s in final])
    return 0


def poll_and_show(runs: list[Any], as_json: bool, detail: bool = False) -> list[Any]:
    from hpctrain.records import Index
    from hpctrain.watch import progress, refresh

    statuses = refresh(Index(), runs)
    for status in statuses:
        status.progress = progress(status.run.run_dir)
    if as_json:
        print_json([as_dict(s) for s in statuses])
    else:
        show(statuses, detail)
    return statuses


def wait_for(
    runs: list[Any], quiet: bool = False, interval: float = MIN_INTERVAL_S, detail: bool = True
) -> list[Any]:
    """Poll until every run is terminal; print the table when something changed."""
    from hpctrain.records import Index
    from hpctrain.watch import TERMINAL_NAMES, progress, refresh

    interval = max(interval, MIN_INTERVAL_S)
    last: list[tuple[str, str]] | None = None
    index = Index()
    # The first poll comes quickly: short jobs often end within seconds of submission.
    delay = 1.0
    while True:
        statuses = refresh(index, runs)
        for status in statuses:
            status.progress = progress(status.run.run_dir)
        seen = [(s.run.run_id, s.state + str(_step(s))) for s in statuses]
        done = all(s.state in TERMINAL_NAMES for s in statuses)
        if not quiet and (seen != last or done):
            print(time.strftime("%H:%M:%S"))
            show(statuses, detail=detail and done)
            sys.stdout.flush()
        last = seen
        if done:
            return statuses
        time.sleep(delay)
        delay = min(interval, delay * 2)


def _step(status: Any) -> Any:
    return (status.progress.get("train") or {}).get("step")


def as_dict(status: Any) -> dict[str, Any]:
    run = status.run
    info = status.info
    from hpctrain.watch import failed_tasks

    data = {
        "job_id": run.job_id,
        "run_id": run.run_id,
        "name": run.name,
        "site": run.site,
        "backend": run.backend,
        "state": run.state,
        "reason": run.reason,
        "submitted_at": run.submitted_at,
        "run_dir": str(run.run_dir),
        "nodes": info.nodes if info else "",
        "elapsed": info.elapsed if info else "",
        "exit_code": info.exit_code if info else "",
        "source": info.source if info else "cache",
        "progress": status.progress,
    }
    if run.state in ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "CANCELLED", "TIMEOUT"):
        data["failed_tasks"] = failed_tasks(run.run_dir)
    return data


def _fmt(value: Any, spec: str = ".4g") -> str:
    if value is None:
        return "-"
    try:
        return format(float(value), spec)
    except (TypeError, ValueError):
        return str(value)


def summary_row(status: Any) -> list[str]:
    run, info, prog = status.run, status.info, status.progress
    train = prog.get("train") or {}
    result = prog.get("result") or {}
    step = result.get("step", result.get("final_step", train.get("step")))
    steps = train.get("steps") or result.get("steps")
    progress_text = (
        f"{step}/{steps}" if step is not None and steps else (str(step) if step is not None else "-")
    )
    loss = result.get("final_loss", train.get("loss"))
    speed = train.get("tokens_per_s") or train.get("samples_per_s")
    unit = "tok/s" if train.get("tokens_per_s") else "samples/s"
    evaluation = prog.get("eval") or {}
    accuracy = result.get(
        "eval_accuracy", (result.get("eval") or {}).get("accuracy", evaluation.get("accuracy"))
    )
    where = (info.nodes if info and info.nodes else "") or run.reason
    return [
        str(run.job_id or "-"),
        run.name,
        run.state,
        progress_text,
        _fmt(loss),
        f"{speed:.0f} {unit}" if speed else "-",
        _fmt(accuracy, ".3f") if accuracy is not None else "-",
        where[:40],
        ago(run.submitted_at),
    ]


def show(statuses: list[Any], detail: bool = False) -> None:
    if not statuses:
        print("No jobs tracked by hpctrain (submit one with `hpctrain submit`).")
        return
    header = ["JOBID", "NAME", "STATE", "STEP", "LOSS", "THROUGHPUT", "ACC", "NODES/REASON", "SUBMITTED"]
    print(table([summary_row(s) for s in statuses], header))
    for status in statuses:
        _show_problems(status, detail)


def _show_parameter_server(status: Any) -> None:
    """Staleness and per-worker throughput: what tells sync, bounded and async apart."""
    prog = status.progress
    train, result = prog.get("train") or {}, prog.get("result") or {}
    mode = result.get("mode") or train.get("mode")
    if not mode:
        return
    mean = result.get("staleness_mean", train.get("staleness_mean"))
    worst = result.get("staleness_max", train.get("staleness_max"))
    alive = train.get("workers_alive")
    line = f"  job {status.run.job_id}: parameter server ({mode}), staleness mean {_fmt(mean, '.2f')}"
    line += f" max {worst}"
    if alive is not None:
        line += f", {alive} workers alive"
    print(line)
    per_worker = result.get("per_worker") or prog.get("workers") or {}
    for worker, info in sorted(per_worker.items(), key=lambda kv: int(kv[0])):
        state = info.get("status", "running")
        why = f" ({info['reason']})" if info.get("reason") else ""
        loss = f", loss {_fmt(info['loss'])}" if "loss" in info else ""
        print(f"    worker {worker}: {state}{why}, {_fmt(info.get('samples_per_s'), '.0f')} samples/s{loss}")


def _show_problems(status: Any, detail: bool) -> None:
    from hpctrain.watch import failed_tasks, tail_lines

    _show_parameter_server(status)
    run = status.run
    if run.state == "SUBMIT_FAILED":
        print(f"  {run.run_id}: not submitted: {run.reason} (script kept in {run.run_dir})")
        return
    if run.state not in ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT"):
        if detail:
            _show_detail(status)
        return
    tasks = failed_tasks(run.run_dir)
    reported = {str(f.get("rank")): f for f in status.progress.get("failures", [])}
    for task in tasks:
        rank = task["rank"]
        cause = reported.get(rank, {}).get("error") or task["error"]
        print(f"  job {run.job_id}: rank {rank} on {task['node']} failed: {cause}")
        for line in tail_lines(run.run_dir / "logs" / f"rank-{rank}.log", 5):
            print(f"    | {line}")
    for rank, failure in reported.items():
        if rank not in {t["rank"] for t in tasks}:
            print(
                f"  job {run.job_id}: rank {rank} on {failure.get('hostname', '?')} failed: "
                f"{failure.get('error', '?')}"
            )
    if not tasks and not reported:
        print(f"  job {run.job_id}: {run.state}; batch log: {run.run_dir / 'logs'}")
    if detail:
        _show_detail(status)


def _show_detail(status: Any) -> None:
    prog = status.progress
    memory = prog.get("memory")
    if memory:
        ranks = memory.get("ranks") or {}
        if ranks:
            print(
                "  memory per rank (MB): "
                + ", ".join(
                    f"{r}: params {_mb(m.get('params'))} grads {_mb(m.get('grads'))} "
                    f"optim {_mb(m.get('optimizer'))} peak {_fmt(m.get('peak_mem_mb'), '.0f')}"
                    for r, m in sorted(ranks.items(), key=lambda kv: int(kv[0]))
                )
            )
    result = prog.get("result")
    if result:
        print(
            "  result: " + ", ".join(f"{k}={_fmt(v)}" for k, v in result.items() if not isinstance(v, dict))
        )
    print(f"  run directory: {status.run.run_dir}")


def _mb(value: Any) -> str:
    return "-" if value is None else f"{float(value) / 2**20:.1f}"
