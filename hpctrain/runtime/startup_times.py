"""Where a rank's start-up goes: wall-clock marks from its process start to the end of its first step.

A restart's cost is mostly start-up, and start-up has parts that different levers shorten: the
interpreter with the torch-free part of the runtime, ``import torch``, preflight, the runtime's
torch modules (DCP and DTensor among them), the rendezvous, building the model (DDP imports
``torch._dynamo`` there), the restore and the first step. Each part is the time from the previous
mark to its own; a part that did not happen (preflight in a warm attempt) is absent. Rank 0 writes
them once, as a ``startup`` event after its first step, with the absolute time it counts from
(``began``): its process start, or for a warm standby the moment it took the attempt
(``HPCTRAIN_TAKEN_AT``). Torch-free: the first marks come before torch is imported.
"""

from __future__ import annotations

import os
import time

TAKEN_AT = "HPCTRAIN_TAKEN_AT"
"""Set by a warm standby when it takes an attempt: its process started long before."""
STARTED_AT = "HPCTRAIN_STARTED_AT"
"""Set by ``fork_ranks`` in the ranks it forks: their start-up began with its process, not theirs."""

PARTS = (
    "interpreter",
    "torch",
    "preflight",
    "runtime_imports",
    "rendezvous",
    "build",
    "restore",
    "first_step",
)
"""The marks in the order a cold rank passes them."""

_marks: dict[str, float] = {}


def process_started() -> float:
    """This process's start, in Unix time: /proc's start time after boot plus the boot time, or the
    first mark's time where /proc cannot say."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of stat(5), counted after the ")" that ends the name
        with open("/proc/stat", "rb") as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith(b"btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return min(_marks.values(), default=time.time())


def began() -> float:
    """What the parts count from: the standby's take of the attempt, else the start of the process
    that forked this rank, else this process's start."""
    for variable in (TAKEN_AT, STARTED_AT):
        try:
            return float(os.environ[variable])
        except (KeyError, ValueError):
            continue
    return process_started()


def mark(part: str) -> None:
    """This part ends now; only its first mark counts (preflight then the runtime both reach some)."""
    _marks.setdefault(part, time.time())


def parts(since: float) -> dict[str, float]:
    """Seconds of each part marked so far, in the order passed: each from the mark before it, the
    first from `since`."""
    previous = since
    out: dict[str, float] = {}
    for part, at in sorted(_marks.items(), key=lambda item: item[1]):
        out[part] = round(max(0.0, at - previous), 3)
        previous = max(previous, at)
    return out


def summary() -> dict[str, float | bool]:
    """The `startup` event's detail: `began`, `warm` and the seconds of each part."""
    since = began()
    return {"began": round(since, 3), "warm": bool(os.environ.get(TAKEN_AT)), **parts(since)}
