"""Preemption: a signal handler that only sets a flag, the flag file, and the all-ranks agreement.

Slurm's warning signal may reach the tasks directly (``scancel --signal=USR1 JOB``) or only the
batch shell, which then touches ``$RUN/preempt.flag``. Either way every rank must stop at the same
step, so at each step boundary the ranks all-reduce (MAX) one flag. The all-reduce for step ``k``
is started asynchronously and waited on at step ``k+1``: all ranks still agree on the same step,
and the latency of the tiny collective hides behind a step of compute.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from hpctrain.rundir import RunDir

if TYPE_CHECKING:
    import torch
    import torch.distributed as dist


def signal_number(name: str) -> signal.Signals:
    """`USR1`, `SIGUSR1` or `10` -> signal.SIGUSR1."""
    if name.isdigit():
        return signal.Signals(int(name))
    upper = name.upper()
    return signal.Signals[upper if upper.startswith("SIG") else "SIG" + upper]


def install(signal_name: str) -> threading.Event:
    """Catch the preemption signal from process start on (its default action would kill us).

    The handler only sets an event: it may run in the middle of a collective or a checkpoint write.
    """
    signalled = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        signalled.set()

    signal.signal(signal_number(signal_name), handle)
    return signalled


class StopAgreement:
    """Tracks whether this job has been asked to stop, and agrees on it across ranks."""

    def __init__(self, run_dir: Path, signalled: threading.Event, rank: int, device: torch.device) -> None:
        import torch
        import torch.distributed as dist

        self._all_reduce, self._max = dist.all_reduce, dist.ReduceOp.MAX
        self.run_dir = RunDir(run_dir)
        self.rank = rank
        self.signalled = signalled
        # The flag lives on the CPU and agrees over gloo: reading a CUDA flag each step would
        # synchronize with the GPU and stop the host from queueing the next step's kernels.
        self._group = dist.new_group(backend="gloo") if device.type == "cuda" else None
        self._flag = torch.zeros(1, dtype=torch.int32)
        self._pending: dist.Work | None = None

    def local_request(self) -> bool:
        """Signal seen by this process, or (rank 0) the batch shell's flag file exists."""
        if self.signalled.is_set():
            return True
        return self.rank == 0 and self.run_dir.preempt_flag.exists()

    def poll(self) -> bool:
        """Call once per step on every rank: True when all ranks must stop now.

        Returns the agreement started at the previous call, then starts the next one.
        """
        stop = False
        if self._pending is not None:
            self._pending.wait()
            stop = bool(self._flag.item())
        if not stop:
            self._flag.fill_(int(self.local_request()))
            self._pending = self._all_reduce(self._flag, op=self._max, group=self._group, async_op=True)
        return stop

    def drain(self) -> None:
        """Finish an outstanding agreement (before other collectives or exit)."""
        if self._pending is not None:
            self._pending.wait()
            self._pending = None


def clear_stale(run_dir: Path) -> None:
    """Rank 0 on start: a flag or request from the previous run must not stop this one."""
    run = RunDir(run_dir)
    run.preempt_flag.unlink(missing_ok=True)
    run.requeue_request.unlink(missing_ok=True)


def request_requeue(run_dir: Path, step: int) -> None:
    """Rank 0 after the preemption checkpoint: ask the batch script to `scontrol requeue`."""
    run = RunDir(run_dir)
    run.requeue_request.write_text(f"{step}\n")
    run.preempt_flag.unlink(missing_ok=True)


def clear_flag(run_dir: Path) -> None:
    """Rank 0 after a preemption without requeue: the flag has been answered."""
    RunDir(run_dir).preempt_flag.unlink(missing_ok=True)
