"""Figures drawn side by side: forked processes share the run's lines already read, each draws some.

Drawing is most of a report's time and each figure is independent, so after the lines are read the
process forks one child per spare core; each child draws its share of the figures and sends back,
through a pipe, the path it wrote or the exception it raised; the parent draws its own share, then
reads every pipe to its end (a child that dies closes its pipe, so nothing waits forever) and reaps
every child. An exception of any figure is raised again in the parent, so the command reports it
as the same one line the serial path would. Where fork is missing (Windows) or one core is all
there is, the figures are drawn one after another in this process.
"""

from __future__ import annotations

import gc
import os
import pickle
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

# (index of the job, what it returned, or the exception it raised)
Outcome = tuple[int, "Path | None", "BaseException | None"]
# The message of an exception that does not pickle is sent back cut to this length.
MAX_MESSAGE = 2000


class Job(NamedTuple):
    name: str
    draw: Callable[[], Path | None]
    weight: float = 1.0
    """Its time relative to the other jobs' (to share them out evenly)."""


class FigureFailed(RuntimeError):
    """A figure's exception that could not be sent back whole (it does not pickle)."""


class DrawerDied(RuntimeError):
    """A drawing process ended without sending back what its figures gave (a signal, out of memory)."""


def cores() -> int:
    """The cores this process may run on (a batch job's share of a node, not the node's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def shares(jobs: list[Job], workers: int) -> list[list[int]]:
    """Job indices for each of `workers`, heaviest job first to the least loaded; the lightest share
    first (the parent's: it also writes the page once the others are done)."""
    loads = [0.0] * workers
    out: list[list[int]] = [[] for _ in range(workers)]
    for index in sorted(range(len(jobs)), key=lambda i: -jobs[i].weight):
        least = loads.index(min(loads))
        out[least].append(index)
        loads[least] += jobs[index].weight
    order = sorted(range(workers), key=lambda w: loads[w])
    return [sorted(out[w]) for w in order]


def draw_all(jobs: list[Job], workers: int | None = None) -> list[Path | None]:
    """What each job returns, in order; with more than one worker and fork, drawn in forked children.

    An exception of a job is raised here once every child has ended."""
    count = min(len(jobs), cores() if workers is None else workers)
    # The lines read are left alone by every collector until the figures are drawn: a collection
    # would walk them all again, and in a child it would copy every page it touches.
    gc.freeze()
    try:
        if count <= 1 or not hasattr(os, "fork"):
            outcomes = [_run(jobs, index) for index in range(len(jobs))]
        else:
            outcomes = _fork_and_draw(jobs, shares(jobs, count))
    finally:
        gc.unfreeze()
    results: list[Path | None] = [None] * len(jobs)
    for index, path, error in sorted(outcomes, key=lambda o: o[0]):
        if error is not None:
            raise error
        results[index] = path
    return results


def _fork_and_draw(jobs: list[Job], split: list[list[int]]) -> list[Outcome]:
    """The first share drawn here, each other one in a child of its own."""
    mine, *theirs = split
    sys.stdout.flush()  # what is buffered is written once, not once more by each child
    sys.stderr.flush()
    children = []
    for share in theirs:
        child = _fork(jobs, share) if share else None
        if child is None:  # no share, or no process to draw it in: drawn here
            mine += share
        else:
            children.append(child)
    outcomes = [_run(jobs, index) for index in mine]
    for pid, pipe, share in children:
        outcomes += _collect(pid, pipe, [jobs[i].name for i in share], share[0])
    return outcomes


def _run(jobs: list[Job], index: int) -> Outcome:
    try:
        return index, jobs[index].draw(), None
    except Exception as err:  # sent back (or raised by the parent) as it is: the CLI makes it one line
        return index, None, err


def _fork(jobs: list[Job], share: list[int]) -> tuple[int, int, list[int]] | None:
    """(pid, the pipe's read end, the share) of a child drawing `share`; None if it cannot be started."""
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:  # out of processes or memory: the parent draws this share itself
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:  # the child: draw, send, and leave without running the parent's cleanup
        status = 1
        try:
            os.close(read_end)
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(_encode([_run(jobs, index) for index in share]))
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    return pid, read_end, share


def _encode(outcomes: list[Outcome]) -> bytes:
    """The outcomes as the parent unpickles them; a child's traceback is printed here (HPCTRAIN_DEBUG)
    because it does not travel with the exception."""
    sent = []
    for index, path, error in outcomes:
        if error is not None:
            if os.environ.get("HPCTRAIN_DEBUG", "") not in ("", "0"):
                traceback.print_exception(error)
            try:
                pickle.loads(pickle.dumps(error))
            except Exception:  # an exception that does not survive pickling: its type and message
                message = " ".join(str(error).split())[:MAX_MESSAGE]
                error = FigureFailed(f"{type(error).__name__}: {message}")
        sent.append((index, path, error))
    return pickle.dumps(sent)


def _collect(pid: int, pipe: int, names: list[str], first: int) -> list[Outcome]:
    """What a child sent (read to the end: it closes when the child ends, however it ends), once reaped."""
    with os.fdopen(pipe, "rb") as reader:
        data = reader.read()
    _, status = os.waitpid(pid, 0)
    try:
        return list(pickle.loads(data))
    except Exception:  # nothing, or half of it: the child died while drawing
        why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        drawing = ", ".join(names)
        return [
            (first, None, DrawerDied(f"the process drawing figures {drawing} ended ({why}) without them"))
        ]
