"""`hpctrain status`: state, progress and failures of tracked jobs, one scheduler query per poll."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from hpctrain.cli.common import ago, print_json, table
from hpctrain.errors import HpctrainError

if TYPE_CHECKING:
    from hpctrain.rundir import RunDir
    from hpctrain.runs.index import Run
    from hpctrain.runs.poll import Progress, RunStatus

# A poll loop never asks the controller more often than this: admins of shared clusters care.
MIN_INTERVAL_S = 5.0
# Failed ranks shown with their log tails; the rest are counted (a thousand dead ranks say no more).
SHOWN_FAILURES = 8


class NotTracked(HpctrainError):
    """A job id or run id that hpctrain has no record of."""

    exit_code = 1


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
    from hpctrain.cli.sweep_cmd import add_status_arguments

    add_status_arguments(parser)


def select(keys: list[str], everything: bool = False) -> list[Run]:
    """The runs named by job id or run id (some unknown: a warning; all unknown: an error), else recent."""
    from hpctrain.runs.index import Index

    index = Index()
    if keys:
        runs, missing = index.find(keys)
        if missing:
            message = f"not tracked by hpctrain: {', '.join(missing)} (see `hpctrain list`)"
            if not runs:
                raise NotTracked(message)
            print(f"hpctrain: warning: {message}", file=sys.stderr)
        return runs
    if everything:
        return index.runs()
    # Without --all: runs still active or ended within a day, read from the journal alone.
    return index.recent()


def run(args: argparse.Namespace) -> int:
    from hpctrain.runs.index import SUBMIT_FAILED

    if args.jobs:  # `hpctrain status SWEEP`: a sweep's own view (one line per sweep, --trials)
        from hpctrain.cli.sweep_cmd import status_hook

        if (code := status_hook(args)) is not None:
            return code

    runs = select(args.jobs, args.all)
    if not args.watch:
        statuses = poll_and_show(runs, args.json, detail=bool(args.jobs))
        return 1 if args.jobs and any(s.state == SUBMIT_FAILED for s in statuses) else 0
    final = wait_for(runs, quiet=args.json, interval=args.interval, detail=bool(args.jobs))
    if args.json:
        print_json([as_dict(s) for s in final])
    return 0


def poll_and_show(runs: list[Run], as_json: bool, detail: bool = False) -> list[RunStatus]:
    from hpctrain.runs.index import Index
    from hpctrain.runs.poll import observe

    # The table of many jobs needs only what result.json holds of ended ones; JSON and detail read all.
    statuses = observe(Index(), runs, brief=not as_json and not detail)
    release_requeued_runs(statuses)
    if as_json:
        print_json([as_dict(s) for s in statuses])
    else:
        show(statuses, detail)
    return statuses


def wait_for(
    runs: list[Run], quiet: bool = False, interval: float = MIN_INTERVAL_S, detail: bool = True
) -> list[RunStatus]:
    """Poll until every run has ended, showing each job's progress (steps, rate, ETA); then the table."""
    from hpctrain.cli.view.progress import ProgressView
    from hpctrain.runs.poll import wait_until_done

    view = None if quiet else ProgressView()

    def on_poll(statuses: list[RunStatus], done: bool) -> None:
        release_requeued_runs(statuses)
        if view is None:
            return
        view.update(statuses)
        if done:
            view.close()
            print(time.strftime("%H:%M:%S"))
            show(statuses, detail=detail)
            sys.stdout.flush()

    try:
        return wait_until_done(runs, on_poll, interval)
    finally:
        if view is not None:
            view.close()


def release_requeued_runs(statuses: list[RunStatus]) -> None:
    """Requeued runs held for Slurm's requeue delay start now; one whose batch host died, without
    the dead node (Backend.release_held): nothing inside the job is left to do it."""
    from hpctrain.rundir import RunDir
    from hpctrain.scheduler import release_held

    release_held((s.run.backend, RunDir(s.run.run_dir), s.info) for s in statuses if s.info and s.run.job_id)


def as_dict(status: RunStatus) -> dict[str, Any]:
    import msgspec

    from hpctrain.runs.poll import FAILURE_NAMES, failed_tasks

    run, info = status.run, status.info
    data: dict[str, Any] = {
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
        "progress": msgspec.to_builtins(status.progress),
    }
    if status.elements:
        data["elements"] = msgspec.to_builtins(status.elements)
    from hpctrain.rundir import RunDir
    from hpctrain.rundir.attempts import run_summary

    if (restarts := run_summary(RunDir(run.run_dir))) is not None:
        data["restarts"] = msgspec.to_builtins(restarts)
    if run.state in FAILURE_NAMES:
        data["failed_tasks"] = msgspec.to_builtins(failed_tasks(run.run_dir))
    from hpctrain.runs import health

    if watchdog_said := health.as_json(run.run_dir, run.state):
        data["health"] = watchdog_said
    return data


def _fmt(value: float | int | str | None, spec: str = ".4g") -> str:
    if value is None:
        return "-"
    try:
        return format(float(value), spec)
    except (TypeError, ValueError):
        return str(value)


def _row(job: str, name: str, state: str, prog: Progress, where: str, submitted: str) -> list[str]:
    train, result, evaluation = prog.train, prog.result, prog.eval
    step = result.step if result else (train.step if train else None)
    steps = result.steps if result else (train.steps if train else None)
    progress_text = (
        f"{step}/{steps}" if step is not None and steps else (str(step) if step is not None else "-")
    )
    loss = result.final_loss if result and result.final_loss is not None else (train.loss if train else None)
    speed = (train.tokens_per_s or train.samples_per_s) if train else None
    unit = "tok/s" if train and train.tokens_per_s else "samples/s"
    accuracy = result.eval_accuracy if result else None
    if accuracy is None and evaluation is not None:
        accuracy = evaluation.accuracy
    return [
        job,
        name,
        state,
        progress_text,
        _fmt(loss),
        f"{speed:.0f} {unit}" if speed else "-",
        _fmt(accuracy, ".3f"),
        _printable(where)[:40],
        submitted,
    ]


def summary_rows(status: RunStatus) -> list[list[str]]:
    """The job's row, then one row per array element."""
    run, info = status.run, status.info
    where = (info.nodes if info and info.nodes else "") or run.reason
    rows = [_row(str(run.job_id or "-"), run.name, run.state, status.progress, where, ago(run.submitted_at))]
    for element in status.elements:
        job = f"{run.job_id or '-'}_{element.index}"
        rows.append(_row(job, f"  [{element.index}]", element.state, element.progress, "", ""))
    return rows


def show(statuses: list[RunStatus], detail: bool = False) -> None:
    if not statuses:
        print("No jobs tracked by hpctrain (submit one with `hpctrain submit`).")
        return
    header = ["JOBID", "NAME", "STATE", "STEP", "LOSS", "THROUGHPUT", "ACC", "NODES/REASON", "SUBMITTED"]
    from hpctrain.runs import health
    from hpctrain.runs.index import SUBMIT_FAILED
    from hpctrain.runs.poll import FAILURE_NAMES

    print(table([row for s in statuses for row in summary_rows(s)], header))
    for status in statuses:
        prog, state = status.progress, status.state
        if detail or state in FAILURE_NAMES or state == health.RUNNING:  # not a file read per ended run
            for line in health.lines(status.run.run_dir, state):
                print(f"  job {status.run.job_id}: {line}")
        # Most of a thousand ended runs have nothing more to say than their row.
        if detail or status.elements or prog.unreadable or state in FAILURE_NAMES or state == SUBMIT_FAILED:
            _show_problems(status, detail)
        elif _is_parameter_server(prog):
            _show_parameter_server(f"job {status.run.job_id}", prog)
        else:
            _show_stragglers(f"job {status.run.job_id}", prog)


def _printable(text: str) -> str:
    """Text from files may hold terminal escapes or newlines: show them escaped, on one line."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _is_parameter_server(prog: Progress) -> bool:
    return bool((prog.result and prog.result.mode) or (prog.train and prog.train.mode))


def _show_parameter_server(label: str, prog: Progress) -> None:
    """Staleness and per-worker throughput: what tells sync, bounded and async apart."""
    train, result = prog.train, prog.result
    mode = (result.mode if result else None) or (train.mode if train else None)
    if not mode:
        return
    mean = result.staleness_mean if result and result.staleness_mean is not None else None
    worst = result.staleness_max if result and result.staleness_max is not None else None
    if train is not None:
        mean = train.staleness_mean if mean is None else mean
        worst = train.staleness_max if worst is None else worst
    line = f"  {label}: parameter server ({_printable(mode)}), staleness mean {_fmt(mean, '.2f')}"
    line += f" max {_fmt(worst, 'g')}"
    if train is not None and train.workers_alive is not None:
        line += f", {train.workers_alive} workers alive"
    print(line)
    if result and result.per_worker:
        for worker, stats in sorted(result.per_worker.items()):
            why = f" ({_printable(stats.reason)})" if stats.reason else ""
            loss = f", loss {_fmt(stats.loss)}" if stats.loss is not None else ""
            print(
                f"    worker {_printable(worker)}: {_printable(stats.status)}{why}, "
                f"{_fmt(stats.samples_per_s, '.0f')} samples/s{loss}"
            )
        return
    for number, latest in sorted(prog.workers.items()):
        loss = f", loss {_fmt(latest.loss)}" if latest.loss is not None else ""
        print(f"    worker {number}: running, {_fmt(latest.samples_per_s, '.0f')} samples/s{loss}")


def _show_stragglers(label: str, prog: Progress) -> None:
    """`straggler: rank 3 on node2, +45%` for each rank the runtime flagged in its latest interval."""
    from hpctrain.rundir.stragglers import describe

    for line in describe(prog.ranks):
        print(f"  {label}: {_printable(line)}")


def _show_problems(status: RunStatus, detail: bool) -> None:
    from hpctrain.rundir import RunDir
    from hpctrain.runs.index import SUBMIT_FAILED

    run = status.run
    if run.state == SUBMIT_FAILED:
        print(f"  {run.run_id}: not submitted: {_printable(run.reason)} (script kept in {run.run_dir})")
        return
    label = f"job {run.job_id}"
    root = RunDir(run.run_dir)
    # An array's own directory holds no training: its elements tell what failed.
    failing = None if not status.elements else False
    _show_run(label, root, run.state, status.progress, detail, failing)
    for element in status.elements:
        _show_run(
            f"{label}_{element.index}", root.element(element.index), element.state, element.progress, detail
        )
    if detail:
        print(f"  run directory: {run.run_dir}")


def _show_run(
    label: str, root: RunDir, state: str, prog: Progress, detail: bool, failing: bool | None = None
) -> None:
    """What went wrong (srun's word and the runtime's reports), unreadable files, and with `detail`
    the memory and result of one run directory."""
    from hpctrain.rundir import tail_lines
    from hpctrain.rundir.attempts import run_summary, summary_line
    from hpctrain.runs.poll import FAILURE_NAMES, failed_tasks

    _show_parameter_server(label, prog)
    restarts = run_summary(root)
    if restarts is not None and (restarts.restarts or restarts.excluded or restarts.last_outcome == "failed"):
        print(f"  {label}: {_printable(summary_line(restarts))}")
    _show_stragglers(label, prog)
    for problem in prog.unreadable:
        print(f"  {label}: {_printable(problem.replace(str(root.root) + '/', ''))}")
    if failing is None:
        failing = state in FAILURE_NAMES
    if failing:
        tasks = failed_tasks(root)
        reported = {str(f.rank): f for f in prog.failures}
        hung = restarts is not None and restarts.last_outcome == "hang"
        for task in tasks[:SHOWN_FAILURES]:
            report = reported.get(task.rank)
            cause = report.error if report else task.error
            if hung and not report and task.error == "Killed":
                cause = "ended by the watchdog after the hang (Killed)"
            print(f"  {label}: rank {task.rank} on {_printable(task.node)} failed: {_printable(cause)}")
            if task.rank.isdigit():
                for line in tail_lines(root.rank_log(task.rank), 5):
                    print(f"    | {_printable(line)}")
        if len(tasks) > SHOWN_FAILURES:
            print(
                f"  {label}: and {len(tasks) - SHOWN_FAILURES} more failed tasks (status --json lists them)"
            )
        shown = {t.rank for t in tasks}
        for rank, failure in list(reported.items())[:SHOWN_FAILURES]:
            if rank not in shown:
                where = failure.hostname or "?"
                print(f"  {label}: rank {rank} on {_printable(where)} failed: {_printable(failure.error)}")
        if not tasks and not reported:
            print(f"  {label}: {state}; batch log: {root.batch_log}")
    if detail:
        _show_detail(prog)


def _show_detail(prog: Progress) -> None:
    if prog.memory:
        print(
            "  memory per rank (MB): "
            + ", ".join(
                f"{rank}: params {_mb(m.rank_bytes.get('params'))} grads {_mb(m.rank_bytes.get('grads'))} "
                f"optim {_mb(m.rank_bytes.get('optimizer'))} peak {_fmt(m.peak_mem_mb, '.0f')}"
                for rank, m in sorted(prog.memory.items())
            )
        )
    if prog.result is not None:
        import msgspec

        fields = msgspec.to_builtins(prog.result)
        print(
            "  result: "
            + ", ".join(
                f"{k}={_printable(_fmt(v))}" for k, v in fields.items() if not isinstance(v, dict | list)
            )
        )


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{float(value) / 2**20:.1f}"
