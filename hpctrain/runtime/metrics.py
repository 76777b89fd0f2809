"""The run directory's machine-readable outputs: metrics.jsonl lines, result.json, failure reports."""

from __future__ import annotations

import json
import resource
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

METRICS = "metrics.jsonl"
RESULT = "result.json"

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
    """Appends JSON lines to ``$RUN/metrics.jsonl``; only rank 0 writes, other ranks no-op."""

    def __init__(self, run_dir: Path, rank: int) -> None:
        self.path = run_dir / METRICS
        self.rank = rank

    def write(self, kind: str, **fields: Any) -> None:
        if self.rank != 0:
            return
        record = {"kind": kind, **fields, "time": round(time.time(), 3)}
        # One write of one line per record: `status` may read while we append.
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

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


def write_result(run_dir: Path, result: dict[str, Any]) -> None:
    tmp = run_dir / (RESULT + ".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(run_dir / RESULT)


def write_failure(run_dir: Path, rank: int, error: BaseException, hostname: str = "") -> Path:
    """``failures/rank-N.json``: who failed, where, and the last traceback line."""
    frames = traceback.extract_tb(error.__traceback__)
    last = frames[-1] if frames else None
    report = {
        "rank": rank,
        "hostname": hostname or socket.gethostname(),
        "error_type": type(error).__name__,
        "message": str(error)[:2000],
        "where": f"{last.filename}:{last.lineno} in {last.name}: {last.line}" if last else None,
        "time": round(time.time(), 3),
    }
    folder = run_dir / "failures"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rank-{rank}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path
