"""``python -m hpctrain.runtime.standby MODULE [ARG...]``: a warm task that becomes the next attempt's rank.

A restart's cost on a small job is mostly start-up: Python, ``import torch`` and the runtime (5 s of
CPU per process on a 2-core node), for every rank at once. So while an attempt trains, the batch
script keeps a step ready on each of its nodes (``supervisor/standby_steps.py``), with that node's
tasks: each has imported torch, the runtime and the job's task module, then waits. When the
supervisor launches the next attempt on those nodes, or on the ones that remain after a node was
lost, the batch script writes the attempt's rendezvous and nodes into ``standby/GEN/go`` and sends
the go signal, which reaches every task: a task on one of the attempt's nodes takes its rank from
its node's place in that list and its local id, and runs MODULE as ``python -m MODULE ARG...``
would; a task on another node, or every task when the go file says ``stop``, ends. A warm attempt
skips preflight: its nodes passed it in this allocation.

The waiting task is a real task of a real step: Slurm accounts for it and ``scancel`` reaches it.
Its output goes to the standby folder until it takes the go, then to its rank's log. It announces
itself ready in ``standby/GEN/ready-NODE.LOCALID`` (its step id inside) only once its imports are
done and the go signal is blocked, so a go is never sent to a task that would die of it; it
acknowledges the go in ``standby/GEN/taken-NODE.LOCALID``. It ignores the preemption signal, which
``scancel --signal=... JOB`` sends to every step: it belongs to the attempt that trains now.
"""

from __future__ import annotations

import importlib
import os
import runpy
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hpctrain.rundir import replace_bytes
from hpctrain.rundir.names import STANDBY_GO, STANDBY_READY_PREFIX, STANDBY_TAKEN_PREFIX
from hpctrain.rundir.standby_go import global_rank, go_nodes, read_go
from hpctrain.runtime.preflight import PREFLIGHT_DONE
from hpctrain.runtime.startup_times import TAKEN_AT
from hpctrain.spec.slurm_values import signal_name, standby_go_signal

if TYPE_CHECKING:
    from hpctrain.spec import Resolved

WARM_MODULES = (
    "torch",
    "torch.distributed",
    "torch._dynamo",  # imported on first use by DDP and the optimizers: 1 s
    "hpctrain.runtime.train",
    "hpctrain.runtime.bootstrap",
)
"""What a rank imports before its first step. The job's task module is added from the spec: what it
imports at its top level is warm too (imports inside its functions are not)."""


def warm_modules(resolved: Resolved) -> tuple[str, ...]:
    """WARM_MODULES (torch first), then the job's task module."""
    return (*WARM_MODULES, resolved.job.train.entrypoint.partition(":")[0])


def warm_up(modules: tuple[str, ...]) -> None:
    """Import what the rank will need. A module that fails to import is left for the rank to
    report: the standby only waits."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            return


def run_as_main(module: str, args: list[str]) -> None:
    """Run MODULE in this process as ``python -m MODULE ARG...`` would. The warm-up may have imported
    it already (the runtime imports preflight): runpy runs a fresh copy as ``__main__`` either way, and
    dropping the imported one keeps it from warning that it did."""
    sys.modules.pop(module, None)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def rank_variables(go: dict[str, str], env: dict[str, str] | os._Environ[str]) -> dict[str, str] | None:
    """The Slurm variables of this task as a rank of the attempt: its node's place in the go file's
    node list times the tasks per node, plus its local id. None: its node is not the attempt's."""
    node = env.get("SLURMD_NODENAME", "")
    nodes = go_nodes(go)
    if node not in nodes:
        return None
    per_node = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or "1")
    world = len(nodes) * per_node
    return {
        "SLURM_PROCID": str(global_rank(nodes, node, per_node, int(env.get("SLURM_LOCALID", "0")))),
        "SLURM_NTASKS": str(world),
        "SLURM_STEP_NUM_TASKS": str(world),
        "SLURM_NODEID": str(nodes.index(node)),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_STEP_NUM_NODES": str(len(nodes)),
        "SLURM_STEP_NODELIST": ",".join(nodes),
    }


def announce(folder: Path, prefix: str) -> None:
    """``PREFIX-NODE.LOCALID`` with this task's step id in it, whole or not at all."""
    path = folder / f"{prefix}{os.environ.get('SLURMD_NODENAME', '')}.{os.environ.get('SLURM_LOCALID', '0')}"
    replace_bytes(path, os.environ.get("SLURM_STEP_ID", "").encode())


def wait_for_go(folder: Path, go: signal.Signals) -> dict[str, str] | None:
    """Block until the go signal; then the attempt's variables (None: stop)."""
    signal.sigwait({go})
    return read_go(folder / STANDBY_GO)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m hpctrain.runtime.standby MODULE [ARG...]", file=sys.stderr)
        return 2
    from hpctrain.rundir import RunDir

    folder = Path(os.environ["HPCTRAIN_STANDBY_DIR"])
    run = RunDir(os.environ["HPCTRAIN_RUN_DIR"])
    from hpctrain import spec

    resolved = spec.loads(run.spec.read_bytes())
    preemption = resolved.preemption.signal
    go = signal.Signals["SIG" + standby_go_signal(preemption)]
    # Blocked before anything slow: a go that comes early waits for sigwait instead of killing us.
    signal.pthread_sigmask(signal.SIG_BLOCK, {go})
    signal.signal(signal.Signals["SIG" + signal_name(preemption)], signal.SIG_IGN)
    started = time.monotonic()
    warm_up(warm_modules(resolved))
    announce(folder, STANDBY_READY_PREFIX)
    variables = wait_for_go(folder, go)
    ranks = rank_variables(variables, os.environ) if variables is not None else None
    if variables is None or ranks is None:
        from hpctrain.runtime.logs import exit_now

        exit_now(0)  # tearing down torch would take a second of CPU from the attempt that starts now
    # The batch script counts these: a task that died in standby (its node lost and back) is
    # missing, and the attempt then starts cold instead of waiting at a rendezvous for it.
    announce(folder, STANDBY_TAKEN_PREFIX)
    os.environ.update({**variables, **ranks, PREFLIGHT_DONE: "1", TAKEN_AT: f"{time.time():.3f}"})
    from hpctrain.runtime import logs

    logs.redirect(run.root, int(ranks["SLURM_PROCID"]))
    # Nothing stays blocked (children inherit the mask). The preemption signal stays ignored until
    # the rank installs its handler: its default action would kill the rank.
    signal.signal(go, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {go})
    print(f"hpctrain: warm start after {time.monotonic() - started:.1f} s in standby", file=sys.stderr)
    run_as_main(argv[0], argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
