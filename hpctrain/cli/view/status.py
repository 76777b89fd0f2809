"""Run statuses as text: the table, then what went wrong, restarts, stragglers and health under it.

Everything shown comes from hpctrain.tracking.status; nothing here reads a file or asks the scheduler.
`hpctrain status` and `submit --wait` draw through it.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from hpctrain.cli.view.table import ago, clip, number, table
from hpctrain.errors import printable
from hpctrain.scheduler.base import JobState
from hpctrain.tracking.status import MIN_INTERVAL_S

if TYPE_CHECKING:
    from hpctrain import api
    from hpctrain.tracking.poll import Progress
    from hpctrain.tracking.status import Element, FailedRanks, RunStatus

HEADER = ["JOBID", "NAME", "STATE", "STEP", "LOSS", "THROUGHPUT", "ACC", "NODES/REASON", "SUBMITTED"]
# Widest NODES/REASON cell; `status --json` and record.json keep the whole reason.
WHERE_WIDTH = 40
# Ended states whose cause is the scheduler's, said in one line (a failure block per rank would only
# repeat srun's word for it); FAILED gets the blocks, CANCELLED says who cancelled it in its row.
ONE_LINE_STATES = {
    "NODE_FAIL": "a node of the job failed",
    "OUT_OF_MEMORY": "a task ran out of memory",
    "TIMEOUT": "the time limit was reached",
}


def wait_for(
    runs: list[api.Run], quiet: bool = False, interval: float = MIN_INTERVAL_S, detail: bool = True
) -> list[RunStatus]:
    """Poll until every run has ended, showing each job's progress (steps, rate, ETA); then the table."""
    from hpctrain import api
    from hpctrain.cli.view.progress import ProgressView

    view = None if quiet else ProgressView()

    def on_poll(statuses: list[RunStatus]) -> None:
        if view is not None:
            view.update(statuses)

    try:
        final = api.wait_all(runs, progress=on_poll, interval=interval, goodput=quiet)  # quiet: --json
        if view is not None:
            view.close()
            print(time.strftime("%H:%M:%S"))
            show(final, detail=detail)
            sys.stdout.flush()
        return final
    finally:
        if view is not None:
            view.close()


def show(statuses: list[RunStatus], detail: bool = False) -> None:
    """The table of every run (and array element), then the lines that explain a run further."""
    if not statuses:
        print("No jobs tracked by hpctrain (submit one with `hpctrain submit`).")
        return
    print(table([row for s in statuses for row in summary_rows(s)], HEADER))
    for status in statuses:
        label = f"job {status.job_id}"
        if status.blocked is not None:
            print(f"  {label}: {printable(status.blocked.warning())}")
        if status.health is not None:
            from hpctrain.tracking.health import describe

            for line in describe(status.health):
                print(f"  {label}: {line}")
        prog = status.progress
        # Most of a thousand ended runs have nothing more to say than their row.
        failing = status.failed_tasks is not None
        if (
            detail
            or status.elements
            or prog.unreadable
            or prog.unmatched
            or failing
            or status.state == JobState.SUBMIT_FAILED
        ):
            _show_problems(status, detail)
        elif _is_parameter_server(prog):
            _show_parameter_server(label, prog)
        else:
            _show_stragglers(label, prog)


def summary_rows(status: RunStatus) -> list[list[str]]:
    """The job's row, then one row per array element."""
    where = status.nodes or ("" if status.cancelled_by else status.reason)
    job = str(status.job_id or "-")
    state = f"{status.state} (by {status.cancelled_by})" if status.cancelled_by else status.state
    rows = [_row(job, status.name, state, status.progress, where, ago(status.submitted_at))]
    for element in status.elements:
        rows.append(_row(f"{job}_{element.index}", f"  [{element.index}]", element.state, element.progress))
    return rows


def _row(job: str, name: str, state: str, prog: Progress, where: str = "", submitted: str = "") -> list[str]:
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
        number(loss),
        f"{number(speed, '.0f')} {unit}" if speed else "-",
        number(accuracy, ".3f"),
        clip(printable(where), WHERE_WIDTH),
        submitted,
    ]


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
    line = f"  {label}: parameter server ({printable(mode)}), staleness mean {number(mean, '.2f')}"
    line += f" max {number(worst, 'g')}"
    if train is not None and train.workers_alive is not None:
        line += f", {train.workers_alive} workers alive"
    print(line)
    if result and result.per_worker:
        for worker, stats in sorted(result.per_worker.items()):
            why = f" ({printable(stats.reason)})" if stats.reason else ""
            loss = f", loss {number(stats.loss)}" if stats.loss is not None else ""
            print(
                f"    worker {printable(worker)}: {printable(stats.status)}{why}, "
                f"{number(stats.samples_per_s, '.0f')} samples/s{loss}"
            )
        return
    for worker_number, latest in sorted(prog.workers.items()):
        loss = f", loss {number(latest.loss)}" if latest.loss is not None else ""
        print(f"    worker {worker_number}: running, {number(latest.samples_per_s, '.0f')} samples/s{loss}")


def _show_stragglers(label: str, prog: Progress) -> None:
    """`straggler: rank 3 on node2, +45%` for each rank the runtime flagged in its latest interval."""
    from hpctrain.rundir.stragglers import describe

    for line in describe(prog.ranks):
        print(f"  {label}: {printable(line)}")


def _show_problems(status: RunStatus, detail: bool) -> None:
    if status.state == JobState.SUBMIT_FAILED:
        reason = printable(status.reason)
        print(f"  {status.run_id}: not submitted: {reason} (script kept in {status.run_dir})")
        return
    label = f"job {status.job_id}"
    if detail and status.state == JobState.PENDING and status.reason:
        print(f"  {label}: pending: {printable(status.reason)}")  # whole, where the table cuts it
    _show_run(label, status, detail)
    for element in status.elements:
        _show_run(f"{label}_{element.index}", element, detail)
    if detail:
        print(f"  run directory: {status.run_dir}")


def _show_run(label: str, run: RunStatus | Element, detail: bool) -> None:
    """What went wrong in one run directory (srun's word and the runtime's reports), its restarts,
    stragglers, unreadable files and, with `detail`, its memory and result."""
    from hpctrain.rundir.attempts import summary_line

    prog, restarts = run.progress, run.restarts
    _show_parameter_server(label, prog)
    shown = restarts is not None and (
        restarts.restarts or restarts.excluded or restarts.budget_spent or restarts.shrunk
    )
    if restarts is not None and (shown or restarts.last_outcome == "failed"):
        print(f"  {label}: {printable(summary_line(restarts))}")
    _show_stragglers(label, prog)
    for problem in prog.unreadable:
        print(f"  {label}: {printable(problem.replace(run.run_dir + '/', ''))}")
    if prog.unmatched:
        print(f"  {label}: {prog.unmatched}")
    if run.failed_ranks is not None:
        _show_failed(label, run.state, run.failed_ranks, detail)
    if detail:
        _show_detail(prog)


def _show_failed(label: str, state: str, failed: FailedRanks, detail: bool = True) -> None:
    """A block per failed rank of a FAILED run, one line for a run the scheduler ended, none for a
    cancelled one (its row says so). Without `detail` (the table of recent runs) a FAILED run gets one
    line too, its first failed rank: `status JOBID` shows every rank and its log's last lines."""
    if state in ONE_LINE_STATES:
        first = (failed.named or failed.reported)[:1]
        where = f": rank {first[0].rank} on {printable(first[0].node)}" if first else ""
        print(f"  {label}: {state} ({ONE_LINE_STATES[state]}{where}); batch log: {failed.batch_log}")
        return
    if state != "FAILED":
        return
    if not detail:
        ranks = [*failed.named, *failed.reported]
        first = ranks[0] if ranks else None
        who = f": rank {first.rank} on {printable(first.node)}: {printable(first.cause)}" if first else ""
        count = len(ranks) + failed.more
        more = f" and {count - 1} more" if count > 1 else ""
        job = label.removeprefix("job ").partition("_")[0]
        print(f"  {label}: FAILED{who}{more} (`hpctrain status {job}` for the logs)")
        return
    for rank in failed.named:
        print(f"  {label}: rank {rank.rank} on {printable(rank.node)} failed: {printable(rank.cause)}")
        for line in rank.log_tail:
            print(f"    | {printable(line)}")
    if failed.more:
        print(f"  {label}: and {failed.more} more failed tasks (status --json lists them)")
    for rank in failed.reported:
        print(f"  {label}: rank {rank.rank} on {printable(rank.node)} failed: {printable(rank.cause)}")
    if not failed.named and not failed.reported:
        print(f"  {label}: {state}; batch log: {failed.batch_log}")


def _show_detail(prog: Progress) -> None:
    """The memory of each rank and the result's numbers."""
    if prog.memory:
        print(
            "  memory per rank (MB): "
            + ", ".join(
                f"{rank}: params {_mb(m.rank_bytes.get('params'))} grads {_mb(m.rank_bytes.get('grads'))} "
                f"optim {_mb(m.rank_bytes.get('optimizer'))} peak {number(m.peak_mem_mb, '.0f')}"
                for rank, m in sorted(prog.memory.items())
            )
        )
    if prog.result is not None:
        import msgspec

        fields = msgspec.to_builtins(prog.result)
        print(
            "  result: "
            + ", ".join(
                f"{k}={printable(number(v))}" for k, v in fields.items() if not isinstance(v, dict | list)
            )
        )


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{float(value) / 2**20:.1f}"
