"""Per-rank logging: a rank-tagged log format, the torchrun log redirect, the pid file, a quick exit."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import NoReturn

from hpctrain.rundir import RunDir


def redirect(run_dir: Path, rank: int) -> Path:
    """Append this process's stdout/stderr to ``$RUN/logs/rank-N.log`` (torchrun launches).

    dup2 on the file descriptors, so output of C++ code (NCCL, gloo) and child processes lands in
    the same file as Python's.
    """
    path = RunDir(run_dir).rank_log(rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return path


def exit_now(code: int) -> NoReturn:
    """Flush what this process wrote, then leave without running C++ destructors: tearing down an
    interpreter that imported torch takes most of a second, which every restart would wait for."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def setup(rank: int, world_size: int, hostname: str) -> None:
    """Log lines carry the rank and host, so merged logs (srun without --output) stay readable."""
    logging.basicConfig(
        level=os.environ.get("HPCTRAIN_LOG_LEVEL", "INFO").upper(),
        format=f"%(asctime)s [rank {rank}/{world_size} {hostname}] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )


def write_pid(run_dir: Path, rank: int) -> Path:
    """``$RUN/pids/rank-N``: lets tests and operators find (and kill) one rank's process."""
    path = RunDir(run_dir).pid(rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{os.getpid()}\n")
    return path
