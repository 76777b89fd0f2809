"""Which nodes of a job are there, from scontrol; and, on the login side, the end of Slurm's requeue
hold for a requeued run, above all one whose batch host died. Torch-free: the supervisor in the
allocation uses it too.

When the node running the batch script dies, nobody of the job is left to act: slurmctld marks the
node DOWN after SlurmdTimeout, requeues the job (NODE_FAIL, --requeue) and holds it PENDING with
Reason=BeginTime for its requeue delay (AuthInfo cred_expire, 120 s by default). A poll of
`hpctrain status` that sees exactly this (PENDING, BeginTime, and an attempt in attempts.jsonl that
started and never ended) adds the attempt's dead nodes to ExcNodeList (restart.exclude_failed_nodes;
a --nodelist pin to a dead node is dropped, or the job could never start) and sets StartTime=now.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterable

import msgspec

from hpctrain.errors import HpctrainError
from hpctrain.rundir import RunDir
from hpctrain.rundir.attempts import History, restart_policy
from hpctrain.scheduler.base import JobInfo, JobState
from hpctrain.scheduler.slurm import KILL_STEP
from hpctrain.scheduler.slurm.commands import command
from hpctrain.scheduler.slurm.facts import expand_hostlist, parse_record, parse_records

# scontrol node states that mean the node is gone (a drained node is alive).
DEAD_STATES = ("DOWN", "NOT_RESPONDING", "FAIL", "POWER")
# Seconds a requeued job must have been pending before it may start (see release_requeued).
SETTLE_S = 5.0
SLURMD_PORT = 6818
"""slurmd's port when scontrol names none (SlurmdPort's default)."""
CONNECT_TIMEOUT_S = 2.0
"""A node that has not completed a TCP handshake in this long is not there (the kernel answers the
handshake, so a loaded node answers in milliseconds)."""


def quiet(argv: list[str], timeout: float = 30.0) -> str:
    """A Slurm command's output, or "" when it fails: callers decide on what they could learn."""
    try:
        return command(argv, timeout)
    except HpctrainError:
        return ""


def hostnames(nodelist: str) -> list[str]:
    if not nodelist or nodelist == "(null)":
        return []
    try:
        return expand_hostlist(nodelist)
    except HpctrainError:
        return quiet(["scontrol", "show", "hostnames", nodelist]).split()


def job_record(job_ref: str) -> dict[str, str]:
    return parse_record(quiet(["scontrol", "show", "job", "-o", job_ref]).strip())


def node_records(nodes: list[str]) -> dict[str, dict[str, str]]:
    """scontrol's record of each node (State, NodeAddr, Port, ...); a node it does not know is left out."""
    if not nodes:
        return {}
    return parse_records(quiet(["scontrol", "show", "node", "-o", ",".join(nodes)]), "NodeName")


def node_states(nodes: list[str]) -> dict[str, str]:
    return {name: record.get("State", "") for name, record in node_records(nodes).items()}


def slurmd_unreachable(node: str, record: dict[str, str], tries: int = 2) -> bool:
    """Nothing accepts a connection on the node's slurmd port: its slurmd or the node itself is gone.

    Seconds, where ``srun true`` to a dead slurmd takes until its own timeout and slurmctld calls the
    node DOWN only after SlurmdTimeout. A connection that is accepted proves less (the kernel accepts
    for a stuck slurmd): callers then ask slurmd to run a task.
    """
    address = record.get("NodeAddr") or node
    port_text = record.get("Port", "")
    port = int(port_text) if port_text.isdigit() else SLURMD_PORT
    for attempt in range(tries):
        if attempt:
            time.sleep(0.2)
        try:
            with socket.create_connection((address, port), timeout=CONNECT_TIMEOUT_S):
                return False
        except OSError:
            continue
    return True


def answers(
    node: str, record: dict[str, str], timeout_s: float, job_id: str = "", het_group: int | None = None
) -> bool:
    """Does `node` run a task of the job now? A slurmd that refuses or never completes a connection
    does not, and that is known in seconds; one that accepts is asked to run `true` (srun to a stuck
    slurmd hangs: the timeout). In a heterogeneous job, `het_group` is the node's component."""
    if slurmd_unreachable(node, record):
        return False
    argv = ["srun", "--overlap", "--quiet", "--nodes=1", "--ntasks=1", f"--nodelist={node}"]
    if job_id:
        argv.append(f"--jobid={job_id}")
    if het_group is not None:
        argv.append(f"--het-group={het_group}")
    try:
        probe = subprocess.run([*argv, "true"], capture_output=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def run_on_node(
    job_id: str, node: str, argv: list[str], timeout: float, het_group: int | None = None
) -> bool:
    """Run `argv` as an overlapping one-task step of job `job_id` on `node` (beside its busy steps);
    whether it ran and exited 0 within `timeout` seconds."""
    srun = ["srun", "--overlap", f"--jobid={job_id}", "-w", node, "-N1", "-n1", "--quiet"]
    if het_group is not None:
        srun.append(f"--het-group={het_group}")
    try:
        proc = subprocess.run(srun + argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (subprocess.TimeoutExpired, OSError):
        return False
    return proc.returncode == 0


def is_dead(state: str) -> bool:
    return any(word in state for word in DEAD_STATES)


def down_nodes(nodes: list[str]) -> list[str]:
    """The nodes scontrol reports as dead (a node it does not know counts as dead)."""
    states = node_states(nodes)
    return [node for node in nodes if is_dead(states.get(node, "DOWN"))]


def slurm_timestamp(text: str) -> float:
    """`2026-12-03T04:27:48` (local time) -> epoch seconds; 0 for anything else (Unknown, None)."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return 0.0


class HeldJob(msgspec.Struct, frozen=True):
    """What the controller says of a job it holds after a requeue (from scontrol or pyslurm)."""

    submitted_at: float
    """Slurm resets SubmitTime at a requeue; 0 when unknown."""
    starts_at: float
    """When the hold ends (StartTime); 0 when unknown."""
    excluded: list[str]
    required: list[str]


def held_release(
    run: RunDir, info: JobInfo, job: Callable[[], HeldJob], dead: Callable[[list[str]], list[str]]
) -> dict[str, list[str] | None] | None:
    """Whether to start a requeued run now that Slurm holds it for its requeue delay: None, or the
    node lists to change with it (`excluded`, `required`; None leaves one as it is).

    Any run with attempts was requeued (a fresh submission has none yet): by hpctrain, whose batch
    script asked for a start 5 s on but may have ended after that, or by Slurm itself after the
    batch node died (an attempt started and never ended): then the dead nodes are excluded too.
    `job` and `dead` ask the controller, only when the run's own files say a release may be due.
    """
    if info.state is not JobState.PENDING or "BeginTime" not in info.reason:
        return None
    history = History.read(run)
    if not history.lines:
        return None
    held = job()
    # A batch script launched within a second of the old one's end is refused ("already killed": its
    # credential is not newer than the revocation) and the job FAILS: let the requeue settle first,
    # and never touch a start already near.
    now = time.time()
    if now - held.submitted_at < SETTLE_S or held.starts_at - now < SETTLE_S:
        return None
    changes: dict[str, list[str] | None] = {"excluded": None, "required": None}
    lost = history.open_attempt()
    if lost is not None and restart_policy(run).exclude_failed_nodes:
        new = [node for node in dead(lost.nodes) if node not in held.excluded]
        if new:
            changes["excluded"] = held.excluded + new
            # A job pinned to the dead node (--nodelist) could never start again: the pin goes with it.
            if set(held.required) & set(new):
                changes["required"] = [n for n in held.required if n not in new]
    return changes


def release_requeued(run: RunDir, info: JobInfo) -> bool:
    """Start a requeued run held for its requeue delay (see held_release) with scontrol; True when it did."""
    record: dict[str, str] = {}

    def held() -> HeldJob:
        record.update(job_record(info.job_id))
        return HeldJob(
            submitted_at=slurm_timestamp(record.get("SubmitTime", "")),
            starts_at=slurm_timestamp(record.get("StartTime", "")),
            excluded=hostnames(record.get("ExcNodeList", "")),
            required=hostnames(record.get("ReqNodeList", "")),
        )

    changes = held_release(run, info, held, down_nodes)
    if changes is None:
        return False
    scontrol_release(info.job_id, changes)
    return True


def scontrol_release(job_id: str, changes: dict[str, list[str] | None]) -> None:
    """Start a held job now with `scontrol update`, changing the node lists held_release named;
    an empty list is sent as `ReqNodeList=` (empty), which drops the pin."""
    update = ["scontrol", "update", f"jobid={job_id}", "StartTime=now"]
    if changes["excluded"] is not None:
        update.append("ExcNodeList=" + ",".join(changes["excluded"]))
    if changes["required"] is not None:
        update.append("ReqNodeList=" + ",".join(changes["required"]))
    quiet(update)


def cancel_job(job_id: str) -> None:
    """scancel a job (or one array element, `123_4`); a failure is left to the caller's next look."""
    subprocess.run(["scancel", job_id], check=False)


def kill_steps(job_id: str, step_ids: Iterable[str]) -> list[subprocess.Popen[bytes]]:
    """SIGKILL the tasks of each step (scancel JOB.STEP), not waited for: the caller decides how long."""
    return [
        subprocess.Popen(
            [*KILL_STEP, f"{job_id}.{step_id}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for step_id in sorted(step_ids)
    ]


def partition_nodes_left(partition: str, job_id: str, timeout: float = 10.0) -> set[str]:
    """The nodes of `partition` that the job has not excluded (scontrol); raises HpctrainError when
    the controller does not answer."""
    part = parse_record(command(["scontrol", "show", "partition", partition, "-o"], timeout))
    job = parse_record(command(["scontrol", "show", "job", job_id, "-o"], timeout))
    nodes = set(expand_hostlist(part.get("Nodes", "")))
    return nodes - set(expand_hostlist(job.get("ExcNodeList", "")))


def excluded_nodes(job_ref: str) -> list[str]:
    """The job's ExcNodeList now (empty when scontrol does not answer)."""
    return hostnames(job_record(job_ref).get("ExcNodeList", ""))


def requeue_now(job_ref: str, exclude: list[str]) -> list[str]:
    """Back to the queue at once, with ExcNodeList = `exclude`.

    Slurm would hold a requeued job ~120 s (Reason=BeginTime, its cred_expire): when the batch
    script has ended, it moves a begin time that has passed to now + cred_expire, but keeps one
    still to come. So the job may start 2 s from now (called once the job's own step has ended);
    `hpctrain status` releases it should the script's end take longer. requeuehold ends the batch
    script (SIGTERM, then SIGKILL after KillWait): the caller ignores SIGTERM (its children, these
    commands, inherit that), or the job would stay held for good.

    A refused requeuehold raises BackendError: the job has not gone back to the queue, and the caller
    must end it rather than report a requeue. Once it holds, the rest is best effort, each failure
    returned as a line for the job's log: a job left held is released by `hpctrain status`, one that
    keeps a node it should not is only slower to recover."""
    command(["scontrol", "requeuehold", job_ref])
    updates = [
        ["scontrol", "update", f"jobid={job_ref}", "StartTime=now+2"],
        ["scontrol", "release", job_ref],
    ]
    if exclude:
        updates.insert(0, ["scontrol", "update", f"jobid={job_ref}", "ExcNodeList=" + ",".join(exclude)])
    failed = []
    for argv in updates:
        try:
            command(argv)
        except HpctrainError as err:
            failed.append(str(err))
    return failed
