"""srun's own word on tasks that died, read from a batch log: `srun: error: node2: task 3: Killed`."""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

_SRUN_ERROR = re.compile(r"srun: error: (\S+): tasks? ([0-9,\-]+): (.+)$")
# srun's line names tasks by ranges (`tasks 0-3,7`); one larger than this is shown as written.
MAX_RANGE = 1024


class FailedTask(msgspec.Struct):
    """srun's own word on a task that died: `srun: error: node2: task 3: Killed`."""

    rank: str
    node: str
    error: str


def srun_task_errors(lines: Iterable[str], max_tasks: int = MAX_RANGE) -> list[FailedTask]:
    """The tasks that srun's error lines among `lines` name, each once (its first word counts); a
    task by its node too (steps of one node each count their tasks from 0)."""
    found: dict[tuple[str, str], FailedTask] = {}
    for line in lines:
        match = _SRUN_ERROR.search(line)
        if not match:
            continue
        node, tasks, what = match.groups()
        for task in task_ranks(tasks):
            if len(found) >= max_tasks:
                return list(found.values())
            found.setdefault((task, node), FailedTask(task, node, what.strip()))
    return list(found.values())


def task_ranks(ranges: str) -> list[str]:
    """`0-2,7` -> 0 1 2 7; a range wider than MAX_RANGE, or one that is no range, stays as written."""
    out: list[str] = []
    for part in ranges.split(","):
        low, dash, high = part.partition("-")
        if dash and _small_number(low) and _small_number(high) and 0 <= int(high) - int(low) < MAX_RANGE:
            out.extend(str(i) for i in range(int(low), int(high) + 1))
        elif part:
            out.append(part)
    return out


def _small_number(text: str) -> bool:
    return 0 < len(text) <= 18 and text.isascii() and text.isdigit()
