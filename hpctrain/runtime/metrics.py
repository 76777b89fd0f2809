"""The runtime's writers of metrics lines, result.json and failure reports (shapes in hpctrain.rundir)."""

from __future__ import annotations

import os
import resource
import socket
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import torch

from hpctrain.rundir import FailureReport, MetricLine, Result, RunDir, append_line, metric_line

# Dense bf16 tensor-core peaks (FLOP/s) by device-name fragment, for MFU; unknown GPUs get no MFU.
PEAK_BF16_FLOPS = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "A10": 125e12,
    "V100": 125e12,
}


class Metrics:
    """Appends lines to ``metrics.jsonl``; only rank 0 writes, other ranks no-op.

    With ``worker``, the lines go to that parameter-server worker's own file, whatever the rank.
    """

    def __init__(self, run_dir: Path, rank: int, worker: int | None = None) -> None:
        run = RunDir(run_dir)
        self.path = run.metrics if worker is None else run.worker_metrics(worker)
        self.rank = rank
        self.enabled = rank == 0 or worker is not None
        # Also given every line written (TensorBoard's event files, runtime/tensorboard_log.py).
        self.sinks: list[Callable[[MetricLine], None]] = []
        if self.enabled and worker is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, kind: str | MetricLine, **fields: Any) -> None:
        """``write("train", step=..., loss=...)`` or ``write(TrainLine(...))``: one line, one write."""
        if not self.enabled:
            return
        line = metric_line(kind, **fields) if isinstance(kind, str) else kind
        if line.time is None:
            line.time = round(time.time(), 3)
        # One write of one line per record: `status` may read while we append.
        append_line(self.path, line)
        for sink in self.sinks:
            sink(line)

    def event(self, event: str, **fields: Any) -> None:
        self.write("event", event=event, **fields)


def peak_mem_mb(device: torch.device) -> float:
    """Peak device memory (CUDA) or the process's peak resident set size (CPU), in MB."""
    if device.type == "cuda":
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    # ru_maxrss is KiB on Linux, bytes on macOS.
    scale = 1 if sys.platform == "darwin" else 1024
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20, 1)


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for fragment, flops in PEAK_BF16_FLOPS.items():
        if fragment in name:
            return flops
    return None


def write_result(run_dir: Path, result: Result | dict[str, Any]) -> Path:
    """``result.json``, atomically; a dict must have the fields of :class:`hpctrain.rundir.Result`."""
    if isinstance(result, dict):
        result = msgspec.convert(result, Result, strict=False)
    return RunDir(run_dir).write_result(result)


# The attribute the training loop's caller sets on an exception: the step it was computing.
STEP_ATTRIBUTE = "hpctrain_step"


def failure_report(rank: int, error: BaseException, hostname: str = "") -> FailureReport:
    """Who failed, where, at which step of which attempt, and the last traceback line."""
    frames = traceback.extract_tb(error.__traceback__)
    last = frames[-1] if frames else None
    attempt = os.environ.get("HPCTRAIN_ATTEMPT", "")
    return FailureReport(
        step=getattr(error, STEP_ATTRIBUTE, None),
        attempt=int(attempt) if attempt.isdigit() else None,
        rank=rank,
        hostname=hostname or socket.gethostname(),
        error_type=type(error).__name__,
        message=str(error)[:2000],
        where=f"{last.filename}:{last.lineno} in {last.name}: {last.line}" if last else None,
        time=round(time.time(), 3),
    )


def write_failure(run_dir: Path, rank: int, error: BaseException, hostname: str = "") -> Path:
    """``failures/rank-N.json`` for this exception."""
    return RunDir(run_dir).write_failure(failure_report(rank, error, hostname))
