"""An optional W&B logger that keeps one W&B run for the whole hpctrain run, across requeues.

Every attempt (the first start, each requeue, each restart) calls ``wandb.init`` with the same id,
the hpctrain run id, and ``resume="allow"``, so W&B appends to one run instead of starting a new one
each time (what Lightning and submitit users get by default). Rank 0 only; the curves are the
ones TensorBoard gets (``tensorboard_log.scalars``). W&B refuses steps below the ones a run
already has: lines an attempt logs again after resuming from an older checkpoint are skipped here.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import msgspec

from hpctrain.rundir import ARRAY_ELEMENT, EventLine, MetricLine, RunDir, RunRecord
from hpctrain.runtime.tensorboard_log import GuardedSink
from hpctrain.spec import Train

log = logging.getLogger(__name__)

# W&B run ids: at most 64 characters, none of / \ # ? % : (anything else becomes a dash here).
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
MAX_ID = 64


def run_id(run_dir: Path) -> str:
    """The hpctrain run id (record.json), `<id>-<N>` for array element N, else the folder's name."""
    root = RunDir(run_dir)
    record = root.read_record()
    element = ARRAY_ELEMENT.key(root.root.name)
    if not isinstance(record, RunRecord) and element is not None:
        parent = RunDir(root.root.parent).read_record()
        if isinstance(parent, RunRecord):
            return _safe(f"{parent.run_id}-{element}")
    return _safe(record.run_id if isinstance(record, RunRecord) else root.root.name)


def _safe(name: str) -> str:
    return _UNSAFE.sub("-", name)[-MAX_ID:]


class WandbLog(GuardedSink):
    """Each metrics line's scalars go to one W&B run."""

    label = "W&B"

    def _write(self, line: MetricLine, step: int, values: dict[str, float]) -> None:
        if values and step >= self.target.step:
            self.target.log(values, step=step)
        elif isinstance(line, EventLine) and line.event == "preempted":
            self.target.mark_preempting()  # W&B shows the run as preempted, not crashed

    def _close(self) -> None:
        self.target.finish()  # the runtime leaves through os._exit: W&B's atexit never runs


def open_run(run_dir: Path, rank: int, train: Train) -> WandbLog | None:
    """Rank 0's W&B sink when ``train.wandb`` names a project (None elsewhere, without wandb, or
    when W&B cannot start: a warning, and the training goes on)."""
    if rank != 0 or not train.wandb:
        return None
    try:
        import wandb
    except ImportError as error:
        log.warning("train.wandb is set but %s: no W&B logging (pip install wandb)", error)
        return None
    identity = run_id(run_dir)
    config = {"train": msgspec.to_builtins(train)}
    try:
        run = wandb.init(
            project=train.wandb, id=identity, name=identity, resume="allow", dir=str(run_dir), config=config
        )
    except Exception as error:  # no network, no API key: the run trains without W&B
        log.warning("W&B did not start (%s): no W&B logging", error)
        return None
    return WandbLog(run)
