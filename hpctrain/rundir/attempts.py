"""The restart history of a run (attempts.jsonl), read alike inside the allocation and on the login node.

Torch-free and free of Slurm calls: ``hpctrain.supervisor.supervise`` decides with it, ``hpctrain status``
shows it ("restarts: 2 of 3 (hang at step 130; node_failure node2), excluded: node2; last failure: ...").
The batch log prints the same line (:func:`summary_line`), so the two never disagree.
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

# A file or line written within this much before an attempt's start line still counts as the
# attempt's: the start line is timed on the batch node, the files are written on the ranks' nodes.
CLOCK_SLACK_S = 1.0


class Outcome(str, Enum):  # enum.StrEnum from Python 3.11 on; the package still runs on 3.10
    """How an attempt ended (the `outcome` of an end line of attempts.jsonl)."""

    COMPLETED = "completed"
    PREEMPTED = "preempted"
    """Checkpointed at Slurm's preemption signal and requeued."""
    GROW_BACK = "grow_back"
    """A shrunk job checkpointed and requeued itself to run on every node again, once a lost node
    answered: asked for by the watchdog, never counted as a restart."""
    HANG = "hang"
    RANK_FAILURE = "rank_failure"
    NODE_FAILURE = "node_failure"
    PREFLIGHT = "preflight"
    """Preflight found bad nodes: requeued without them, never counted as a restart."""
    LAUNCH = "launch"
    """The launch itself failed (the rendezvous port was taken): retried on another port, never
    counted as a restart."""
    FAILED = "failed"
    """Not retried (a repeated bug, a fault restart.on leaves out, the budget spent)."""

    def __str__(self) -> str:
        return self.value


FAULTS = (Outcome.HANG, Outcome.RANK_FAILURE, Outcome.NODE_FAILURE)
"""The outcomes that use a restart: the values the spec's `restart.on` may list."""
PROCESS_FAULTS = (Outcome.HANG, Outcome.RANK_FAILURE)
"""Faults of a process, not evidence against its node: the node is excluded only when it is blamed twice."""
BLAMES_BEFORE_EXCLUSION = 2
MAX_LAUNCH_RETRIES = 5
"""Launch faults in a row (ports taken) after which the job fails: something else holds every port."""
START_UP = "during start-up"

# attempts.jsonl is read from its tail: two lines per attempt, so the last 512 attempts count.
HISTORY_LINES = 1024


def read_lines(run: RunDir) -> list[AttemptLine]:
    """The decodable lines of attempts.jsonl, oldest first (a torn or foreign line is skipped)."""
    where = str(run.attempts)
    found = [
        decode(text.encode(), AttemptLine, where)
        for text in tail_lines(run.attempts, HISTORY_LINES, 1 << 20, below=run.top)
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
        """The ends that were faults (each one asks for one restart of restart.max)."""
        return [line for line in self.ends if line.outcome in FAULTS]

    def launch_retries(self) -> int:
        """Launch faults since the last attempt that got past its launch."""
        count = 0
        for line in reversed(self.ends):
            if line.outcome != Outcome.LAUNCH:
                break
            count += 1
        return count

    def exclusions(self, exclude_failed_nodes: bool) -> dict[str, str]:
        """Nodes never to run on again, in order, each with the outcome that excluded it; only on
        evidence: preflight failed there (always), or (when asked) its slurmd stopped answering, or
        it was blamed for a hang or a rank failure a second time. One hung or killed process is no
        evidence against its node. A node that a later attempt runs on was let back in (a lost
        node that answered again at a requeue)."""
        out: dict[str, str] = {}
        blamed: dict[str, int] = {}
        for line in self.lines:
            if line.event == "start":
                for node in line.nodes:
                    out.pop(node, None)
                continue
            named = list(line.failed_nodes)
            if line.outcome in PROCESS_FAULTS:
                for node in named:
                    blamed[node] = blamed.get(node, 0) + 1
                named = [node for node in named if blamed[node] >= BLAMES_BEFORE_EXCLUSION]
            elif line.outcome not in (Outcome.PREFLIGHT, Outcome.NODE_FAILURE):
                continue
            if line.outcome == Outcome.PREFLIGHT or exclude_failed_nodes:
                for node in named:
                    if out.get(node) in (None, Outcome.NODE_FAILURE):  # stronger evidence wins
                        out[node] = line.outcome
        return out

    def excluded(self, exclude_failed_nodes: bool) -> list[str]:
        """The nodes of :meth:`exclusions`, in order."""
        return list(self.exclusions(exclude_failed_nodes))

    def lost_nodes(self) -> list[str]:
        """Nodes excluded only because their slurmd stopped answering: the ones a job grows back
        onto once they answer again (a node blamed twice or failed by preflight stays out)."""
        return [node for node, why in self.exclusions(True).items() if why == Outcome.NODE_FAILURE]

    def failure_signatures(self) -> set[str]:
        return {
            signature(line.step, line.error) for line in self.ends if line.outcome == Outcome.RANK_FAILURE
        }

    def append(self, run: RunDir, line: AttemptLine) -> None:
        append_line(run.attempts, line)
        self.lines.append(line)


def where_in_training(step: int | None) -> str:
    """`at step 130`, or `during start-up` before the first step (the runtime's step -1)."""
    if step is None:
        return ""
    return START_UP if step < 0 else f"at step {step}"


def describe_end(line: AttemptLine) -> str:
    """`hang at step 130`, `node_failure node2`, `rank_failure during start-up`."""
    text = line.outcome
    if line.failed_nodes and line.outcome not in PROCESS_FAULTS:
        text += " " + ",".join(line.failed_nodes)
    if line.outcome in PROCESS_FAULTS and where_in_training(line.step):
        text += " " + where_in_training(line.step)
    return text


@dataclass(frozen=True)
class Policy:
    """The parts of restart: that the history is read with (spec.job.Restart has them too)."""

    max: int | None = 3
    on: tuple[str, ...] = tuple(fault.value for fault in FAULTS)
    exclude_failed_nodes: bool = True


def retried(history: History, line: AttemptLine, policy: Policy) -> bool:
    """Whether the fault `line` (one of history.restarts()) is or will be followed by a restart:
    it is in restart.on and within the budget (the first restart.max faults are)."""
    faults = history.restarts()
    number = next(i for i, fault in enumerate(faults) if fault is line) + 1
    return line.outcome in policy.on and (policy.max is None or number <= policy.max)


def budget_spent(history: History, policy: Policy) -> bool:
    """The last fault found no restart left (restart.max faults were already restarted)."""
    faults = history.restarts()
    return policy.max is not None and len(faults) > policy.max


def diagnosis(history: History, line: AttemptLine, policy: Policy) -> str:
    """A fault in words, with where the hung ranks' stacks are (moved to failures/attempt-N/stacks/
    when the attempt is retried, see supervise.set_aside_failures)."""
    text = line.reason or describe_end(line)
    if line.outcome == Outcome.HANG:
        moved = retried(history, line, policy)
        text += f"; stacks: failures/{f'attempt-{line.attempt}/' if moved else ''}stacks/"
    return text


def summarize(
    history: History, policy: Policy | None = None, planned_nodes: int | None = None
) -> RestartSummary:
    policy = policy or Policy(max=None)
    faults = history.restarts()
    last = history.ends[-1] if history.ends else None
    starts = [line for line in history.lines if line.event == "start"]
    shrunk = ""
    if planned_nodes and starts and len(starts[-1].nodes) < planned_nodes:
        verb = "running" if history.open_attempt() is starts[-1] else "ended"
        nodes = ",".join(starts[-1].nodes)
        shrunk = f"{verb} shrunk on {len(starts[-1].nodes)} of {planned_nodes} nodes ({nodes})"
    return RestartSummary(
        restarts=sum(1 for line in faults if retried(history, line, policy)),
        max=policy.max,
        reasons=[describe_end(line) for line in faults],
        excluded=history.excluded(policy.exclude_failed_nodes),
        attempts=history.next_attempt(),
        last_outcome=last.outcome if last else "",
        last_reason=last.reason if last else "",
        last_failure=diagnosis(history, faults[-1], policy) if faults else "",
        budget_spent=budget_spent(history, policy),
        shrunk=shrunk,
    )


def summary_line(summary: RestartSummary) -> str:
    """`restarts: 2 of 3 (hang at step 130; node_failure node2), excluded: node2; last failure: ...`;
    `status` and the batch log both print it."""
    of = f" of {summary.max}" if summary.max is not None else ""
    text = f"restarts: {summary.restarts}{of}"
    if summary.reasons:
        text += f" ({'; '.join(summary.reasons)})"
    if summary.excluded:
        text += f", excluded: {','.join(summary.excluded)}"
    if summary.shrunk:
        text += f"; {summary.shrunk}"
    if summary.budget_spent:
        text += f"; restart budget ({summary.max}) spent"
    if summary.last_failure:
        text += f"; last failure: {summary.last_failure}"
    if summary.last_outcome == Outcome.FAILED and summary.last_reason:
        text += f"; not retried: {summary.last_reason}"
    return text


class _RestartPart(msgspec.Struct, frozen=True):
    max: int = 3
    on: list[str] = msgspec.field(default_factory=lambda: [fault.value for fault in FAULTS])
    exclude_failed_nodes: bool = True


class _ResourcesPart(msgspec.Struct, frozen=True):
    nodes: int | None = None


class _JobPart(msgspec.Struct, frozen=True):
    restart: _RestartPart = _RestartPart()
    resources: _ResourcesPart = _ResourcesPart()


class _SpecPart(msgspec.Struct):
    job: _JobPart = _JobPart()


def run_summary(run: RunDir) -> RestartSummary | None:
    """The restart summary of a run directory; None when no attempt was recorded (a local run, an
    old run)."""
    if ATTEMPTS not in run.names:
        return None
    history = History.read(run)
    if not history.lines:
        return None
    job = _job_part(run)
    if job is None:
        # spec.json is unreadable: the budget is unknown, so only what happened is told (no `of N`,
        # restarts counted as the attempts that did start after a fault).
        summary = summarize(history, Policy(max=None))
        started = {line.attempt for line in history.lines if line.event == "start"}
        summary.restarts = sum(1 for fault in history.restarts() if fault.attempt + 1 in started)
        return summary
    policy = Policy(job.restart.max, tuple(job.restart.on), job.restart.exclude_failed_nodes)
    return summarize(history, policy, job.resources.nodes)


def _job_part(run: RunDir) -> _JobPart | None:
    """The job's restart and resources settings (the defaults without spec.json); None when spec.json
    is there but cannot be read."""
    spec = read_json(run.spec, _SpecPart, max_bytes=4 * MAX_JSON_BYTES, below=run.top)
    if spec is None:
        return _JobPart()
    return spec.job if isinstance(spec, _SpecPart) else None


def restart_policy(run: RunDir) -> _RestartPart:
    """The run's restart settings (defaults when spec.json is unreadable)."""
    return (_job_part(run) or _JobPart()).restart
