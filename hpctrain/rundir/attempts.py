"""The restart history of a run (attempts.jsonl), read alike inside the allocation and on the login node.

Torch-free and free of Slurm calls: ``hpctrain.supervisor.supervise`` decides with it, ``hpctrain status``
shows it ("restarts: 2 of 3 (hang at step 130; node_failure node2), excluded: node2").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import msgspec

from hpctrain.rundir import (
    ATTEMPTS,
    MAX_JSON_BYTES,
    AttemptLine,
    RestartSummary,
    RunDir,
    Unreadable,
    append_line,
    decode,
    read_json,
    tail_lines,
)


class Outcome(str, Enum):  # enum.StrEnum from Python 3.11 on; the package still runs on 3.10
    """How an attempt ended (the `outcome` of an end line of attempts.jsonl)."""

    COMPLETED = "completed"
    PREEMPTED = "preempted"
    HANG = "hang"
    RANK_FAILURE = "rank_failure"
    NODE_FAILURE = "node_failure"
    PREFLIGHT = "preflight"
    """Preflight found bad nodes: requeued without them, never counted as a restart."""
    FAILED = "failed"
    """Not retried (a repeated bug, a fault restart.on leaves out, the budget spent)."""

    def __str__(self) -> str:
        return self.value


FAULTS = (Outcome.HANG, Outcome.RANK_FAILURE, Outcome.NODE_FAILURE)
"""The outcomes that use a restart: the values the spec's `restart.on` may list."""
NODE_FAULTS = (Outcome.HANG, Outcome.NODE_FAILURE)
"""Outcomes whose failed nodes go into ExcNodeList (with restart.exclude_failed_nodes; preflight always)."""

# attempts.jsonl is read from its tail: two lines per attempt, so the last 512 attempts count.
HISTORY_LINES = 1024


def read_lines(run: RunDir) -> list[AttemptLine]:
    """The decodable lines of attempts.jsonl, oldest first (a torn or foreign line is skipped)."""
    where = str(run.attempts)
    found = [
        decode(text.encode(), AttemptLine, where) for text in tail_lines(run.attempts, HISTORY_LINES, 1 << 20)
    ]
    return [line for line in found if not isinstance(line, Unreadable)]


def signature(step: int | None, error: str) -> str:
    """What makes two rank failures "the same": the step and the exception type and message."""
    return f"{error} at step {step}"


@dataclass
class History:
    """Every attempt of a run: its start line and, unless the allocation was lost, its end line."""

    lines: list[AttemptLine] = field(default_factory=list)

    @classmethod
    def read(cls, run: RunDir) -> History:
        return cls(read_lines(run))

    @property
    def ends(self) -> list[AttemptLine]:
        return [line for line in self.lines if line.event == "end"]

    def open_attempt(self) -> AttemptLine | None:
        """The last attempt that started and never ended: its allocation was lost (Slurm requeued it)."""
        ended = {line.attempt for line in self.ends}
        starts = [line for line in self.lines if line.event == "start"]
        if starts and starts[-1].attempt not in ended:
            return starts[-1]
        return None

    def start_of(self, attempt: int) -> AttemptLine | None:
        return next((line for line in self.lines if line.event == "start" and line.attempt == attempt), None)

    def next_attempt(self) -> int:
        return max((line.attempt for line in self.lines), default=-1) + 1

    def restarts(self) -> list[AttemptLine]:
        """The ends that were faults (each one used one restart of restart.max)."""
        return [line for line in self.ends if line.outcome in FAULTS]

    def excluded(self, exclude_failed_nodes: bool) -> list[str]:
        """Nodes never to run on again: those of node faults (when asked) and of preflight, in order."""
        out: list[str] = []
        for line in self.ends:
            if line.outcome == Outcome.PREFLIGHT or (exclude_failed_nodes and line.outcome in NODE_FAULTS):
                out += [node for node in line.failed_nodes if node not in out]
        return out

    def failure_signatures(self) -> set[str]:
        return {
            signature(line.step, line.error) for line in self.ends if line.outcome == Outcome.RANK_FAILURE
        }

    def append(self, run: RunDir, line: AttemptLine) -> None:
        append_line(run.attempts, line)
        self.lines.append(line)


def describe_end(line: AttemptLine) -> str:
    """`hang at step 130`, `node_failure node2`, `rank_failure at step 40`."""
    text = line.outcome
    if line.failed_nodes and line.outcome != Outcome.HANG:
        text += " " + ",".join(line.failed_nodes)
    if line.step is not None and line.outcome in (Outcome.HANG, Outcome.RANK_FAILURE):
        text += f" at step {line.step}"
    return text


def summarize(history: History, restart_max: int | None, exclude_failed_nodes: bool = True) -> RestartSummary:
    faults = history.restarts()
    last = history.ends[-1] if history.ends else None
    return RestartSummary(
        restarts=len(faults),
        max=restart_max,
        reasons=[describe_end(line) for line in faults],
        excluded=history.excluded(exclude_failed_nodes),
        attempts=history.next_attempt(),
        last_outcome=last.outcome if last else "",
        last_reason=last.reason if last else "",
    )


def summary_line(summary: RestartSummary) -> str:
    """`restarts: 2 of 3 (hang at step 130; node_failure node2), excluded: node2`."""
    of = f" of {summary.max}" if summary.max is not None else ""
    text = f"restarts: {summary.restarts}{of}"
    if summary.reasons:
        text += f" ({'; '.join(summary.reasons)})"
    if summary.excluded:
        text += f", excluded: {','.join(summary.excluded)}"
    if summary.last_outcome == Outcome.FAILED and summary.last_reason:
        text += f"; not retried: {summary.last_reason}"
    return text


class _RestartPart(msgspec.Struct, frozen=True):
    max: int = 3
    exclude_failed_nodes: bool = True


class _JobPart(msgspec.Struct, frozen=True):
    restart: _RestartPart = _RestartPart()


class _SpecPart(msgspec.Struct):
    job: _JobPart = _JobPart()


def run_summary(run: RunDir) -> RestartSummary | None:
    """The restart summary of a run directory; None when no attempt was recorded (a local run, an
    old run, a parameter-server hetjob)."""
    if ATTEMPTS not in run.names:
        return None
    history = History.read(run)
    if not history.lines:
        return None
    policy = restart_policy(run)
    return summarize(history, policy.max, policy.exclude_failed_nodes)


def restart_policy(run: RunDir) -> _RestartPart:
    """The run's restart.max and restart.exclude_failed_nodes (defaults when spec.json is unreadable)."""
    spec = read_json(run.spec, _SpecPart, max_bytes=4 * MAX_JSON_BYTES)
    return spec.job.restart if isinstance(spec, _SpecPart) else _RestartPart()
