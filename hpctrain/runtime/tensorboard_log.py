"""TensorBoard event files beside metrics.jsonl: rank 0 mirrors the metrics lines as scalars.

One log directory per run (``RunDir.tensorboard``), whatever the number of requeues and restarts.
A resumed run opens its writer with ``purge_step`` = the checkpoint's step + 1: TensorBoard then
hides what the previous attempt logged after that checkpoint (the resumed run logs those steps
again), so every curve reads as one run whose steps never go back and never repeat.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hpctrain.rundir import EvalLine, EventLine, MetricLine, RankTimesLine, RunDir, TrainLine
from hpctrain.rundir.stragglers import excess

log = logging.getLogger(__name__)

# The TrainLine fields shown as curves, and their tags (TensorBoard groups tags by the prefix).
TRAIN_SCALARS = {
    "loss": "train/loss",
    "lr": "train/lr",
    "samples_per_s": "train/samples_per_s",
    "tokens_per_s": "train/tokens_per_s",
    "mfu": "train/mfu",
    "step_time_s": "train/step_time_s",
}
EVAL_SCALARS = {"loss": "eval/loss", "accuracy": "eval/accuracy"}
# Events after which the writer flushes, and the last events of an attempt, after which it closes:
# the runtime leaves through os._exit (no atexit handlers), so nothing may stay buffered then.
FLUSH_EVENTS = frozenset({"checkpoint", "straggler"})
FINAL_EVENTS = frozenset({"done", "preempted"})
# Seconds between flushes otherwise: what a crash can lose (TensorBoard's default is 120).
FLUSH_SECS = 30


def final_event(line: MetricLine) -> bool:
    """Whether this line is the last an attempt writes (a sink then closes)."""
    return isinstance(line, EventLine) and line.event in FINAL_EVENTS


def scalars(line: MetricLine) -> tuple[int, dict[str, float]]:
    """The step of a metrics line and the curves it adds to, by tag (none for memory and event lines)."""
    if isinstance(line, TrainLine | EvalLine):
        tags = TRAIN_SCALARS if isinstance(line, TrainLine) else EVAL_SCALARS
        values = {tag: value for field, tag in tags.items() if (value := getattr(line, field)) is not None}
        if isinstance(line, TrainLine):  # a progress pattern's own groups, a client's own keywords
            values.update({f"train/{name}": value for name, value in line.metrics.items()})
        return line.step, values
    if isinstance(line, RankTimesLine) and line.compute_s:
        # How much slower the slowest rank computes than the median one: a straggler is a bump.
        return line.step, {"ranks/slowest_over_median": max(excess(line.compute_s))}
    return 0, {}


class GuardedSink:
    """A sink for :class:`hpctrain.runtime.metrics.Metrics` that passes each line's scalars on, and
    whose trouble never ends the training (a full disk, no network): the first error stops it with
    one warning; metrics.jsonl goes on. After the last line of an attempt it closes: the runtime
    leaves through os._exit (no atexit handlers), so nothing may stay buffered then."""

    label = "sink"

    def __init__(self, target: Any) -> None:
        self.target = target
        """What the lines go to: a TensorBoard SummaryWriter, a W&B run."""
        self.stopped = False

    def __call__(self, line: MetricLine) -> None:
        if self.stopped:
            return
        try:
            step, values = scalars(line)
            self._write(line, step, values)
            if final_event(line):
                self.close()
        except Exception as error:
            self.stopped = True
            log.warning("%s: %s; nothing more is written there by this attempt", self.label, error)

    def close(self) -> None:
        if not self.stopped:
            self.stopped = True  # closed: later lines are not written
            self._close()

    def _write(self, line: MetricLine, step: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError


class TensorBoardLog(GuardedSink):
    """Each metrics line becomes TensorBoard scalars."""

    label = "TensorBoard event files"

    def _write(self, line: MetricLine, step: int, values: dict[str, float]) -> None:
        for tag, value in values.items():
            self.target.add_scalar(tag, value, step, walltime=line.time)
        if isinstance(line, EvalLine) or (isinstance(line, EventLine) and line.event in FLUSH_EVENTS):
            self.target.flush()

    def _close(self) -> None:
        self.target.close()


def open_log(
    run_dir: Path, rank: int, enabled: bool | None, resumed_step: int, setting: str = "train.tensorboard"
) -> TensorBoardLog | None:
    """Rank 0's TensorBoard sink (None elsewhere, when disabled, or without the tensorboard package:
    `enabled` None means "when installed", True warns when it is not).

    ``resumed_step`` is the step this attempt starts from (0 for a fresh start): events of earlier
    attempts at later steps are purged, so a restart never shows a step twice. ``setting`` names the
    spec field in the warning.
    """
    if rank != 0 or enabled is False:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:
        if enabled:
            log.warning("%s is on but %s: no event files (pip install tensorboard)", setting, error)
        return None
    folder = RunDir(run_dir).tensorboard
    earlier = folder.is_dir() and any(folder.iterdir())
    purge_step = resumed_step + 1 if earlier else None
    return TensorBoardLog(SummaryWriter(str(folder), purge_step=purge_step, flush_secs=FLUSH_SECS))
