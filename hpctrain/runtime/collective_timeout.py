"""How long a rank's collectives may wait, and NCCL's own timeout handling: the backstop behind the watchdog.

The watchdog (``hpctrain.supervisor.watchdog``) names a hung rank within its allowance; the process
group's timeout is set to outlast that, so a collective times out only when the watchdog is gone.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from hpctrain.rundir import RunDir
from hpctrain.spec.job import ENDING_MARGIN_S, Watchdog

NCCL_TRACE_ENTRIES = 2000
"""Collectives per rank that NCCL's flight recorder keeps, dumped into failures/ when one times out."""


def collective_timeout_s(settings: Watchdog, train_timeout_s: int) -> int:
    """The process group's timeout. With the watchdog on, it must outlast every fixed allowance
    (or a collective would time out before the watchdog could name the hung rank), and it bounds
    the job should the watchdog itself be gone: a job cannot outlive the watchdog by more than
    ENDING_MARGIN_S. A longer `train.timeout_s` is the user's choice and wins."""
    if not settings.enabled:
        return train_timeout_s
    longest = max(settings.hang_timeout, settings.startup_timeout, settings.slow_phase_timeout)
    backstop = longest + settings.node_silent_after + ENDING_MARGIN_S
    return max(train_timeout_s, math.ceil(backstop))


def nccl_env(run: RunDir, timeout_s: int, flight_recorder_names: bool = True) -> dict[str, str]:
    """NCCL's own error handling, flight recorder and dump on timeout (into failures/).

    torch 2.7 renamed the flight recorder's variables TORCH_FR_* (the old TORCH_NCCL_* names still
    work there, with a warning on every rank); `flight_recorder_names` picks the new ones."""
    buffer, dump_file = (
        ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE")
        if flight_recorder_names
        else ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    )
    return {
        # A collective that times out tears the process down instead of hanging in NCCL forever.
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        # The flight recorder: the last collectives of each rank, dumped when one times out.
        buffer: str(NCCL_TRACE_ENTRIES),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        dump_file: str(run.nccl_trace),
        # NCCL's own monitor thread kills a process whose watchdog thread is stuck: after ours.
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(timeout_s + int(ENDING_MARGIN_S)),
    }


def apply_nccl_env(run_dir: Path, timeout_s: int, backend: str, torch_version: str) -> None:
    """Set the NCCL variables the user (or the site) has not set; on NCCL, make room for the dumps."""
    run = RunDir(run_dir)
    major_minor = tuple(int(p) for p in re.findall(r"\d+", torch_version)[:2])
    for key, value in nccl_env(run, timeout_s, flight_recorder_names=major_minor >= (2, 7)).items():
        os.environ.setdefault(key, value)
    if backend == "nccl":
        run.failures.mkdir(parents=True, exist_ok=True)
