"""`hpctrain logs`: print a job's batch log or one rank's log; `-f` follows it until the job ends."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hpctrain.errors import HpctrainError
from hpctrain.records import Run
from hpctrain.rundir import RunDir

# What one read copies at most: a log that grows by gigabytes is streamed, never held whole.
CHUNK = 1 << 20
MAX_TAIL = 64 << 20


class NoLog(HpctrainError):
    """The job is tracked but the asked-for log does not exist (yet)."""

    exit_code = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOBID", help="Job id or run id.")
    parser.add_argument("--rank", type=int, default=None, help="This rank's log instead of the batch log.")
    parser.add_argument(
        "--element", type=int, default=None, help="Array jobs: this element's log (default: the first)."
    )
    parser.add_argument("-n", "--lines", type=int, default=None, help="Only the last N lines.")
    parser.add_argument("-f", "--follow", action="store_true", help="Keep printing until the job ends.")


def log_path(run_dir: Path | RunDir, rank: int | None, element: int | None = None) -> Path:
    """The batch log, or one rank's log, of the run or of one array element (default: the first)."""
    root = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    if element is None and not root.batch_log.exists():
        started = root.elements()
        element = started[0] if started else None
    if element is not None:
        root = root.element(element)
    return root.batch_log if rank is None else root.rank_log(rank)


def run(args: argparse.Namespace) -> int:
    from hpctrain.cli.status_cmd import select
    from hpctrain.rundir import TAIL_BYTES, tail_lines

    run_ = select([args.job])[0]
    root = RunDir(run_.run_dir)
    path = log_path(root, args.rank, args.element)
    if not path.is_file() and not args.follow:
        present = [root, *(root.element(i) for i in root.elements())]
        names = [str(p.relative_to(root.root)) for where in present for p in where.log_files()]
        raise NoLog(
            f"no log {path.relative_to(root.root)} yet for job {run_.job_id}"
            f" (present: {', '.join(names[:20]) or 'none'})"
        )
    if args.lines is not None:
        for line in tail_lines(path, args.lines, limit=min(MAX_TAIL, max(TAIL_BYTES, args.lines * 512))):
            print(line)
        offset = path.stat().st_size if path.is_file() else 0
    else:
        offset = _copy(path, 0)
    if args.follow:
        _follow(run_, path, offset)
    return 0


def _copy(path: Path, offset: int) -> int:
    """Copy the file from `offset` to stdout in bounded chunks; returns the new offset."""
    if not path.is_file():  # absent yet, or a FIFO that would block the open
        return offset
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            while chunk := handle.read(CHUNK):
                sys.stdout.buffer.write(chunk)
                offset += len(chunk)
    except (FileNotFoundError, IsADirectoryError):
        return offset
    sys.stdout.flush()
    return offset


def _follow(run_: Run, path: Path, offset: int) -> None:
    from hpctrain.records import Index
    from hpctrain.watch import ended, refresh

    index = Index()
    next_poll = 0.0
    while True:
        offset = _copy(path, offset)
        now = time.monotonic()
        if now >= next_poll:
            refresh(index, [run_])
            if ended(run_):
                _copy(path, offset)
                return
            next_poll = now + 5.0
        time.sleep(0.5)
