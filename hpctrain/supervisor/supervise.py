"""The supervisor's decisions: classify how a training step ended and decide what comes next.

The attempt loop (``hpctrain.supervisor.attempt_loop``) calls :meth:`Job.begin` once, at the start of
an allocation, and :meth:`Job.end` after each training step. Each returns a :class:`Decision`:
``launch`` (a new step, attempt ``attempt``, on ``nodes``, rendezvous on ``ports``: see
``rundir/ports.py``), ``requeue`` (requeuehold the job with ExcNodeList += ``exclude``), ``done`` or
``fail`` (exit ``code``). Every attempt gets an ``AttemptLine`` start before its step and an end after
it in attempts.jsonl; an attempt that started and never ended lost its allocation (Slurm requeued the
job after its batch host died) and is recorded as a node failure by the next ``begin``.

Torch-free and quick (it runs between steps, inside the allocation); it never imports the CLI. The
decision itself is :func:`decide`, a pure function of the history and what the step left behind.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from hpctrain.errors import HpctrainError
from hpctrain.rundir import (
    AttemptLine,
    FailureReport,
    HangReport,
    Heartbeat,
    PreflightReport,
    Result,
    RunDir,
    TrainLine,
    read_json,
    tail_lines,
)
from hpctrain.rundir.attempts import (
    CLOCK_SLACK_S,
    FAULTS,
    MAX_LAUNCH_RETRIES,
    History,
    Outcome,
    Policy,
    budget_spent,
    signature,
    summarize,
    summary_line,
    where_in_training,
)
from hpctrain.rundir.ports import job_ports
from hpctrain.rundir.standby_go import global_rank
from hpctrain.rundir.structs import SIGNALLED
from hpctrain.scheduler.slurm.nodes import (
    answers,
    down_nodes,
    hostnames,
    is_dead,
    job_record,
    node_records,
    partition_nodes_left,
    slurmd_unreachable,
)
from hpctrain.scheduler.slurm.task_errors import FailedTask, srun_task_errors
from hpctrain.spec.job import Restart
from hpctrain.supervisor.components import Components

# When this process started: `begin` runs first thing in an allocation, so this dates the allocation.
ALLOCATED = round(time.time(), 3)
# The batch log's line when an attempt runs in the warm standby's steps (supervisor/warm_standby.py).
WARM_STEPS = "runs in the warm standby steps"
# A node that does not run `true` within this long is lost (srun to a dead slurmd fails or hangs).
PROBE_TIMEOUT_S = 20.0
# srun's words for a task that a signal from outside ended (kill -9, the OOM killer, a crash in C).
# Its teardown of the other tasks after the first one failed says "Terminated" (SIGTERM).
KILLED_FROM_OUTSIDE = ("Killed", "Segmentation fault", "Aborted", "Bus error")
# Errors a rank raises because a peer went away: the peer is to blame, not the rank that reports.
PEER_LOST = (
    "Connection reset by peer",
    "Connection closed by peer",
    "Broken pipe",
    "Connection refused",
    "remote process exited",
    "NCCL communicator was aborted",
    "stopped answering",  # a parameter-server worker whose server is gone (runtime/ps)
)
# A rendezvous store that could not bind its port (torch's TCPStore: "... name: EADDRINUSE ...").
PORT_TAKEN = ("EADDRINUSE", "address already in use")


# ------------------------------------------------------------------------------------------------
# What a step left behind, and the decision (pure)
# ------------------------------------------------------------------------------------------------


@dataclass
class StepEnd:
    """What the batch script and the run directory say about the step that just ended."""

    status: int
    completed: bool = False
    requeue_requested: bool = False
    grow_back: bool = False
    """The requeue was the watchdog's, to grow a shrunk job back onto every node."""
    preflight_bad: list[str] = field(default_factory=list)
    preflight_requeue: bool = False
    preflight_reason: str = ""
    hang: HangReport | None = None
    failures: list[FailureReport] = field(default_factory=list)
    killed: list[FailedTask] = field(default_factory=list)
    """Tasks of this step that srun says a signal from outside ended."""
    lost_nodes: list[str] = field(default_factory=list)
    latest_step: int | None = None


# The job's exit code when a requeue would leave too few nodes to run it (docs/doctor.md).
TOO_FEW_NODES = 3


@dataclass(frozen=True)
class Decision:
    action: str  # launch | requeue | done | fail
    code: int = 0
    nodes: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    reason: str = ""
    """Why the job fails although its last attempt asked for a requeue."""
    attempt: int = 0
    """The attempt a launch starts (set by Job, not by decide)."""
    ports: tuple[int, int] = (0, 0)
    """The rendezvous and preflight ports of that attempt."""


def too_few_left(available: Collection[str] | None, exclude: Collection[str], planned: int) -> str:
    """Why a requeue without `exclude` could never start (its nodes would never be free), or "".

    `available` holds the nodes the job may still be given (its partition's, less those it already
    excludes); None when Slurm did not say, and then nothing is refused."""
    if available is None:
        return ""
    left = sorted(set(available) - set(exclude))
    if len(left) >= planned:
        return ""
    without = ",".join(sorted(set(exclude) & set(available))) or "no node"
    return f"requeueing without {without} would leave {len(left)} node(s) for a job of {planned}"


def policy_of(restart: Restart) -> Policy:
    return Policy(restart.max, tuple(restart.on), restart.exclude_failed_nodes)


def port_taken(failure: FailureReport) -> bool:
    text = failure.error.lower()
    return any(words.lower() in text for words in PORT_TAKEN)


def end_line(start: AttemptLine, outcome: str, reason: str = "", **fields: object) -> AttemptLine:
    """The end line of the attempt that `start` opened."""
    return AttemptLine(
        attempt=start.attempt,
        event="end",
        time=round(time.time(), 3),
        job_id=start.job_id,
        nodes=start.nodes,
        world_size=start.world_size,
        outcome=outcome,
        reason=reason,
        **fields,  # type: ignore[arg-type]
    )


def classify(
    end: StepEnd, attempt: AttemptLine, history: History, components: Components = Components()
) -> AttemptLine:
    """The end line of `attempt`: its outcome, why, the nodes to blame and the step it reached.
    Ranks are named by `components` ("server 0 (rank 0)" in a parameter-server job)."""

    def ended(outcome: str, reason: str = "", **fields: object) -> AttemptLine:
        return end_line(attempt, outcome, reason, **fields)

    step = end.latest_step
    if end.requeue_requested and end.grow_back:
        return ended(Outcome.GROW_BACK, "checkpointed and requeued to grow back onto every node", step=step)
    if end.requeue_requested:
        return ended(Outcome.PREEMPTED, "checkpointed at the preemption signal", step=step)
    if end.status == 0:
        return ended(Outcome.COMPLETED, "" if end.completed else "step exited 0", step=step)
    if end.preflight_bad:
        if end.preflight_requeue:
            reason = f"preflight failed on {','.join(end.preflight_bad)}"
            return ended(Outcome.PREFLIGHT, reason, failed_nodes=end.preflight_bad)
        return ended(Outcome.FAILED, f"preflight: {end.preflight_reason or 'bad nodes'}", failed_nodes=[])
    taken = [f for f in end.failures if port_taken(f)]
    if taken:
        # The launch failed, not the training: another attempt on another port, no restart spent.
        who = f"rank {taken[0].rank} on {taken[0].hostname or '?'}"
        reason = f"rendezvous port in use ({who}: EADDRINUSE); retrying on another port, no restart spent"
        return ended(Outcome.LAUNCH, reason, error=taken[0].error[:500])
    if end.hang is not None:
        hung = sorted({rank.node for rank in end.hang.hung if rank.node})
        return ended(Outcome.HANG, end.hang.summary, failed_nodes=hung, step=end.hang.step)
    if end.lost_nodes:
        reason = f"{','.join(end.lost_nodes)} stopped answering"
        return ended(Outcome.NODE_FAILURE, reason, failed_nodes=end.lost_nodes, step=step)
    reported = {f.rank for f in end.failures}
    silent = [task for task in end.killed if not task.rank.isdigit() or int(task.rank) not in reported]
    raised = [f for f in end.failures if not any(words in f.error for words in PEER_LOST)]
    if silent and not raised:
        # kill -9 and the OOM killer leave no report; the ranks that do report only lost their peer.
        ranks = ", ".join(f"{components.name(task.rank)} on {task.node}" for task in silent[:4])
        peers = f"; {len(end.failures)} other rank(s) then lost their peer" if end.failures else ""
        reason = f"{ranks}: {silent[0].error} (a signal from outside: kill -9, the OOM killer?){peers}"
        nodes = sorted({task.node for task in silent if task.node})
        return ended(Outcome.RANK_FAILURE, reason, step=step, failed_nodes=nodes)
    if end.failures:
        first = min(raised or end.failures, key=lambda f: (f.time or 0.0, f.rank))
        where = first.step if first.step is not None else step
        if signature(where, first.error) in history.failure_signatures():
            reason = f"{first.error[:200]} at step {where} again: a bug, not a fault"
            return ended(Outcome.FAILED, reason, step=where, error=first.error[:500])
        when = f" {where_in_training(where)}" if where is not None and where < 0 else ""
        reason = f"{components.name(first.rank)} on {first.hostname or '?'}{when}: {first.error[:200]}"
        nodes = [first.hostname] if first.hostname else []
        return ended(Outcome.RANK_FAILURE, reason, step=where, error=first.error[:500], failed_nodes=nodes)
    return ended(Outcome.RANK_FAILURE, f"step exited with code {end.status}", step=step)


def decide(
    history: History,
    last: AttemptLine | None,
    policy: Restart,
    allocation: list[str],
    planned: int,
    status: int = 1,
    back: Collection[str] = (),
    available: Collection[str] | None = None,
) -> Decision:
    """What comes after `last` (already in `history`; None: the allocation's first attempt).

    `allocation` holds the nodes of the allocation that answer, `planned` the nodes the job asked
    for, `status` the step's exit status (the job's, when it fails), `back` the lost nodes that
    answer again: no longer excluded, so a shrunk job's requeue grows back onto them. `available`
    holds the nodes Slurm may still give the job (see too_few_left): a requeue that would leave
    fewer than `planned` fails the job with TOO_FEW_NODES instead of leaving it pending for good.
    """
    code = status or 1
    if last is not None:
        if last.outcome == Outcome.COMPLETED:
            return Decision("done")
        if last.outcome == Outcome.FAILED:
            return Decision("fail", code)
        if last.outcome == Outcome.LAUNCH and history.launch_retries() > MAX_LAUNCH_RETRIES:
            return Decision("fail", code)
        fault = last.outcome in FAULTS
        if fault and (last.outcome not in policy.on or budget_spent(history, policy_of(policy))):
            return Decision("fail", code)
    lost = set(last.failed_nodes) if last is not None and last.outcome == Outcome.NODE_FAILURE else set()
    returned = set(back) & set(history.lost_nodes()) - lost  # a node lost just now has not come back
    excluded = [node for node in history.excluded(policy.exclude_failed_nodes) if node not in returned]
    usable = [node for node in allocation if node not in excluded and node not in lost]

    def requeue() -> Decision:
        stuck = too_few_left(available, excluded, planned)
        if stuck:
            return Decision("fail", TOO_FEW_NODES, reason=stuck)
        return Decision("requeue", 0, exclude=tuple(excluded))

    if last is not None and last.outcome in (Outcome.PREEMPTED, Outcome.GROW_BACK, Outcome.PREFLIGHT):
        return requeue()
    if len(usable) >= planned:
        return Decision("launch", nodes=tuple(usable[:planned]))
    if policy.shrink and usable and len(usable) >= (policy.min_nodes or 1):
        return Decision("launch", nodes=tuple(usable))
    return requeue()


# ------------------------------------------------------------------------------------------------
# Slurm and the run directory (impure)
# ------------------------------------------------------------------------------------------------


def allocation_nodes(job_ref: str) -> list[str]:
    """The job's nodes now (with --no-kill Slurm drops a lost node from the allocation)."""
    nodes = hostnames(job_record(job_ref).get("NodeList", ""))
    return nodes or hostnames(os.environ.get("SLURM_JOB_NODELIST", ""))


def answering_again(nodes: list[str]) -> list[str]:
    """Nodes outside the allocation that Slurm could schedule again: not DOWN, DRAINED or not
    responding, and their slurmd accepts a connection."""
    if not nodes:
        return []
    records = node_records(nodes)
    return [
        node
        for node in nodes
        if node in records
        and not is_dead(records[node].get("State", "DOWN"))
        and not slurmd_unreachable(node, records[node])
    ]


def het_groups(env: dict[str, str] | None = None) -> dict[str, int]:
    """The component of each node of a heterogeneous job ({} for any other job): srun from the
    batch script reaches a node of another component only with its --het-group."""
    env = dict(os.environ) if env is None else env
    prefix = "SLURM_JOB_NODELIST_HET_GROUP_"
    groups: dict[str, int] = {}
    for key, nodelist in sorted(env.items()):
        if key.startswith(prefix) and key[len(prefix) :].isdigit():
            for node in hostnames(nodelist):
                groups.setdefault(node, int(key[len(prefix) :]))
    return groups


def het_job_ids(env: dict[str, str] | None = None) -> list[str]:
    """A heterogeneous job's component job ids, in component order ([] for any other job): a step
    over every component has a part under each id."""
    env = dict(os.environ) if env is None else env
    prefix = "SLURM_JOB_ID_HET_GROUP_"
    found = {
        int(k[len(prefix) :]): v
        for k, v in env.items()
        if k.startswith(prefix) and k[len(prefix) :].isdigit()
    }
    return [found[group] for group in sorted(found) if found[group].isdigit()]


def lost_nodes(nodes: list[str], allocation: list[str]) -> list[str]:
    """Nodes of the attempt that are gone: out of the allocation, marked dead, or not answering."""
    records = node_records(nodes)
    gone = [n for n in nodes if n not in allocation or is_dead(records.get(n, {}).get("State", ""))]
    rest = [n for n in nodes if n not in gone]
    groups = het_groups()
    with ThreadPoolExecutor(max_workers=min(16, len(rest) or 1)) as pool:
        replies = pool.map(
            lambda node: answers(node, records.get(node, {}), PROBE_TIMEOUT_S, het_group=groups.get(node)),
            rest,
        )
        silent = [n for n, ok in zip(rest, replies, strict=True) if not ok]
    return sorted(gone + silent)


def latest_step(run: RunDir) -> int | None:
    steps = [line.step for line in run.read_metrics(head=0, tail=40) if isinstance(line, TrainLine)]
    return max(steps, default=None)


def attempt_task_errors(run: RunDir, start: AttemptLine) -> list[FailedTask]:
    """srun's error lines about the tasks of the attempt: those after its line in the batch log,
    each named by its global rank (a warm attempt runs a step per node, whose tasks count from 0).

    Of a warm attempt, only the first failed step's: standby_steps ends the other nodes' steps once
    that one has ended (its srun has written its errors by then), and srun kills their tasks with
    SIGKILL, which it reports as `Killed` like a kill -9 from outside."""
    marker = f"hpctrain: attempt {start.attempt} on "
    for log in run.batch_logs():
        lines = tail_lines(log, 400)
        starts = [i for i, line in enumerate(lines) if line.startswith(marker)]
        if starts:
            after = lines[starts[-1] + 1 :]
            tasks = srun_task_errors(after)
            if f"hpctrain: attempt {start.attempt} {WARM_STEPS}" not in after:
                return tasks
            first_node = tasks[0].node if tasks else ""
            return global_ranks([task for task in tasks if task.node == first_node], start)
    return []


def global_ranks(tasks: list[FailedTask], start: AttemptLine) -> list[FailedTask]:
    """Tasks of per-node steps renamed by global rank: node index x tasks per node + local task."""
    nodes = list(start.nodes)
    per_node = (start.world_size or 0) // len(nodes) if nodes else 0
    renamed = []
    for task in tasks:
        if task.node in nodes and task.rank.isdigit() and per_node:
            rank = global_rank(nodes, task.node, per_node, int(task.rank))
            task = FailedTask(str(rank), task.node, task.error)
        renamed.append(task)
    return renamed


def this_attempt(report: object, start: AttemptLine) -> bool:
    """A report written during the attempt (older ones are a previous attempt's, not yet moved)."""
    when = getattr(report, "time", None)
    return when is None or when >= start.time - CLOCK_SLACK_S


def written_during(path: Path, start: AttemptLine) -> bool:
    """A file last written during the attempt (as `this_attempt`, by its modification time)."""
    try:
        return path.stat().st_mtime >= start.time - CLOCK_SLACK_S
    except OSError:
        return False


def read_step_end(run: RunDir, status: int, start: AttemptLine, allocation: list[str]) -> StepEnd:
    """What the run directory and Slurm say about how the attempt's step ended."""
    result = run.read_result()
    end = StepEnd(
        status=status,
        completed=isinstance(result, Result) and result.status == "completed" and result.step >= result.steps,
        requeue_requested=run.requeue_request.exists(),
        grow_back=written_during(run.grow_back_request, start),
        latest_step=latest_step(run),
    )
    if status == 0 or end.requeue_requested:
        return end
    # A stale report (an earlier attempt's) is not read at all: it can be megabytes.
    preflight = run.read_preflight() if written_during(run.preflight_report, start) else None
    if isinstance(preflight, PreflightReport) and preflight.bad_nodes:
        end.preflight_bad = preflight.bad_nodes
        end.preflight_requeue = preflight.requeue
        end.preflight_reason = preflight.no_requeue_because or ""
        return end
    hang = read_json(run.hang_report, HangReport)
    if isinstance(hang, HangReport) and this_attempt(hang, start):
        end.hang = hang
    reports = [f for f in run.read_failures() if isinstance(f, FailureReport)]
    reports = [f for f in reports if f.attempt in (None, start.attempt) and this_attempt(f, start)]
    # A rank that a signal ended cannot report itself: srun names it, or the fork launcher does.
    end.failures = [f for f in reports if f.error_type != SIGNALLED]
    signalled = [FailedTask(str(f.rank), f.hostname, f.message) for f in reports if f.error_type == SIGNALLED]
    end.killed = [t for t in attempt_task_errors(run, start) + signalled if t.error in KILLED_FROM_OUTSIDE]
    end.lost_nodes = lost_nodes(start.nodes, allocation)
    return end


def fault_time(run: RunDir, start: AttemptLine, end: StepEnd | None = None) -> float | None:
    """When the attempt's fault happened, as its evidence dates it: the hung ranks' last advance,
    the first failure report, else the first rank of the attempt to fall silent in the heartbeats
    (its background thread stops ticking when the process dies or stops). None without evidence."""
    found: list[float] = []
    if end is not None and end.hang is not None:
        found += [end.hang.time - (rank.idle_s or 0.0) for rank in end.hang.hung]
    if end is not None and end.failures:
        found += [f.time for f in end.failures if f.time is not None]
    if not found:
        beats = [b for b in run.read_heartbeats() if isinstance(b, Heartbeat) and b.attempt == start.attempt]
        found += [min(rank.time for rank in beat.ranks.values()) for beat in beats if beat.ranks]
    after_start = [when for when in found if when >= start.time - CLOCK_SLACK_S]
    return round(min(after_start), 3) if after_start else None


def set_aside_failures(run: RunDir, attempt: int) -> None:
    """failures/*.json and failures/stacks/ of an attempt that is retried go to failures/attempt-N/:
    the next attempt starts from a clean failures/, and the evidence stays where status says it is
    (the last attempt's, when the job fails, stay in place)."""
    if not run.failures.is_dir():
        return
    names = [p for p in run.failures.iterdir() if p.suffix == ".json" and p.is_file()]
    stacks = run.stacks.is_dir() and not run.stacks.is_symlink()
    if not names and not stacks:
        return
    folder = run.failed_attempt(attempt)
    folder.mkdir(exist_ok=True)
    for path in names:
        path.replace(folder / path.name)
    if stacks and not (folder / run.stacks.name).exists():
        run.stacks.replace(folder / run.stacks.name)


def start_line(attempt: int, job_id: str, nodes: tuple[str, ...], tasks_per_node: int) -> AttemptLine:
    return AttemptLine(
        attempt=attempt,
        event="start",
        time=round(time.time(), 3),
        job_id=job_id,
        nodes=list(nodes),
        world_size=len(nodes) * tasks_per_node,
    )


# ------------------------------------------------------------------------------------------------
# The two calls of the attempt loop
# ------------------------------------------------------------------------------------------------


def available_nodes(job_ref: str) -> list[str] | None:
    """The nodes Slurm may still give the job: its partition's, less its ExcNodeList; None when
    the controller does not say (then no requeue is refused for want of nodes)."""
    partition = os.environ.get("SLURM_JOB_PARTITION", "")
    if not partition or "," in partition:
        return None
    try:
        return sorted(partition_nodes_left(partition, job_ref))
    except HpctrainError:
        return None


@dataclass
class Job:
    run: RunDir
    job_ref: str
    policy: Restart
    planned: int
    tasks_per_node: int
    components: Components = field(default_factory=Components)

    @classmethod
    def from_env(cls) -> Job:
        from hpctrain import spec

        run = RunDir(Path(os.environ["HPCTRAIN_RUN_DIR"]))
        resolved = spec.loads(run.spec.read_bytes())
        job = resolved.job
        tasks = 1 if job.launcher == "torchrun" else job.resources.ntasks_per_node
        ref = os.environ.get("HPCTRAIN_JOB_REF") or os.environ.get("SLURM_JOB_ID", "")
        return cls(run, ref, job.restart, job.resources.nodes, tasks, Components.of(resolved))

    def act(
        self, history: History, last: AttemptLine | None, status: int = 1, allocated: float | None = None
    ) -> Decision:
        """Decide after `last` (not yet in `history`: it is recorded here, as a failure when the
        requeue it asks for could never start), record the next start when launching (with
        `allocated`, when the allocation began, on its first), and return the decision."""
        allocation = allocation_nodes(self.job_ref)
        if last is not None and last.outcome == Outcome.NODE_FAILURE:
            allocation = [n for n in allocation if n not in last.failed_nodes]
        back = answering_again(history.lost_nodes())
        seen = History([*history.lines, last]) if last is not None else history
        decision = decide(seen, last, self.policy, allocation, self.planned, status, back)
        if decision.action == "requeue" and decision.exclude:
            available = available_nodes(self.job_ref)
            decision = decide(seen, last, self.policy, allocation, self.planned, status, back, available)
        if last is not None:
            if decision.reason:
                last.outcome, last.reason = Outcome.FAILED, f"{last.reason}; {decision.reason}".lstrip("; ")
            history.append(self.run, last)
            why = f" ({last.reason})" if last.reason else ""
            print(f"hpctrain: attempt {last.attempt} ended: {last.outcome}{why}", file=sys.stderr, flush=True)
        if last is not None and decision.action in ("launch", "requeue"):
            set_aside_failures(self.run, last.attempt)
        attempt = history.next_attempt()
        if decision.action == "launch":
            start = start_line(attempt, self.job_ref, decision.nodes, self.tasks_per_node)
            start.allocated = allocated
            history.append(self.run, start)
        if history.restarts() or (decision.action == "launch" and len(decision.nodes) < self.planned):
            # The very line `hpctrain status` shows (attempts.summary_line): the two never disagree.
            summary = summarize(history, policy_of(self.policy), self.planned)
            print(f"hpctrain: {decision.action}; {summary_line(summary)}", file=sys.stderr, flush=True)
        return replace(decision, attempt=attempt, ports=self.ports(attempt))

    def ports(self, attempt: int) -> tuple[int, int]:
        """This attempt's rendezvous ports, outside this (the batch) node's ephemeral range."""
        return job_ports(os.environ.get("SLURM_JOB_ID", "") or self.job_ref, attempt)

    def begin(self) -> Decision:
        """Start of an allocation: an attempt left open lost its allocation (a node failure)."""
        history = History.read(self.run)
        lost = history.open_attempt()
        last = None
        if lost is not None:
            down = sorted(down_nodes(lost.nodes))
            reason = "allocation lost, Slurm requeued the job"
            reason += f"; {','.join(down)} down" if down else "; no node of it is down now"
            last = end_line(lost, Outcome.NODE_FAILURE, reason, failed_nodes=down, step=latest_step(self.run))
            last.fault_time = fault_time(self.run, lost, StepEnd(status=1, failures=self._reports(lost)))
        return self.act(history, last, allocated=ALLOCATED)

    def _reports(self, start: AttemptLine) -> list[FailureReport]:
        """The failure reports the ranks of `start` wrote (the survivors of a lost node)."""
        reports = [f for f in self.run.read_failures() if isinstance(f, FailureReport)]
        return [f for f in reports if f.attempt in (None, start.attempt) and this_attempt(f, start)]

    def end(self, status: int) -> Decision:
        history = History.read(self.run)
        start = history.open_attempt()
        if start is None:  # no attempt recorded (a hand-edited file): end as the step did
            return Decision("done" if status == 0 else "fail", status, attempt=history.next_attempt())
        allocation = allocation_nodes(self.job_ref)
        step_end = read_step_end(self.run, status, start, allocation)
        line = classify(step_end, start, history, self.components)
        if line.outcome in FAULTS:
            line.fault_time = fault_time(self.run, start, step_end)
        return self.act(history, line, status)
