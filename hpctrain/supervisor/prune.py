"""Early stopping of a sweep's trial (successive halving), run beside the training by the batch script.

At steps M, 2M, 4M... (``sweep.early_stop.after_steps``) the trial's evaluation metric is compared
with that of every other trial of the sweep that has reached the same step. When at least
``min_trials`` have, and this trial is in the worse half, it writes ``stopped.json`` (the
step, the metric, the peers' median and how many peers there were) and cancels its own array
element. Trials that reach a step first are compared with fewer peers, as in asynchronous
successive halving. Torch-free: it only reads metrics files.

    python -m hpctrain.supervisor.prune        # inside an array element: $HPCTRAIN_RUN_DIR, $SLURM_JOB_ID
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from hpctrain import rundir, spec
from hpctrain.rundir.lines import EVAL_FIELDS
from hpctrain.scheduler.slurm.nodes import cancel_job

POLL_S = 1.0


def rungs(first: int, steps: int) -> list[int]:
    out, step = [], first
    while step < steps:
        out.append(step)
        step *= 2
    return out


def eval_at(run: rundir.RunDir, metric: str, step: int) -> float | None:
    """The trial's metric from its eval line at `step`, reading at most the first TAIL_BYTES of metrics."""
    field = EVAL_FIELDS.get(metric)
    if field is None:
        return None
    try:
        with open(run.metrics, "rb") as handle:
            data = handle.read(rundir.TAIL_BYTES)
    except OSError:
        return None
    for raw in data.split(b"\n")[:-1]:  # the last piece may be a line still being written
        if b'"eval"' not in raw:
            continue
        line = rundir.decode_line(raw, str(run.metrics))
        if isinstance(line, rundir.EvalLine) and line.step == step:
            value = getattr(line, field)
            return float(value) if value is not None else None
    return None


def judge(value: float, peers: list[float], mode: str, min_trials: int) -> float | None:
    """The median of everyone at this step if `value` is in the worse half, else None (keep going)."""
    everyone = [value, *peers]
    if len(everyone) < min_trials:
        return None
    median = statistics.median(everyone)
    worse = value > median if mode == "min" else value < median
    return median if worse else None


def check(run: rundir.RunDir, settings: spec.Sweep, step: int) -> rundir.Stopped | None:
    """Stopped when this trial is behind at `step`; None when it goes on (or cannot be judged yet)."""
    assert settings.early_stop is not None and run.element_of is not None
    value = eval_at(run, settings.metric, step)
    if value is None:
        return None
    sweep_root = run.element_of
    peers = [
        eval_at(sweep_root.element(i), settings.metric, step) for i in sweep_root.elements() if i != run.index
    ]
    known = [p for p in peers if p is not None]
    median = judge(value, known, settings.mode, settings.early_stop.min_trials)
    if median is None:
        return None
    better = "lower" if settings.mode == "min" else "higher"
    return rundir.Stopped(
        step=step,
        metric=settings.metric,
        value=value,
        median=median,
        peers=len(known),
        reason=(
            f"{settings.metric} {value:.4g} at step {step} is in the worse half of the "
            f"{len(known) + 1} trials there (median {median:.4g}, {better} is better)"
        ),
    )


def stop_when_behind(run: rundir.RunDir, settings: spec.Sweep, steps: int, job_id: str) -> int:
    """Judge the trial at each rung as its eval line appears; cancel the array element if it is behind.
    Returns once it is stopped, has passed every rung, has finished, or its batch script is gone."""
    assert settings.early_stop is not None
    pending = rungs(settings.early_stop.after_steps, steps)
    parent = os.getppid()
    while pending and os.getppid() == parent and not run.result.exists():
        reached = eval_at(run, settings.metric, pending[0])
        if reached is None:
            time.sleep(POLL_S)
            continue
        stopped = check(run, settings, pending.pop(0))
        if stopped is not None:
            rundir.write_json(run.stopped, stopped)
            print(f"hpctrain: early stop: {stopped.reason}", flush=True)
            cancel_job(job_id)
            return 0
    return 0


def main() -> int:
    root = Path(os.environ["HPCTRAIN_RUN_DIR"])
    resolved = spec.loads((root / rundir.SPEC).read_bytes())
    settings = resolved.job.sweep
    if settings is None or settings.early_stop is None:
        return 0
    index = int(os.environ["HPCTRAIN_ARRAY_INDEX"])
    run = rundir.RunDir(root.parent).element(index)
    # The element itself (array_task), never the array: the element with the array's id would take all.
    return stop_when_behind(run, settings, resolved.job.train.steps, os.environ["HPCTRAIN_JOB_REF"])


if __name__ == "__main__":
    sys.exit(main())
