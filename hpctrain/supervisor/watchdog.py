"""``python -m hpctrain.supervisor.watchdog --step-pid PID``: find the hung rank, name it, end the step.

Started by the batch script beside each training step (torch-free, so it starts in a moment and
never competes with the ranks for a GPU). Every poll it reads this attempt's node heartbeats
(``heartbeats/node-*.json``, written by one rank per node, see ``runtime/heartbeat.py``
and ``rundir/slots.py``) and:

* declares a hang when a rank's step has not advanced for its allowance (``supervisor/hang_rule.py``);
  then it collects every rank's Python stacks into ``failures/stacks/`` (py-spy and faulthandler,
  on each node; other nodes through ``srun --overlap``), names the rank(s) that did not advance in
  ``failures/hang.json``, ends the step and exits 0;
* ends the step early when ranks are gone (a failure report of this attempt, or a node whose file
  went silent and that does not answer) and the step has not ended by itself: a lost node then
  costs seconds, not Slurm's SlurmdTimeout;
* in a parameter-server job (``supervisor/components.py``), a hung or dead worker is not a hang of
  the job: it ends that worker's process alone, the servers drop it, and the others train on. It
  says so in the batch log ("worker 1 (rank 2) on node2 lost ...") and watches the rest.

It exits when the step's process (``--step-pid``, the srun) has ended.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from hpctrain import spec
from hpctrain.rundir import FailureReport, HangReport, Heartbeat, Result, RunDir, slots, write_json
from hpctrain.rundir.attempts import History, where_in_training
from hpctrain.scheduler.slurm.nodes import answers as node_answers
from hpctrain.scheduler.slurm.nodes import kill_steps, node_records, run_on_node
from hpctrain.spec.job import Watchdog
from hpctrain.supervisor import hang_rule, stacks, supervise
from hpctrain.supervisor.components import Components
from hpctrain.supervisor.hang_rule import Seen

GONE_GRACE_S = 2.0
"""Ranks are gone: give the step this long to end by itself (srun's own kill-on-bad-exit)."""
GONE_END_WAIT_S = 3.0
"""After scancel of a step whose ranks are gone: srun waits for a lost node's tasks for good, so
it is killed soon (the live nodes' tasks end within a second of the scancel)."""
TICK_S = 0.5
"""How often the step's end and new failure reports are looked for (a readdir of failures/)."""
SRUN_TIMEOUT_S = 45.0
PROBE_TIMEOUT_S = 15.0
REPROBE_S = 30.0
END_WAIT_S = 15.0
MAX_STEP_SAMPLES = 1024
SHOWN_RANKS = 4


def say(message: str) -> None:
    """One line into the batch log (the watchdog's stdout)."""
    print(f"hpctrain watchdog: {message}", flush=True)


@dataclass
class Context:
    run: RunDir
    settings: Watchdog
    attempt: int
    job_id: str
    node: str
    signum: signal.Signals
    started: float = field(default_factory=time.time)
    het_groups: dict[str, int] = field(default_factory=dict)
    """A heterogeneous job's node -> component (srun reaches another component's node with it)."""
    component_jobs: list[str] = field(default_factory=list)
    """A heterogeneous job's component job ids (SLURM_JOB_ID_HET_GROUP_N); [] for other jobs."""
    missing: list[str] = field(default_factory=list)
    """Lost nodes this (shrunk) attempt runs without; when one answers again, the job checkpoints
    and requeues to grow back onto it (empty: not shrunk, or no requeue to grow back with)."""
    components: Components = field(default_factory=Components)
    lost: set[int] = field(default_factory=set)
    """Expendable ranks given up on (parameter-server workers): no longer watched."""


# ----------------------------------------------------------------------------------------------
# Diagnosis (pure)
# ----------------------------------------------------------------------------------------------


def diagnose(ranks: list[Seen], waits: dict[int, str]) -> tuple[list[Seen], list[Seen]]:
    """(hung, waiting): the ranks that did not advance, and the others.

    A rank that stopped ticking (STOPped, frozen) is hung; else the ranks behind the others' step;
    else, at one step, the ranks that are not waiting in a collective while others are. When
    nothing tells them apart (a deadlock inside a collective), every rank is named.
    """
    silent = [r for r in ranks if not r.responsive]
    if silent:
        hung = silent
    else:
        lowest = min((r.step for r in ranks), default=0)
        hung = [r for r in ranks if r.step == lowest]
        if len(hung) == len(ranks):
            running = [r for r in ranks if not waits.get(r.rank) and r.phase != "collective"]
            hung = running if 0 < len(running) < len(ranks) else ranks
    named = {r.rank for r in hung}
    return hung, [r for r in ranks if r.rank not in named]


def _rank_text(seen: Seen, components: Components) -> str:
    detail = seen.phase
    if not seen.responsive:
        detail += f"; not responding for {seen.silent_s:.0f} s"
    return f"{components.name(seen.rank)} on {seen.node} hung {where_in_training(seen.step)} ({detail})"


def _wait_text(seen: Seen, waits: dict[int, str]) -> str:
    if waits.get(seen.rank):
        return f"the {waits[seen.rank]}"
    return "a collective" if seen.phase == "collective" else f"phase {seen.phase}"


def summary(
    hung: list[Seen], waiting: list[Seen], waits: dict[int, str], components: Components = Components()
) -> str:
    """ "rank 2 on node2 hung at step 130 (backward), others waiting in the all-reduce"; a rank that
    has not finished its first step hung "during start-up"; "server 0 (rank 0) on node1 hung ..."
    in a parameter-server job."""
    text = ", ".join(_rank_text(r, components) for r in hung[:SHOWN_RANKS])
    if len(hung) > SHOWN_RANKS:
        text += f" and {len(hung) - SHOWN_RANKS} more ranks"
    if not waiting:
        return text + ("" if len(hung) == 1 else "; no rank is ahead of the others")
    places: dict[str, list[int]] = {}
    for seen in waiting:
        places.setdefault(_wait_text(seen, waits), []).append(seen.rank)
    if len(places) == 1:
        return f"{text}, others waiting in {next(iter(places))}"
    groups = "; ".join(
        f"{', '.join(map(str, ranks[:SHOWN_RANKS]))} in {place}" for place, ranks in places.items()
    )
    return f"{text}, others waiting (ranks {groups})"


# ----------------------------------------------------------------------------------------------
# Acting on the cluster
# ----------------------------------------------------------------------------------------------


def running(pid: int) -> bool:
    """The process runs (a zombie its parent has not reaped yet does not): the step's srun, a rank."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _run_on(ctx: Context, node: str, argv: list[str], timeout: float) -> bool:
    return run_on_node(ctx.job_id, node, argv, timeout, ctx.het_groups.get(node))


def _collect(ctx: Context, node: str, stopped: frozenset[int]) -> None:
    """One node's stacks: here, or on the node through srun (its ranks' pids live there)."""
    if node != ctx.node and ctx.job_id:
        command = [sys.executable, "-m", "hpctrain.supervisor.watchdog", "--collect-node", node]
        command += ["--stopped", ",".join(map(str, sorted(stopped)))] if stopped else []
        if _run_on(ctx, node, command, SRUN_TIMEOUT_S):
            return
        if not slots.slot_path(ctx.run.root, ctx.job_id, ctx.attempt, node).exists():
            say(f"no stacks from {node}: it did not answer within {SRUN_TIMEOUT_S:.0f} s")
            return
    stacks.collect_node(ctx.run, ctx.job_id, ctx.attempt, node, ctx.signum, stopped)


def collect_stacks(
    ctx: Context, nodes: Iterable[str], stopped: frozenset[int] = frozenset()
) -> dict[int, str]:
    """Every rank's stacks into failures/stacks/, all nodes at once; returns what each rank waits in.
    `stopped`: the ranks found not running (not asked for a faulthandler dump)."""
    chosen = sorted(set(nodes))
    with ThreadPoolExecutor(max_workers=min(32, max(1, len(chosen)))) as pool:
        list(pool.map(lambda node: _collect(ctx, node, stopped), chosen))
    return {
        rank: stacks.waiting_in(stacks.read_text(ctx.run.rank_stacks(rank)))
        for rank in stacks.dumped(ctx.run)
    }


def end_step(
    ctx: Context, step_pid: int, step_ids: set[str], ranks: list[Seen], wait_s: float = END_WAIT_S
) -> None:
    """Kill the step's tasks (scancel JOB.STEP); without Slurm, or if that fails, the step's
    process and the ranks of this node."""
    here = [r.pid for r in ranks if r.pid and r.node == ctx.node]
    if ctx.job_id and step_ids:
        # Not waited for: scancel of a step with a lost node blocks until slurmctld gives up on that
        # node (MessageTimeout, 10 s by default), while the live nodes' tasks end in a moment.
        # A hetjob's step has a part in each component, each under the component's own job id.
        jobs = ctx.component_jobs or [ctx.job_id]
        cancels = [cancel for job in jobs for cancel in kill_steps(job, step_ids)]
        # This node's ranks ending tells that the scancel has been carried out (the other live
        # nodes' stepds get it at the same moment); only srun, waiting on a lost node, is left.
        deadline = time.monotonic() + wait_s
        while running(step_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
            if here and not any(running(pid) for pid in here):
                break
        for cancel in cancels:  # slurmctld has the request; the client need not linger
            if cancel.poll() is None:
                cancel.kill()
            cancel.wait()
        if not running(step_pid):
            return
        say(f"the step (pid {step_pid}) did not end after scancel: killing it")
    for pid in [*here, step_pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# ----------------------------------------------------------------------------------------------
# Guarding the step until it ends
# ----------------------------------------------------------------------------------------------


def this_attempt(ctx: Context, found: Iterable[object]) -> list[Heartbeat]:
    """Node files of this attempt, written since the watchdog started (older ones are a past step's),
    without the ranks given up on."""
    beats = [
        b
        for b in found
        if isinstance(b, Heartbeat) and (b.attempt or 0) == ctx.attempt and b.time >= ctx.started - 2.0
    ]
    if not ctx.lost:
        return beats
    return [
        msgspec.structs.replace(b, ranks={r: beat for r, beat in b.ranks.items() if r not in ctx.lost})
        for b in beats
    ]


def _this_runs_rank(pid: int, node: str, run: RunDir) -> bool:
    """Process `pid` on this host is a rank of this run on `node` (not a pid reused since)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    run_dir = env.get(b"HPCTRAIN_RUN_DIR", b"").decode(errors="replace")
    same_run = bool(run_dir) and Path(run_dir).resolve() == run.root.resolve()
    return same_run and env.get(b"SLURMD_NODENAME", b"").decode(errors="replace") in (node, "")


def end_rank(ctx: Context, seen: Seen) -> None:
    """SIGKILL one rank's process (it may be dead already): on its node through srun, or here when
    it runs on this host (the local test cluster's nodes share one). Only a process whose
    environment names this run and that node is killed, so a pid reused since cannot be hit."""
    if not seen.pid:
        return
    if seen.node != ctx.node and ctx.job_id:
        script = 'tr "\\0" "\\n" </proc/"$1"/environ | grep -qx "SLURMD_NODENAME=$2" && kill -KILL "$1"'
        command = ["sh", "-c", script, "sh", str(seen.pid), seen.node]
        if _run_on(ctx, seen.node, command, PROBE_TIMEOUT_S):
            return
    if _this_runs_rank(seen.pid, seen.node, ctx.run):
        try:
            os.kill(seen.pid, signal.SIGKILL)
        except OSError:
            pass


def to_give_up(components: Components, late: list[Seen], ranks: list[Seen]) -> list[Seen]:
    """The late ranks to end alone, the job going on without them: the stopped or dead ones when
    there are any (the others may only be waiting for them, as a sync server and its workers wait
    for a stopped worker), else every late one; none unless all are expendable and a worker is left."""
    stopped = [r for r in late if not r.responsive]
    chosen = [r for r in (stopped or late) if components.expendable(r.rank)]
    if len(chosen) < len(stopped or late):
        return []  # a stopped server, or a late one that no worker is stuck behind: a hang of the job
    return chosen if components.can_lose([r.rank for r in chosen], [r.rank for r in ranks]) else []


def give_up_on(ctx: Context, late: list[Seen]) -> None:
    """Expendable ranks that stopped advancing (parameter-server workers, hung or dead): end their
    processes and watch the others; the servers drop them and train on."""
    for seen in late:
        why = f"not responding for {seen.silent_s:.0f} s" if not seen.responsive else seen.phase
        where = where_in_training(seen.step)
        say(
            f"{ctx.components.name(seen.rank)} on {seen.node} lost {where} ({why}): "
            "ended it, training goes on without it"
        )
        end_rank(ctx, seen)
        ctx.lost.add(seen.rank)


def training_completed(ctx: Context) -> bool:
    """The run's result says training reached its last step: a rank that still holds the step then
    (a stopped parameter-server worker that srun waits for) is no hang."""
    result = ctx.run.read_result()
    return isinstance(result, Result) and result.status == "completed" and result.step >= result.steps


def declare_hang(ctx: Context, step_pid: int, beats: list[Heartbeat], median_s: float | None) -> bool:
    """Collect the stacks, look again, and if a rank is still overdue write hang.json and end the
    step (True). False: every rank has advanced meanwhile, which a hung rank cannot do."""
    now = time.time()
    ranks = hang_rule.seen_ranks(beats, now, ctx.settings.stopped_timeout)
    late = hang_rule.overdue(ctx.settings, ranks, median_s) or ranks
    say(f"ranks {', '.join(str(r.rank) for r in late[:SHOWN_RANKS])} stopped advancing: collecting stacks")
    waits = collect_stacks(ctx, (b.node for b in beats), frozenset(r.rank for r in ranks if not r.responsive))
    # A fresh look after the stacks (seconds later): a stopped rank's silence is surer by now.
    ranks = hang_rule.seen_ranks(
        this_attempt(ctx, ctx.run.read_heartbeats()) or beats, time.time(), ctx.settings.stopped_timeout
    )
    if not hang_rule.overdue(ctx.settings, ranks, median_s):
        # Seen once in a soak, 4 s after a warm restart on a loaded node: rank 0 overdue at the
        # first look, every rank 0.6 s into its step at the second.
        say("every rank advanced while the stacks were collected: not a hang, watching on")
        return False
    hung, waiting = diagnose(ranks, waits)
    text = summary(hung, waiting, waits, ctx.components)
    report = HangReport(
        time=time.time(),
        summary=text,
        step=min((r.step for r in hung), default=None),
        hung=[r.state(waits.get(r.rank, "")) for r in hung],
        waiting=[r.state(waits.get(r.rank, "")) for r in waiting],
        timeout_s=round(hang_rule.allowance(ctx.settings, ranks, median_s), 1),
        stacks=str(ctx.run.stacks),
        attempt=ctx.attempt,
    )
    ctx.run.failures.mkdir(parents=True, exist_ok=True)
    write_json(ctx.run.hang_report, report)
    say(f"HUNG: {text}; stacks: {ctx.run.stacks}")
    end_step(ctx, step_pid, {b.step_id for b in beats if b.step_id}, ranks)
    return True


def ranks_gone(
    ctx: Context, step_pid: int, beats: list[Heartbeat], silent: list[str], failed: list[FailureReport]
) -> bool:
    """Peers are gone and the step still runs: end it now. False when every silent node still
    answers: its ranks are alive but stuck (a long GIL hold, or STOPped), which the hang rule judges."""
    if failed:
        who = ", ".join(f"rank {f.rank} ({f.error_type or 'failed'})" for f in failed[:SHOWN_RANKS])
        say(f"{who} failed and the step goes on without it: ending the step")
    else:
        records = node_records(silent) if ctx.job_id else {}
        gone = [
            n
            for n in silent
            if ctx.job_id
            and not node_answers(n, records.get(n, {}), PROBE_TIMEOUT_S, ctx.job_id, ctx.het_groups.get(n))
        ]
        if not gone:
            return False
        say(f"no heartbeat from {', '.join(gone)} and no answer: ending the step")
    ranks = hang_rule.seen_ranks(beats, time.time(), ctx.settings.stopped_timeout)
    end_step(ctx, step_pid, {b.step_id for b in beats if b.step_id}, ranks, GONE_END_WAIT_S)
    return True


def grow_back(ctx: Context) -> bool:
    """A shrunk attempt whose lost node answers again: ask the runtime to checkpoint at its next step
    and requeue (the preemption path), so that the next allocation has every node again (True)."""
    back = supervise.answering_again(ctx.missing)
    if not back:
        return False
    say(f"{', '.join(back)} answer(s) again: checkpointing and requeueing to grow back onto every node")
    ctx.run.grow_back_request.touch()  # first: the attempt's end is recorded as a grow-back, not a preemption
    ctx.run.preempt_flag.touch()
    return True


def guard_step(ctx: Context, step_pid: int, poll_s: float) -> int:
    """Read the heartbeats every `poll_s`; look for failure reports and the step's end every tick."""
    samples: dict[tuple[int, int], float] = {}
    gone_since: float | None = None
    answered: dict[str, float] = {}  # silent nodes that answered a probe, and when
    silent_after = ctx.settings.node_silent_after
    beats: list[Heartbeat] = []
    silent: list[str] = []
    next_read = 0.0
    next_grow_check = time.time() + REPROBE_S
    while running(step_pid):
        now = time.time()
        if ctx.missing and now >= next_grow_check:
            next_grow_check = now + REPROBE_S
            if grow_back(ctx):
                ctx.missing = []
        if now >= next_read:
            next_read = now + poll_s
            beats = this_attempt(ctx, ctx.run.read_heartbeats())
            ranks = hang_rule.seen_ranks(beats, now, ctx.settings.stopped_timeout)
            for seen in ranks:
                if seen.step_s:
                    samples[(seen.rank, seen.step)] = seen.step_s
            while len(samples) > MAX_STEP_SAMPLES:
                samples.pop(next(iter(samples)))
            median_s = hang_rule.median_step_s(samples.values())
            # A node whose ranks have all left (parameter-server workers that finished) is not silent.
            silent = sorted(
                b.node
                for b in beats
                if b.ranks and now - b.time > silent_after and now - answered.get(b.node, 0) > REPROBE_S
            )
            late = hang_rule.overdue(ctx.settings, ranks, median_s)
            if (late or ctx.lost) and training_completed(ctx):
                say("training completed; ending the step, which still waits for ranks that stopped")
                end_step(ctx, step_pid, {b.step_id for b in beats if b.step_id}, ranks, GONE_END_WAIT_S)
                return 0
            expendable = to_give_up(ctx.components, late, ranks)
            if expendable:
                give_up_on(ctx, expendable)
                continue
            # Late ranks all on nodes that went silent: first find out whether those nodes still answer.
            hang = late and not {r.node for r in late} <= set(silent)
            if hang and declare_hang(ctx, step_pid, beats, median_s):
                return 0
        # A failure report is one readdir away: a rank that failed while its peers wait on it for
        # good (a lost node) ends the step within the grace, not a heartbeat interval later. An
        # expendable rank's failure (a parameter-server worker) does not end the step.
        failed = [
            f
            for f in ctx.run.read_failures()
            if isinstance(f, FailureReport)
            and (f.time or 0) >= ctx.started
            and not ctx.components.expendable(f.rank)
        ]
        if silent or failed:
            gone_since = gone_since or now
            if now - gone_since >= GONE_GRACE_S:
                if ranks_gone(ctx, step_pid, beats, silent, failed):
                    return 0
                answered.update(dict.fromkeys(silent, time.time()))
                silent, gone_since = [], None
        else:
            gone_since = None
        time.sleep(min(poll_s, TICK_S))
    return 0


def context_from_env() -> Context:
    value = os.environ.get("HPCTRAIN_RUN_DIR")
    if not value:
        raise SystemExit("hpctrain.supervisor.watchdog: HPCTRAIN_RUN_DIR is not set")
    run = RunDir(Path(value).resolve())
    resolved = spec.loads(run.spec.read_bytes())
    attempt = slots.current_attempt()
    return Context(
        run=run,
        settings=resolved.job.watchdog,
        attempt=attempt,
        job_id=os.environ.get("SLURM_JOB_ID", ""),
        node=os.environ.get("SLURMD_NODENAME", "") or socket.gethostname(),
        signum=slots.stack_signal(resolved.preemption.signal),
        missing=missing_nodes(History.read(run), attempt, resolved.job.resources.nodes)
        if resolved.preemption.requeue
        else [],
        components=Components.of(resolved),
        het_groups=supervise.het_groups(),
        component_jobs=supervise.het_job_ids(),
    )


def missing_nodes(history: History, attempt: int, planned: int) -> list[str]:
    """The lost nodes a shrunk attempt runs without (those a requeue would grow back onto)."""
    start = history.start_of(attempt)
    if start is None or len(start.nodes) >= planned:
        return []
    return [node for node in history.lost_nodes() if node not in start.nodes]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpctrain.supervisor.watchdog", description=__doc__)
    parser.add_argument(
        "--step-pid", type=int, help="The training step's process (srun): watch until it ends."
    )
    parser.add_argument(
        "--collect-node", metavar="NODE", help="Only write the stacks of NODE's ranks (run there)."
    )
    parser.add_argument(
        "--stopped", default="", metavar="RANKS", help="With --collect-node: ranks found not running (1,5)."
    )
    args = parser.parse_args(argv)
    ctx = context_from_env()
    if args.collect_node:
        stopped = frozenset(int(rank) for rank in args.stopped.split(",") if rank.strip().isdigit())
        stacks.collect_node(ctx.run, ctx.job_id, ctx.attempt, args.collect_node, ctx.signum, stopped)
        return 0
    if args.step_pid is None:
        parser.error("--step-pid or --collect-node is required")
    if not ctx.settings.enabled:
        return 0
    # The batch script ends us with SIGTERM once the step is over: clean up on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    try:
        # Reading every node file once per interval: the reads stay as bounded as the writes.
        return guard_step(ctx, args.step_pid, poll_s=ctx.settings.heartbeat_interval)
    finally:  # this node's slot files (other nodes' go with their /dev/shm, or stay: 16 KiB each)
        for beat in this_attempt(ctx, ctx.run.read_heartbeats()):
            slots.remove_node_files(ctx.run.root, ctx.job_id, ctx.attempt, beat.node)
        # On the way out already: the batch script's SIGTERM must not raise SystemExit inside the
        # interpreter's shutdown (a traceback in the batch log, seen after a step that ended early).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
