"""The attempt loop of a batch job: start each attempt's steps, wait, decide, restart or requeue.

``python -m hpctrain.supervisor.attempt_loop RUN_DIR SIGNAL`` is what the batch script runs once its
environment is set (templates/partials/launch.j2): RUN_DIR is the run's directory (an array
element's is below it, in HPCTRAIN_RUN_DIR), SIGNAL the preemption signal the shell forwards. It

* checks the container on every node (a failure ends the job here, once, instead of failing every
  rank of every attempt) and, for torchrun, runs preflight as a step of its own;
* asks the supervisor (:mod:`hpctrain.supervisor.supervise`) for the first attempt, then for each
  attempt starts its step (srun, fork, mpi or torchrun ranks, the parameter servers' hetjob step,
  or the warm standby's steps) and the progress watchdog beside it, waits for it, and asks again:
  another step in this allocation (no queue), a requeue without the failed nodes, or the end;
* requeues the job itself (scheduler.slurm.nodes.requeue_now) or ends it with the decided exit
  code, which it appends to exit-codes first: the batch shell tells its own ends from its death
  by that line (a supervisor that dies is requeued or failed by the shell's guard).

The batch shell forwards the preemption signal here; the runtime checkpoints at its next step
once the preempt flag exists. Torch-free: every step it starts is a process of its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from hpctrain import spec
from hpctrain.errors import HpctrainError
from hpctrain.rundir import RunDir
from hpctrain.rundir.names import SLURM_NODE_LOG, SLURM_PREFLIGHT_LOG, SLURM_RANK_LOG
from hpctrain.scheduler.rank_program import rank_program
from hpctrain.scheduler.render import context
from hpctrain.scheduler.slurm import steps
from hpctrain.scheduler.slurm.nodes import excluded_nodes, requeue_now
from hpctrain.spec import Resolved
from hpctrain.supervisor.standby_steps import exit_status
from hpctrain.supervisor.supervise import TOO_FEW_NODES, Decision, Job, available_nodes, too_few_left
from hpctrain.supervisor.warm_standby import WarmStandby

Process = subprocess.Popen[bytes]
REQUEUE_REFUSED = 1
"""The exit code of a job whose requeue Slurm refused: it can neither go on nor come back."""


def say(message: str) -> None:
    print(f"hpctrain: {message}", flush=True)


class AttemptLoop:
    """One allocation of a job: its attempts, from the first step to the job's end or requeue."""

    def __init__(self, run: RunDir, run_root: Path, resolved: Resolved, job: Job, job_id: str) -> None:
        self.run = run
        self.ctx: dict[str, Any] = context(resolved, run_root, python=sys.executable)
        self.job = job
        self.job_id = job_id
        job = resolved.job
        self.box = steps.container_words(
            job.container, str(run_root), bool(job.resources.gpus_per_node), self.job_id, sys.executable
        )
        self.launcher: str = self.ctx["launcher"]
        self.preflight: bool = self.ctx["preflight"]
        self.program = rank_program(resolved, self.preflight and self.launcher != "torchrun")
        self.tasks_per_node: int = self.ctx["tasks_per_node"]
        self.standby: WarmStandby | None = None
        if self.ctx["standby"]:
            self.standby = WarmStandby(
                run, self.tasks_per_node, self.ctx["standby_signal"], self.standby_step
            )

    def log(self, pattern: str) -> str:
        return str(self.run.logs / pattern)

    def standby_step(self, node: str, log: str) -> list[str]:
        return steps.standby_step(self.tasks_per_node, node, log, self.box, self.program)

    # -- before the first attempt ---------------------------------------------------------------

    def container_ok(self) -> bool:
        if self.ctx["container"].runtime == "none" or self.ctx["heterogeneous"]:
            return True
        nnodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1") or 1)
        if subprocess.run(steps.container_check_step(nnodes, self.box), check=False).returncode == 0:
            return True
        say("the container check failed on a node (see above): no training step started")
        return False

    def torchrun_preflight(self) -> int | None:
        """torchrun starts the training processes itself: its preflight is a step of its own. A node
        that fails is named in preflight-exclude, and the job is requeued without it. None: passed."""
        argv = steps.preflight_step(self.log(SLURM_PREFLIGHT_LOG), self.box)
        if subprocess.run(argv, check=False).returncode == 0:
            return None
        bad = self.run.preflight_exclude.read_text().strip() if self.run.preflight_exclude.exists() else ""
        if bad:
            say(f"preflight failed on {bad}")
            exclude = bad.split(",")
            stuck = too_few_left(available_nodes(self.job.job_ref), exclude, self.job.planned)
            if not stuck:
                return self.requeue(exclude)
            say(f"not requeueing: {stuck}")
            return self.finish(TOO_FEW_NODES)
        say("preflight failed (see logs/preflight-*.log)")
        return self.finish(1)

    # -- one attempt ------------------------------------------------------------------------------

    def start_step(self, plan: Decision) -> Process:
        nodes = list(plan.nodes)
        address = os.environ.get("MASTER_ADDR", "") if self.ctx["heterogeneous"] else nodes[0]
        os.environ.update(
            HPCTRAIN_ATTEMPT=str(plan.attempt),
            MASTER_ADDR=address,
            MASTER_PORT=str(plan.ports[0]),
            HPCTRAIN_PREFLIGHT_PORT=str(plan.ports[1]),
        )
        # A fresh rendezvous each attempt: the first node of this attempt, ports of its own (a port
        # that was taken ends the attempt as a launch fault; the next one gets other ports).
        preflight = f" (preflight :{plan.ports[1]})" if self.preflight else ""
        say(f"attempt {plan.attempt} on {','.join(nodes)}, rendezvous {address}:{plan.ports[0]}{preflight}")
        if self.launcher == "torchrun":
            os.environ["HPCTRAIN_REDIRECT_LOGS"] = "1"
            return subprocess.Popen(self.torchrun_step(nodes, plan.attempt, f"{address}:{plan.ports[0]}"))
        if self.ctx["heterogeneous"]:
            os.environ["HPCTRAIN_REDIRECT_LOGS"] = "1"
            return subprocess.Popen(steps.het_step(self.box, self.program))
        if self.standby is not None:
            warm = None
            if self.standby.ready(nodes):
                warm = self.standby.go(plan.attempt, address, plan.ports[0], nodes)
            else:
                self.standby.stop()
            step = warm or subprocess.Popen(self.rank_step(nodes))
            self.standby.start(nodes)
            return step
        if self.launcher == "mpi":
            os.environ["HPCTRAIN_BOOTSTRAP"] = "mpi"
        return subprocess.Popen(self.rank_step(nodes))

    def torchrun_step(self, nodes: list[str], attempt: int, endpoint: str) -> list[str]:
        rdzv = f"{self.job_id}-{attempt}"
        log = self.log(SLURM_NODE_LOG)
        return steps.torchrun_step(nodes, self.tasks_per_node, endpoint, rdzv, log, self.box, self.program)

    def rank_step(self, nodes: list[str]) -> list[str]:
        if self.launcher == "fork":
            cpus = self.ctx["fork_cpus_per_task"]
            return steps.fork_step(
                nodes, self.tasks_per_node, cpus, self.log(SLURM_NODE_LOG), self.box, self.program
            )
        return steps.rank_step(
            nodes,
            self.tasks_per_node,
            self.log(SLURM_RANK_LOG),
            self.box,
            self.program,
            kill_on_bad_exit=not self.ctx["ps"],
            mpi=self.ctx["mpi"] if self.launcher == "mpi" else "",
        )

    def wait_for(self, step: Process) -> int:
        """The step's exit status, with the progress watchdog beside it (it ends a hung step itself,
        writing failures/hang.json)."""
        watchdog = None
        if self.ctx["watchdog"]:
            watchdog = subprocess.Popen(
                [sys.executable, "-m", "hpctrain.supervisor.watchdog", "--step-pid", str(step.pid)]
            )
        status = exit_status(step.wait())
        if watchdog is not None:
            watchdog.terminate()
            watchdog.wait()
        if self.ctx["ps"] and status != 0:
            # A parameter-server step ends non-zero when a worker died, yet async training goes on
            # without it: whether training reached its last step is what decides.
            check = [sys.executable, "-m", "hpctrain.runtime", "--check-result"]
            if subprocess.run(check, check=False).returncode == 0:
                say(f"training finished although a task exited with code {status}")
                status = 0
        say(f"step ended with exit code {status}")
        return status

    # -- the end ----------------------------------------------------------------------------------

    def requeue(self, exclude: list[str]) -> int:
        """Back to the queue at once, without `exclude` (added to ExcNodeList). requeuehold ends
        this allocation (SIGTERM, then SIGKILL after KillWait): ignoring SIGTERM, here and in the
        scontrol calls it starts, lets the update and release run, or the job would stay held."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        nodes = excluded_nodes(self.job.job_ref)
        nodes += [node for node in exclude if node not in nodes]
        without = f" without {','.join(nodes)}" if nodes else ""
        say(f"requeueing job {self.job.job_ref}{without}")
        try:
            for failure in requeue_now(self.job.job_ref, nodes):
                say(f"after the requeue: {failure}")
        except HpctrainError as err:
            say(f"Slurm refused the requeue ({err}): the job fails instead")
            return self.finish(REQUEUE_REFUSED)
        return 0

    def finish(self, code: int) -> int:
        with self.run.exit_codes.open("a") as codes:
            codes.write(f"{self.job_id} {code}\n")
        say(f"job ends with exit code {code}")
        return code

    def run_all(self) -> int:
        if not self.container_ok():
            return self.finish(1)
        if self.preflight:
            self.run.preflight_exclude.unlink(missing_ok=True)
            if self.launcher == "torchrun":
                ended = self.torchrun_preflight()
                if ended is not None:
                    return ended
        plan = self.job.begin()
        while plan.action == "launch":
            status = self.wait_for(self.start_step(plan))
            plan = self.job.end(status)
        if self.standby is not None and plan.action != "requeue":
            # A requeue ends the standby step itself, and sooner: a step killed here kept the job
            # from ending within the requeue's 2 s window (measured), and it then waited for the hold.
            self.standby.stop()
        self.run.requeue_request.unlink(missing_ok=True)
        if plan.action == "requeue":
            return self.requeue(list(plan.exclude))
        return self.finish(plan.code)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m hpctrain.supervisor.attempt_loop RUN_DIR SIGNAL", file=sys.stderr)
        return 2
    run = RunDir(Path(os.environ["HPCTRAIN_RUN_DIR"]))
    preemption = argv[1]

    def on_preempt(signum: int, frame: object) -> None:
        # os.write, not print: the handler may run in the middle of a print to the same stream.
        os.write(
            sys.stdout.fileno(),
            f"hpctrain: SIG{preemption} received, asking the runtime to checkpoint\n".encode(),
        )
        run.preempt_flag.touch()

    # First thing: the batch shell forwards Slurm's signal, whose default action would end us.
    signal.signal(signal.Signals[f"SIG{preemption}"], on_preempt)
    resolved = spec.loads(run.spec.read_bytes())
    loop = AttemptLoop(run, Path(argv[0]), resolved, Job.from_env(), os.environ.get("SLURM_JOB_ID", ""))
    return loop.run_all()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
