"""`hpctrain logs`: print a job's batch log or one rank's log; `-f` follows it until the job ends."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOBID", help="Job id or run id.")
    parser.add_argument("--rank", type=int, default=None, help="This rank's log instead of the batch log.")
    parser.add_argument("-n", "--lines", type=int, default=None, help="Only the last N lines.")
    parser.add_argument("-f", "--follow", action="store_true", help="Keep printing until the job ends.")


def log_path(run_dir: Path, rank: int | None) -> Path:
    logs = run_dir / "logs"
    if rank is None:
        return logs / "batch.log"
    return logs / f"rank-{rank}.log"


def run(args: argparse.Namespace) -> int:
    from hpctrain.records import Index
    from hpctrain.watch import tail_lines

    runs, missing = Index().find([args.job])
    if missing:
        print(
            f"hpctrain: error: {args.job} is not tracked by hpctrain (see `hpctrain list`)", file=sys.stderr
        )
        return 1
    run_ = runs[0]
    path = log_path(run_.run_dir, args.rank)
    if not path.exists() and not args.follow:
        present = sorted(p.name for p in (run_.run_dir / "logs").glob("*.log"))
        print(
            f"hpctrain: error: no log {path.name} yet for job {run_.job_id}"
            f" (present: {', '.join(present) or 'none'})",
            file=sys.stderr,
        )
        return 1
    if args.lines is not None:
        for line in tail_lines(path, args.lines):
            print(line)
        offset = path.stat().st_size if path.exists() else 0
    else:
        offset = _copy(path, 0)
    if args.follow:
        _follow(run_, path, offset)
    return 0


def _copy(path: Path, offset: int) -> int:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except FileNotFoundError:
        return offset
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return offset + len(data)


def _follow(run_: object, path: Path, offset: int) -> None:
    from hpctrain.records import Index
    from hpctrain.watch import TERMINAL_NAMES, refresh

    index = Index()
    next_poll = 0.0
    while True:
        offset = _copy(path, offset)
        now = time.monotonic()
        if now >= next_poll:
            (status,) = refresh(index, [run_])
            if status.state in TERMINAL_NAMES:
                _copy(path, offset)
                return
            next_poll = now + 5.0
        time.sleep(0.5)
