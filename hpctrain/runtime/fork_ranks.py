"""One task per node that imports torch once, then forks the node's ranks (``launcher: fork``).

``python -m hpctrain.runtime.fork_ranks PER_NODE MODULE [ARG...]``

A cold start on a node is mostly every rank importing the same modules at the same time: 4 ranks on
2 cores take 5.7 s to import torch and the runtime, 2 ranks 2.7 s, and on a shared filesystem each
rank reads the same files again. With ``launcher: fork`` srun starts this task alone on each node. It
imports what a rank needs before its first step (``standby.WARM_MODULES`` and the job's task
module), then forks PER_NODE ranks that share those pages. Each rank gets the Slurm variables srun
would have given it (global rank = node id x PER_NODE + local id), writes its own log, and runs
MODULE as ``python -m MODULE ARG...`` would.

The task ends as an srun step with ``--kill-on-bad-exit`` does: the first rank that fails ends the
others (SIGTERM, then SIGKILL after TERM_WAIT_S) and its status becomes the task's, so srun ends the
step on every node. Signals sent to the task (Slurm's preemption warning, a cancel's SIGTERM) go on
to every rank, and a rank dies with the task (PR_SET_PDEATHSIG): no rank outlives its step.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from hpctrain.runtime import startup_times

TERM_WAIT_S = 4.0  # after the first failure, the others' time to end on SIGTERM before SIGKILL
PR_SET_PDEATHSIG = 1
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT)
USAGE = "usage: python -m hpctrain.runtime.fork_ranks PER_NODE MODULE [ARG...]"


def rank_variables(env: Mapping[str, str], per_node: int, local: int) -> dict[str, str]:
    """The Slurm variables srun gives the task of local id `local` on this node, for a step of
    PER_NODE tasks on each of its nodes (block distribution, as srun places them)."""
    nodes = int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or "1")
    first = int(env.get("SLURM_NODEID") or "0") * per_node
    world = nodes * per_node
    return {
        "SLURM_PROCID": str(first + local),
        "SLURM_LOCALID": str(local),
        "SLURM_NTASKS": str(world),
        "SLURM_NPROCS": str(world),
        "SLURM_STEP_NUM_TASKS": str(world),
        "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x{nodes})" if nodes > 1 else str(per_node),
        "SLURM_GTIDS": ",".join(str(first + i) for i in range(per_node)),
    }


def exit_status(wait_status: int) -> int:
    """A wait status as the shell reports it (killed by signal N: 128 + N)."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


def die_with_parent(parent: int) -> None:
    """SIGKILL when the task that forked us ends, whatever ends it (even SIGKILL)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before the prctl
        os._exit(128 + int(signal.SIGKILL))


class Ranks:
    """The node's forked ranks, seen from the task that forked them."""

    def __init__(self) -> None:
        self.children: dict[int, int] = {}  # pid -> local id, while it runs
        self.lock = threading.Lock()
        self.failure: int | None = None

    def send(self, sig: int) -> None:
        with self.lock:
            pids = list(self.children)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def end_the_others(self) -> None:
        self.send(signal.SIGTERM)
        timer = threading.Timer(TERM_WAIT_S, self.send, (signal.SIGKILL,))
        timer.daemon = True
        timer.start()

    def wait(self, per_node: int) -> int:
        """Until every rank has ended: 0, or the status of the first that failed."""
        while True:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                return self.failure or 0
            with self.lock:
                local = self.children.pop(pid, None)
            code = exit_status(status)
            if local is not None and code and self.failure is None:
                self.failure = code
                if os.WIFSIGNALED(status):
                    report_signal(os.environ, per_node, local, os.WTERMSIG(status))
                self.end_the_others()


def report_signal(env: Mapping[str, str], per_node: int, local: int, signum: int) -> None:
    """``failures/rank-N.json`` for a rank a signal ended (kill -9, the OOM killer, a crash in C):
    srun only sees this task's exit status, and the rank could not report itself."""
    run_dir = env.get("HPCTRAIN_RUN_DIR")
    if not run_dir:
        return
    from hpctrain.rundir import FailureReport, RunDir
    from hpctrain.rundir.structs import SIGNALLED

    attempt = env.get("HPCTRAIN_ATTEMPT", "")
    report = FailureReport(
        rank=int(rank_variables(env, per_node, local)["SLURM_PROCID"]),
        hostname=env.get("SLURMD_NODENAME", ""),
        error_type=SIGNALLED,
        message=signal.strsignal(signum) or f"signal {signum}",
        time=time.time(),
        attempt=int(attempt) if attempt.isdigit() else None,
    )
    try:
        RunDir(run_dir).write_failure(report)
    except OSError as error:
        print(f"hpctrain: could not report rank {report.rank}'s end: {error}", file=sys.stderr)


def become_rank(variables: dict[str, str], started: float, module: str, args: list[str]) -> int:
    """In the forked child: take the rank's variables and log, then run MODULE as ``-m`` would."""
    os.environ.update(variables)
    os.environ[startup_times.STARTED_AT] = f"{started:.3f}"
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    if run_dir:
        from hpctrain.runtime import logs

        logs.redirect(Path(run_dir), int(variables["SLURM_PROCID"]))
    from hpctrain.runtime.standby import run_as_main

    run_as_main(module, args)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit() or int(argv[0]) < 1:
        print(USAGE, file=sys.stderr)
        return 2
    per_node, module, args = int(argv[0]), argv[1], argv[2:]
    started = startup_times.process_started()
    ranks = Ranks()
    preemption = None
    for sig in FORWARDED:
        signal.signal(sig, lambda signum, frame: ranks.send(signum))
    from hpctrain.runtime.standby import warm_modules, warm_up

    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    if run_dir:
        from hpctrain import spec
        from hpctrain.rundir import RunDir
        from hpctrain.runtime.signals import signal_number

        resolved = spec.loads(RunDir(run_dir).spec.read_bytes())
        preemption = signal_number(resolved.preemption.signal)
        signal.signal(preemption, lambda signum, frame: ranks.send(signum))
        startup_times.mark("interpreter")
        modules = warm_modules(resolved)
        warm_up(modules[:1])
        startup_times.mark("torch")
        warm_up(modules[1:])
        startup_times.mark("runtime_imports")
    handled = {*FORWARDED, *([preemption] if preemption is not None else [])}
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    # Blocked across each fork: a signal must not run this task's handler in a rank that has not
    # yet put back its own.
    signal.pthread_sigmask(signal.SIG_BLOCK, handled)
    for local in range(per_node):
        pid = os.fork()
        if pid == 0:
            die_with_parent(parent)
            for sig in handled:
                # The preemption signal stays ignored until the rank installs its handler: its
                # default action would kill the rank.
                signal.signal(sig, signal.SIG_IGN if sig == preemption else signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, handled)
            return become_rank(rank_variables(os.environ, per_node, local), started, module, args)
        with ranks.lock:
            ranks.children[pid] = local
    signal.pthread_sigmask(signal.SIG_UNBLOCK, handled)
    print(f"hpctrain: {per_node} ranks forked after {time.time() - started:.1f} s", file=sys.stderr)
    status = ranks.wait(per_node)
    forget_slots(os.environ)
    from hpctrain.runtime.logs import exit_now

    exit_now(status)  # without the second that tearing down torch takes, which the restart waits for


def forget_slots(env: Mapping[str, str]) -> None:
    """Remove this node's heartbeat slot and stack files once its ranks have ended: the watchdog, on
    the batch node, removes only its own node's."""
    run_dir, node = env.get("HPCTRAIN_RUN_DIR"), env.get("SLURMD_NODENAME")
    if run_dir and node:
        from hpctrain.rundir import slots

        slots.remove_node_files(
            Path(run_dir), env.get("SLURM_JOB_ID", ""), slots.current_attempt(dict(env)), node
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
