"""`hpctrain logs`: print a job's batch log or one rank's log; `-f` follows it until the job ends."""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpctrain import api


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOBID", help="Job id or run id.")
    parser.add_argument("--rank", type=int, default=None, help="This rank's log instead of the batch log.")
    parser.add_argument(
        "--all-ranks",
        action="store_true",
        help="Every rank's log merged by time, each line prefixed [rank N] (with --rank: only that rank).",
    )
    parser.add_argument(
        "--node", default=None, help="The merged logs of the ranks on this node (implies --all-ranks)."
    )
    parser.add_argument(
        "--element", type=int, default=None, help="Array jobs: this element's log (default: the first)."
    )
    parser.add_argument("-n", "--lines", type=int, default=None, help="Only the last N lines.")
    parser.add_argument("-f", "--follow", action="store_true", help="Keep printing until the job ends.")


def run(args: argparse.Namespace) -> int:
    from hpctrain import api

    run_ = api.find_run(args.job)
    if args.all_ranks or args.node is not None:
        return _merged(run_, args)
    path = run_.log_path(args.rank, args.element)
    if not path.is_file() and not args.follow:
        raise api.NoLog(run_.missing_log(path))
    if args.lines is not None:
        for line in api.log_tail(path, args.lines):
            print(line)
        offset = path.stat().st_size if path.is_file() else 0
    else:
        offset = _copy(path, 0)
    if args.follow:
        _follow(run_, path, offset)
    return 0


def _copy(path: Path, offset: int) -> int:
    """Copy the file from `offset` to stdout in bounded chunks (absent yet, a FIFO or a link: nothing);
    returns the new offset."""
    from hpctrain import api

    while chunk := api.log_chunk(path, offset):
        sys.stdout.buffer.write(chunk)
        offset += len(chunk)
    sys.stdout.flush()
    return offset


def _follow(run_: api.Run, path: Path, offset: int) -> None:
    state = {"offset": offset}

    def copy_new() -> None:
        state["offset"] = _copy(path, state["offset"])

    _until_ended(run_, copy_new)


def _until_ended(run_: api.Run, print_new: Callable[[], None]) -> None:
    """Call `print_new` every half second until the job has ended (the scheduler is asked every 5 s),
    and once more after."""
    next_poll = 0.0
    while True:
        print_new()
        now = time.monotonic()
        if now >= next_poll:
            if run_.ended():
                print_new()
                return
            next_poll = now + 5.0
        time.sleep(0.5)


def _merged(run_: api.Run, args: argparse.Namespace) -> int:
    """Every selected rank's log, merged by time with a rank prefix; with -f, until the job ends."""
    merger = run_.merged_logs(args.rank, args.node, args.element)
    if not args.follow and not run_.rank_logs(args.element):
        raise api.NoLog(f"no rank logs yet for job {run_.job_id} (in {merger.root.logs})")
    out = sys.stdout.buffer

    def print_new(final: bool = False) -> None:
        for line in merger.drain(final):
            out.write(line + b"\n")
        out.flush()

    if args.follow:
        _until_ended(run_, print_new)
        print_new(final=True)
    else:
        merged: Iterable[bytes] = merger.drain(final=True)
        if args.lines is not None:  # the last N merged lines, in a bounded window
            merged = deque(merged, maxlen=max(0, args.lines))
        for line in merged:
            out.write(line + b"\n")
        out.flush()
    return 0
