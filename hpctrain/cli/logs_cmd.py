"""`hpctrain logs`: print a job's batch log or one rank's log; `-f` follows it until the job ends."""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

from hpctrain.errors import HpctrainError
from hpctrain.rundir import RunDir
from hpctrain.runs.index import Run
from hpctrain.runs.logs import CHUNK

MAX_TAIL = 64 << 20


class NoLog(HpctrainError):
    """The job is tracked but the asked-for log does not exist (yet)."""

    exit_code = 1


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


def log_path(run_dir: Path | RunDir, rank: int | None, element: int | None = None) -> Path:
    """The batch log, or one rank's log, of the run or of one array element (default: the first)."""
    root = log_root(run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir), element)
    return root.batch_log if rank is None else root.rank_log(rank)


def log_root(root: RunDir, element: int | None = None) -> RunDir:
    """The run directory whose logs are meant: the run's, or an array element's (default: the first)."""
    if element is None and not root.batch_log.exists():
        started = root.elements()
        element = started[0] if started else None
    return root if element is None else root.element(element)


def run(args: argparse.Namespace) -> int:
    from hpctrain.rundir import TAIL_BYTES, tail_lines
    from hpctrain.runs.status import select

    run_ = select([args.job])[0]
    root = RunDir(run_.run_dir)
    if args.all_ranks or args.node is not None:
        return _merged(run_, log_root(root, args.element), args)
    path = log_path(root, args.rank, args.element)
    refuse_links(root, [path])
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


def refuse_links(root: RunDir, paths: Iterable[Path]) -> None:
    """A log that is a symbolic link, or lies in a linked folder of the run directory, is an error:
    `logs` prints files of the run, never what a link planted there points to."""
    from hpctrain.rundir import leaves

    top = root.element_of.root if root.element_of is not None else root.root
    for path in paths:
        if why := leaves(top, path):
            raise HpctrainError(f"refusing to read {path}: {why}")


def _copy(path: Path, offset: int) -> int:
    """Copy the file from `offset` to stdout in bounded chunks (absent yet, a FIFO or a link: nothing);
    returns the new offset."""
    from hpctrain.rundir import read_at

    while chunk := read_at(path, offset, CHUNK):
        sys.stdout.buffer.write(chunk)
        offset += len(chunk)
    sys.stdout.flush()
    return offset


def _follow(run_: Run, path: Path, offset: int) -> None:
    state = {"offset": offset}

    def copy_new() -> None:
        state["offset"] = _copy(path, state["offset"])

    _until_ended(run_, copy_new)


def _until_ended(run_: Run, print_new: Callable[[], None]) -> None:
    """Call `print_new` every half second until the job has ended (the scheduler is asked every 5 s),
    and once more after."""
    from hpctrain.runs.index import Index
    from hpctrain.runs.poll import ended, refresh

    index = Index()
    next_poll = 0.0
    while True:
        print_new()
        now = time.monotonic()
        if now >= next_poll:
            refresh(index, [run_])
            if ended(run_):
                print_new()
                return
            next_poll = now + 5.0
        time.sleep(0.5)


def _merged(run_: Run, root: RunDir, args: argparse.Namespace) -> int:
    """Every selected rank's log, merged by time with a rank prefix; with -f, until the job ends."""
    from hpctrain.runs.logs import LogMerger, rank_logs

    merger = LogMerger(root, None if args.rank is None else [args.rank], args.node)
    refuse_links(root, [root.logs, *rank_logs(root).values()])
    if not args.follow and not rank_logs(root):
        raise NoLog(f"no rank logs yet for job {run_.job_id} (in {root.logs})")
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
