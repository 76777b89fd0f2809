"""``python -m hpctrain.runtime``: one task of a job, started by srun, torchrun, mpirun or by hand.

Reads ``$HPCTRAIN_RUN_DIR/spec.json``, joins the process group, trains (parameter-server jobs
through ``hpctrain.runtime.ps``), and on any exception writes ``failures/rank-N.json`` and exits
non-zero so that ``srun --kill-on-bad-exit`` ends the whole job. ``--check-result`` exits 0 iff the
run's result says training completed (the batch script asks this after a parameter-server step
that lost a worker).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

from hpctrain import spec
from hpctrain.errors import HpctrainError
from hpctrain.rundir import RunDir
from hpctrain.rundir.names import COMPILE_CACHE
from hpctrain.runtime import bootstrap, collective_timeout, heartbeat, logs, mesh, signals, startup_times
from hpctrain.runtime.logs import exit_now

log = logging.getLogger("hpctrain.runtime")


def run_dir_from_env() -> Path:
    value = os.environ.get("HPCTRAIN_RUN_DIR")
    if not value:
        raise SystemExit("hpctrain.runtime: HPCTRAIN_RUN_DIR is not set (the run directory with spec.json)")
    return Path(value).resolve()


def set_network_env(resolved: spec.Resolved) -> None:
    """The site's interconnect settings, unless the batch script (or the user) already set them."""
    network = resolved.site.network
    if network.gloo_socket_ifname:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", network.gloo_socket_ifname)
    for key, value in network.nccl_env.items():
        os.environ.setdefault(key, str(value))


COMPILE_CACHE_ENV = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}


def set_compile_cache_env(resolved: spec.Resolved, run_dir: Path) -> Path:
    """Point the inductor and Triton caches at the run's compile cache (``train.compile_cache``), so
    that a restart, on these nodes or others, finds the kernels the earlier attempts compiled.

    Torch's defaults are node-local (/tmp, ~/.triton): a requeue onto other nodes, or a per-job
    /tmp, compiles everything again (55 s of a 944M GPT's start on an H200). Set before torch
    compiles anything; a warm standby has imported torch already, which reads these at compile time.
    """
    chosen = resolved.job.train.compile_cache
    folder = run_dir / (COMPILE_CACHE if chosen is None else os.path.expandvars(os.path.expanduser(chosen)))
    for variable, subfolder in COMPILE_CACHE_ENV.items():
        if variable not in resolved.job.env:  # the job's own setting wins
            os.environ[variable] = str(folder / subfolder)
    return folder


def finished(run_dir: Path) -> bool:
    """Did training reach its last step? (The result rank 0 writes at the end.)"""
    from hpctrain.rundir import Result, RunDir

    result = RunDir(run_dir).read_result()
    return isinstance(result, Result) and result.status == "completed" and result.step >= result.steps > 0


def main() -> int:
    run_dir = run_dir_from_env()
    if sys.argv[1:] == ["--check-result"]:
        return 0 if finished(run_dir) else 1
    resolved = spec.loads(RunDir(run_dir).spec.read_bytes())
    # Before the slow torch import: the default action of SIGUSR1 is to terminate.
    signalled = signals.install(resolved.preemption.signal)
    info = bootstrap.discover()
    if os.environ.get("HPCTRAIN_REDIRECT_LOGS") == "1":
        logs.redirect(run_dir, info.rank)
    logs.setup(info.rank, info.world_size, info.hostname)
    logs.write_pid(run_dir, info.rank)
    set_network_env(resolved)
    set_compile_cache_env(resolved, run_dir)
    startup_times.mark("interpreter")
    try:
        return run(resolved, info, run_dir, signalled)
    except BaseException as error:
        if isinstance(error, SystemExit) and not error.code:
            raise
        from hpctrain.runtime.metrics import Metrics, write_failure

        path = write_failure(run_dir, info.rank, error, info.hostname)
        diagnosed = isinstance(error, HpctrainError)  # its message says it all: no traceback
        (log.error if diagnosed else log.exception)("rank %d failed (%s): %s", info.rank, path, error)
        Metrics(run_dir, info.rank).event("failed", error=f"{type(error).__name__}: {error}"[:500])
        if diagnosed:
            # Skip the interpreter's teardown: it may block on gloo pairs to peers that are gone.
            exit_now(error.exit_code)
        raise


def run(resolved: spec.Resolved, info: bootstrap.DistInfo, run_dir: Path, signalled: threading.Event) -> int:
    heartbeat.start_rank(run_dir, info, resolved)  # before the torch import: the watchdog times startup
    import torch
    import torch.distributed as dist

    startup_times.mark("torch")
    if resolved.parallel.ps is not None:
        from hpctrain.runtime import ps

        ps.run(resolved, info, run_dir)
        heartbeat.finish()
        return 0
    from hpctrain.runtime.train import Trainer

    startup_times.mark("runtime_imports")
    timeout_s = collective_timeout.collective_timeout_s(resolved.job.watchdog, resolved.job.train.timeout_s)
    collective_timeout.apply_nccl_env(run_dir, timeout_s, mesh.backend(resolved), torch.__version__)
    bootstrap.init_process_group(info, mesh.backend(resolved), timeout_s)
    startup_times.mark("rendezvous")
    log.info(
        "rank %d/%d local %d node %d via %s, rendezvous %s:%d",
        info.rank,
        info.world_size,
        info.local_rank,
        info.node_rank,
        info.launcher,
        info.master_addr,
        info.master_port,
    )
    trainer = Trainer(resolved, info, run_dir, signalled)
    startup_times.mark("build")
    log.info("strategy: %s", trainer.strategy.describe())
    try:
        status = trainer.run()
    except BaseException as error:
        # The failure report names the step: the same exception at the same step twice is a bug.
        from hpctrain.runtime.metrics import STEP_ATTRIBUTE

        setattr(error, STEP_ATTRIBUTE, trainer.step)
        raise
    log.info("run %s at step %d", status, trainer.step)
    # Every rank's work is on disk once all pass this barrier. Process-group teardown is skipped on
    # purpose: gloo's and async checkpointing's threads can abort the interpreter's exit ("terminate
    # called without an active exception") and turn a finished job into a FAILED one.
    heartbeat.mark("collective")
    dist.barrier()
    heartbeat.finish()
    return 0


if __name__ == "__main__":
    exit_now(main())
