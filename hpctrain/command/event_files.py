"""TensorBoard event files from a command job's log-parsed progress, written off the output relay (torch-free
at import).

The lines :class:`~hpctrain.rundir.log_progress.LogProgress` writes into metrics.jsonl go to the Task
runtime's own sink (``hpctrain.runtime.tensorboard_log``), so both kinds of job draw the same curves into
``RunDir.tensorboard``. Its writer needs torch, which costs seconds to import: a thread started at the
first parsed line imports it and writes, so neither the script's start nor the relay of its output waits.
"""

from __future__ import annotations

import importlib.util
import queue
import sys
import threading
from pathlib import Path
from typing import Any

from hpctrain.rundir import MetricLine

SETTING = "progress.tensorboard"
CLOSE_WAIT_S = 20.0
"""At the end of an attempt, how long the lines still queued have to reach the event files."""


def tensorboard_installed() -> bool:
    """Whether the tensorboard package is there (looked up, not imported)."""
    return importlib.util.find_spec("tensorboard") is not None


class ProgressEventFiles:
    """A LogProgress sink for rank 0: each line is queued; a writer thread, started at the first line, opens
    the TensorBoard writer and passes the lines on. The first line's step is where this attempt begins:
    what an earlier attempt logged from that step on is purged (a script that resumed from step 40 draws
    on from 41; one that started over draws anew), as a Task job's restart does from its checkpoint."""

    def __init__(self, run_dir: Path, enabled: bool | None) -> None:
        self.run_dir = run_dir
        self.enabled = enabled
        self.lines: queue.SimpleQueue[MetricLine | None] = queue.SimpleQueue()
        self.writer: threading.Thread | None = None

    def __call__(self, line: MetricLine) -> None:
        if self.writer is None:
            self.writer = threading.Thread(target=self._write, name="tensorboard", daemon=True)
            self.writer.start()
        self.lines.put(line)

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Write what is queued (waiting at most `wait_s`) and close the event file."""
        if self.writer is not None:
            self.lines.put(None)
            self.writer.join(timeout=wait_s)

    def _write(self) -> None:
        from hpctrain.runtime.tensorboard_log import open_log, scalars

        first = self.lines.get()
        if first is None:
            return
        sink: Any = open_log(self.run_dir, 0, self.enabled, scalars(first)[0] - 1, setting=SETTING)
        line: MetricLine | None = first
        while line is not None:
            if sink is not None:
                sink(line)
            line = self.lines.get()
        if sink is not None:
            sink.close()


def event_files(run_dir: Path, rank: int, enabled: bool | None) -> ProgressEventFiles | None:
    """Rank 0's sink for the parsed progress (None elsewhere, when disabled, or without the tensorboard
    package: `enabled` None means "when installed", True says once that it is missing)."""
    if rank != 0 or enabled is False:
        return None
    if not tensorboard_installed():
        if enabled:
            print(
                f"hpctrain.command: {SETTING} is on but the tensorboard package is not installed: "
                "no event files (pip install tensorboard)",
                file=sys.stderr,
                flush=True,
            )
        return None
    return ProgressEventFiles(run_dir, enabled)
