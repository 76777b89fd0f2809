"""Where a sweep stands: each trial's state (one Backend.poll of every array) and its metric."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import NamedTuple

import msgspec

from hpctrain import rundir
from hpctrain.rundir import Stopped, SweepRecord, SweepValue
from hpctrain.scheduler.base import TERMINAL, JobInfo, JobState, element_indices
from hpctrain.sweep.plan import trial_dir

# Metrics lines that stand in for a result field while the trial still runs.
RUNNING_METRIC: dict[str, tuple[type, str]] = {
    "eval_loss": (rundir.EvalLine, "loss"),
    "eval_accuracy": (rundir.EvalLine, "accuracy"),
    "final_loss": (rundir.TrainLine, "loss"),
}


class TrialStatus(msgspec.Struct, kw_only=True):
    index: int
    params: dict[str, SweepValue]
    state: str
    job_id: str
    """The element as Slurm names it: ARRAYJOBID_INDEX."""
    reason: str = ""
    metric: float | None = None
    step: int | None = None
    steps: int | None = None
    problem: str = ""


class SweepStatus(msgspec.Struct, kw_only=True):
    sweep_id: str
    name: str
    metric: str
    mode: str
    counts: dict[str, int]
    best: TrialStatus | None
    trials: list[TrialStatus]
    arrays: list[str]


class Polled(NamedTuple):
    state: str
    reason: str = ""
    started: bool = True
    """False for an element still inside a pending range (`123_[5-9]`): it has never run, so its run
    directory holds nothing yet and is not read."""


def element_states(record: SweepRecord, found: dict[str, JobInfo]) -> dict[int, Polled]:
    """Trial index -> its state, from a poll of the sweep's arrays (their elements folded in)."""
    states: dict[int, Polled] = {}
    for chunk in record.arrays:
        info = found.get(chunk.job_id or "")
        if info is None:
            continue
        for element, state in info.elements.items():
            polled = Polled(state.value, info.element_reasons.get(element, ""), element.isdigit())
            for local in element_indices(element, chunk.count):
                states[chunk.offset + local] = polled
    return states


def poll(records: list[SweepRecord], finished: list[dict[int, TrialStatus]]) -> list[dict[int, Polled]]:
    """One poll of every array of every sweep (per backend): the queue once, and accounting once for
    the arrays with unfinished trials that the queue no longer lists whole."""
    from hpctrain.scheduler import select_backend

    by_backend: dict[str, dict[str, int]] = {}
    for record, done in zip(records, finished, strict=True):
        sizes = by_backend.setdefault(record.backend, {})
        for chunk in record.arrays:
            if chunk.job_id and any(i not in done for i in range(chunk.offset, chunk.offset + chunk.count)):
                sizes[chunk.job_id] = chunk.count
    found: dict[str, JobInfo] = {}
    for name, sizes in by_backend.items():
        if sizes:
            found.update(select_backend(name).poll(sizes, array_sizes=sizes))
    return [element_states(record, found) for record in records]


def trial_status(root: Path, record: SweepRecord, index: int, polled: Polled | None) -> TrialStatus:
    """A trial's state and metric: its result if it has one, else the tail of its metrics."""
    chunk = record.chunk_of(index)
    if chunk.job_id is None:  # written, then refused by the scheduler: the round loop never queued it
        reason = f"its array was never queued; `hpctrain sweep resume {record.sweep_id}` sends it"
        params = record.trials[index].params
        return TrialStatus(index=index, params=params, state=NOT_QUEUED, reason=reason, job_id="-")
    polled = polled or Polled(JobState.UNKNOWN.value)
    status = TrialStatus(
        index=index,
        params=record.trials[index].params,
        state=polled.state,
        reason=polled.reason,
        job_id=f"{chunk.job_id}_{index - chunk.offset}",
    )
    if not polled.started:
        return status
    run = trial_dir(root, index)
    if polled.state == JobState.CANCELLED.value:
        stopped = rundir.read_json(run.stopped, Stopped, below=run.top)
        if isinstance(stopped, Stopped):
            status.state, status.reason = STOPPED, stopped.reason
            status.step, status.metric = stopped.step, stopped.value
            return status
    result = run.read_result()
    if isinstance(result, rundir.Result):
        status.step, status.steps = result.step, result.steps
        value = getattr(result, record.metric, None)
        status.metric = float(value) if isinstance(value, int | float) else None
        if result.status == "completed" and polled.state not in ("RUNNING", "PENDING"):
            status.state = JobState.COMPLETED.value
        return status
    if isinstance(result, rundir.Unreadable):
        status.problem = str(result)
    kind, field = RUNNING_METRIC.get(record.metric, (type(None), ""))
    for line in run.read_metrics(tail=40, head=0):
        if isinstance(line, rundir.TrainLine):
            status.step, status.steps = line.step, line.steps or status.steps
        if isinstance(line, kind) and getattr(line, field, None) is not None:
            status.metric = getattr(line, field)
    return status


class Finished(msgspec.Struct):
    """trials-final.json: trials that cannot change any more, so a poll does not read them again."""

    trials: dict[int, TrialStatus] = {}


STOPPED = "STOPPED"  # ended by early stopping (sweep_prune), with its reason
NOT_QUEUED = "NOT_QUEUED"  # written, its array refused by the scheduler; `sweep resume` sends it
FINAL = frozenset(
    {STOPPED} | {s.value for s in TERMINAL if s is not JobState.NODE_FAIL}
)  # NODE_FAIL requeues


def load_finished(root: Path) -> dict[int, TrialStatus]:
    cached = rundir.read_json(rundir.RunDir(root).trials_final, Finished, max_bytes=64 << 20)
    return cached.trials if isinstance(cached, Finished) else {}


def survey(sweeps: list[tuple[Path, SweepRecord]]) -> list[SweepStatus]:
    """Every trial of every sweep given, from one poll."""
    finished = [load_finished(root) for root, _ in sweeps]
    polled = poll([record for _, record in sweeps], finished)
    return [
        summarize(root, record, states, done)
        for (root, record), states, done in zip(sweeps, polled, finished, strict=True)
    ]


def summarize(
    root: Path, record: SweepRecord, polled: dict[int, Polled], finished: dict[int, TrialStatus] | None = None
) -> SweepStatus:
    finished = load_finished(root) if finished is None else finished
    trials: list[TrialStatus] = []
    new = False
    for trial in record.trials:
        status = finished.get(trial.index) or trial_status(root, record, trial.index, polled.get(trial.index))
        if trial.index not in finished and status.state in FINAL:
            finished[trial.index], new = status, True
        trials.append(status)
    if new:
        try:
            rundir.write_json(rundir.RunDir(root).trials_final, Finished(finished))
        except OSError:
            pass  # a cache: a read-only sweep directory only makes the next poll read more
    ranked = rank(trials, record.mode)
    return SweepStatus(
        sweep_id=record.sweep_id,
        name=record.name,
        metric=record.metric,
        mode=record.mode,
        counts=dict(Counter(t.state for t in trials).most_common()),
        best=ranked[0] if ranked and ranked[0].metric is not None else None,
        trials=trials,
        arrays=[f"{c.job_id} (trials {c.offset}-{c.offset + c.count - 1})" for c in record.arrays],
    )


def rank(trials: list[TrialStatus], mode: str) -> list[TrialStatus]:
    """Best first; trials without a metric last, in index order."""
    sign = 1.0 if mode == "min" else -1.0
    return sorted(trials, key=lambda t: (t.metric is None, sign * (t.metric or 0.0), t.index))
