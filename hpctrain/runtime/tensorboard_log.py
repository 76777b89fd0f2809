"""TensorBoard event files beside metrics.jsonl: rank 0 mirrors the metrics lines as scalars.

One log directory per run (``RunDir.tensorboard``), whatever the number of requeues and restarts.
A resumed run opens its writer with ``purge_step`` = the checkpoint's step + 1: TensorBoard then
hides what the previous attempt logged after that checkpoint (the resumed run logs those steps
again), so every curve reads as one run whose steps never go back and never repeat.
"""

from __future__ import annotations

import atexit
import logging
from pathlib import Path
from typing import Any

from hpctrain.rundir import EvalLine, EventLine, MetricLine, RankTimesLine, RunDir, TrainLine
from hpctrain.stragglers import excess

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
# Events after which the writer flushes: the process may be gone soon after (preemption, failure).
FLUSH_EVENTS = frozenset({"checkpoint", "preempted", "done", "failed", "straggler"})


class TensorBoardLog:
    """A sink for :class:`hpctrain.runtime.metrics.Metrics`: each line it is given becomes scalars."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer
        self.broken = False

    def __call__(self, line: MetricLine) -> None:
        if self.broken:
            return
        try:
            self._write(line)
        except Exception as error:  # a full disk must not end the training; metrics.jsonl goes on
            self.broken = True
            log.warning("TensorBoard event files: %s; no more events are written", error)

    def _write(self, line: MetricLine) -> None:
        if isinstance(line, TrainLine):
            self._scalars(TRAIN_SCALARS, line, line.step)
        elif isinstance(line, EvalLine):
            self._scalars(EVAL_SCALARS, line, line.step)
            self.writer.flush()
        elif isinstance(line, RankTimesLine) and line.compute_s:
            # How much slower the slowest rank computes than the median one: a straggler is a bump.
            worst = max(excess(line.compute_s))
            self.writer.add_scalar("ranks/slowest_over_median", worst, line.step, walltime=line.time)
        elif isinstance(line, EventLine) and line.event in FLUSH_EVENTS:
            self.writer.flush()

    def _scalars(self, tags: dict[str, str], line: TrainLine | EvalLine, step: int) -> None:
        for field, tag in tags.items():
            value = getattr(line, field)
            if value is not None:
                self.writer.add_scalar(tag, value, step, walltime=line.time)

    def close(self) -> None:
        if not self.broken:
            self.writer.close()


def open_log(run_dir: Path, rank: int, enabled: bool, resumed_step: int) -> TensorBoardLog | None:
    """Rank 0's TensorBoard sink (None elsewhere, when disabled, or without the tensorboard package).

    ``resumed_step`` is the step this attempt starts from (0 for a fresh start): events of earlier
    attempts at later steps are purged, so a restart never shows a step twice.
    """
    if rank != 0 or not enabled:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:
        log.warning("train.tensorboard is on but %s: no event files (pip install tensorboard)", error)
        return None
    folder = RunDir(run_dir).tensorboard
    earlier = folder.is_dir() and any(folder.iterdir())
    writer = SummaryWriter(str(folder), purge_step=resumed_step + 1 if earlier else None)
    board = TensorBoardLog(writer)
    # A preempted or failing rank 0 leaves through sys.exit: what is buffered is still written.
    atexit.register(board.close)
    return board
