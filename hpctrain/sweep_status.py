"""Where a sweep stands: each trial's state (one squeue, at most one sacct per poll) and its metric."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import msgspec

from hpctrain import rundir
from hpctrain.backends.base import JobState, slurm_state
from hpctrain.sweep import SweepRecord, Value, trial_dir

# `123_4`, or a pending range `123_[0-9%4]` / `123_[1,3-5]` as squeue without --array and sacct print.
ELEMENT = re.compile(r"^(\d+)_(\d+|\[[0-9,\-%]+\])$")
# Metrics lines that stand in for a result field while the trial still runs.
RUNNING_METRIC: dict[str, tuple[type, str]] = {
    "eval_loss": (rundir.EvalLine, "loss"),
    "eval_accuracy": (rundir.EvalLine, "accuracy"),
    "final_loss": (rundir.TrainLine, "loss"),
}


class TrialStatus(msgspec.Struct, kw_only=True):
    index: int
    params: dict[str, Value]
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


def element_states(record: SweepRecord, squeue: str, sacct: str = "") -> dict[int, tuple[str, str]]:
    """Trial index -> (state, reason) from `ID|STATE|REASON` rows; squeue's rows win over sacct's."""
    offsets = {c.job_id: c for c in record.arrays if c.job_id}
    states: dict[int, tuple[str, str]] = {}
    for text in (sacct, squeue):  # squeue last: it is the fresher
        for line in text.splitlines():
            parts = line.strip().split("|")
            match = ELEMENT.match(parts[0]) if len(parts) >= 2 else None
            chunk = offsets.get(match.group(1)) if match else None
            if match is None or chunk is None:
                continue
            state = slurm_state(parts[1]).value
            reason = parts[2] if len(parts) > 2 and parts[2] != "None" else ""
            for local in _indices(match.group(2), chunk.count):
                states[chunk.offset + local] = (state, reason)
    return states


def _indices(text: str, count: int) -> list[int]:
    """`4` -> [4]; `[0-9%4]` -> 0..9, bounded by the chunk's size whatever the text says."""
    if text.isdigit():
        return [int(text)] if int(text) < count else []
    out: list[int] = []
    for part in text.strip("[]").split("%", 1)[0].split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (high.isdigit() or not high):
            out.extend(range(int(low), min(int(high or low), count - 1) + 1))
    return out


def poll(records: list[SweepRecord]) -> list[dict[int, tuple[str, str]]]:
    """One squeue for every element of every array of every sweep; then sacct once, only for the
    arrays that have elements squeue no longer lists."""
    from hpctrain.backends.slurm_cli import SlurmCliBackend

    if not records:
        return []
    cli = SlurmCliBackend()
    rows = cli._check(
        cli._run(["squeue", "--me", "--states=all", "--array", "--noheader", "--format=%i|%T|%r"], "squeue"),
        "squeue",
    )
    states = [element_states(record, rows) for record in records]
    gone = [r for r, s in zip(records, states, strict=True) if len(s) < len(r.trials)]
    ids = ",".join(c.job_id for r in gone for c in r.arrays if c.job_id)
    if ids:
        proc = cli._run(
            ["sacct", "-X", "--noheader", "--parsable2", "--format=JobID,State,Reason", "--jobs", ids],
            "sacct",
        )
        if proc.returncode == 0:  # no accounting: the run directories still tell how trials ended
            states = [element_states(r, rows, proc.stdout) for r in records]
    return states


def trial_status(root: Path, record: SweepRecord, index: int, polled: tuple[str, str] | None) -> TrialStatus:
    chunk = record.chunk_of(index)
    trial = record.trials[index]
    state, reason = polled or (JobState.UNKNOWN.value, "")
    status = TrialStatus(
        index=index,
        params=trial.params,
        state=state,
        reason=reason,
        job_id=f"{chunk.job_id}_{index - chunk.offset}",
    )
    run = trial_dir(root, index)
    result = run.read_result()
    if isinstance(result, rundir.Result):
        status.step, status.steps = result.step, result.steps
        value = getattr(result, record.metric, None)
        status.metric = float(value) if isinstance(value, int | float) else None
        if result.status == "completed" and state not in ("RUNNING", "PENDING"):
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


def summarize(root: Path, record: SweepRecord, polled: dict[int, tuple[str, str]]) -> SweepStatus:
    trials = [trial_status(root, record, t.index, polled.get(t.index)) for t in record.trials]
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
