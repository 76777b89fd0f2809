"""Local multi-process launcher for tests and benchmarks, and the test-only fault-injection entrypoint.

``start``/``run`` start ``python -m hpctrain.runtime`` once per rank on this host, with torchrun's
environment (rendezvous on loopback, one thread each) and each rank's output in its log under the
run directory, as the runtime writes it for torchrun launches. ``ps_run_dir`` writes the spec of a
same-allocation parameter-server job. ``faulty`` wraps a task with injected compute delay, one
straggler and one crashing worker (``train.options``: ``base``, ``delay_s``, ``slow``, ``crash``);
it is the only fault-injection switch, and it lives here, not in the runtime. Tests import this as
``tests.launcher``; benchmarks put the repository root on ``sys.path`` first.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hpctrain import spec
from hpctrain.runtime.bootstrap import free_port

REPO = Path(__file__).resolve().parents[1]
# Test entrypoints (tests.launcher:faulty, _runtime_job:slow_digits) must import inside every rank.
PATHS = (str(REPO), str(REPO / "tests" / "integration"))


def task_env(run_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any launcher's rank variables, for one local rank."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PMI_", "OMPI_"))}
    env.update(
        HPCTRAIN_RUN_DIR=str(run_dir),
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([*PATHS, env.get("PYTHONPATH", "")]),
    )
    env.update(extra or {})
    return env


def start(run_dir: Path, world_size: int, env: dict[str, str] | None = None) -> list[subprocess.Popen[bytes]]:
    """Start the ranks on this host the way torchrun would; a world of one runs as a plain process."""
    port = str(free_port())
    procs = []
    for rank in range(world_size):
        rank_env = task_env(run_dir, env)
        if world_size > 1:
            rank_env.update(
                RANK=str(rank),
                WORLD_SIZE=str(world_size),
                LOCAL_RANK=str(rank),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                GLOO_SOCKET_IFNAME="lo",
                HPCTRAIN_REDIRECT_LOGS="1",
            )
        quiet = subprocess.DEVNULL if world_size > 1 else None
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "hpctrain.runtime"], env=rank_env, stdout=quiet, stderr=quiet
            )
        )
    return procs


def wait_all(procs: list[subprocess.Popen[bytes]], timeout: float) -> list[int | None]:
    """Exit codes; None for a process still running at the deadline (it is then killed)."""
    deadline = time.monotonic() + timeout
    codes: list[int | None] = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            codes.append(None)
    return codes


def run(
    run_dir: Path, world_size: int, timeout: float = 120, env: dict[str, str] | None = None
) -> list[int | None]:
    """Run all ranks to the end; their exit codes."""
    return wait_all(start(run_dir, world_size, env), timeout)


def run_one_process(run_dir: Path, job: dict[str, Any], site: Path | None = None) -> list[dict[str, Any]]:
    """Resolve `job` against the local site into `run_dir`, run the runtime as one plain process
    (no launcher variables), and return its metrics lines; the process must exit 0."""
    site = site or REPO / "site-configs" / "local.yaml"
    run_dir.mkdir(parents=True)
    (run_dir / "job.yaml").write_text(json.dumps(job))
    resolved = spec.resolve(spec.load_job(run_dir / "job.yaml"), spec.load_site(site))
    (run_dir / "spec.json").write_bytes(spec.dumps(resolved))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE"))}
    proc = subprocess.run(
        [sys.executable, "-m", "hpctrain.runtime"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**env, "HPCTRAIN_RUN_DIR": str(run_dir), "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def log_text(run_dir: Path, rank: int) -> str:
    path = run_dir / "logs" / f"rank-{rank}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def ps_run_dir(
    folder: Path,
    entrypoint: str,
    servers: int = 1,
    workers: int = 2,
    train: dict[str, Any] | None = None,
    ps: dict[str, Any] | None = None,
) -> spec.Resolved:
    """Write ``folder/spec.json`` for a same-allocation ps job (servers + workers tasks on one node)."""
    site = spec.Site(
        name="localhost",
        partitions={"local": spec.Partition(nodes=1, cpus_per_node=256, mem_per_node="64G", default=True)},
    )
    parallel = spec.Parallel(ps=spec.ParameterServer(servers=servers, heterogeneous=False, **(ps or {})))
    job = spec.JobSpec(
        name="ps-local",
        train=spec.Train(entrypoint=entrypoint, parallel=parallel, **(train or {})),
        resources=spec.Resources(nodes=1, tasks_per_node=servers + workers),
    )
    resolved = spec.resolve(job, site)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.json").write_bytes(spec.dumps(resolved))
    return resolved


def _worker_index(train: spec.Train) -> int | None:
    """This process's parameter-server worker index, from the launcher's rank (None on servers)."""
    from hpctrain.runtime.bootstrap import discover

    parallel = spec.SHORTHANDS[train.parallel] if isinstance(train.parallel, str) else train.parallel
    servers = parallel.ps.servers if parallel.ps is not None else 0
    rank = discover().rank
    return rank - servers if rank >= servers else None


def faulty(train: spec.Train) -> Any:
    """The task of ``options.base`` (default digits) with faults injected into its training forwards.

    ``delay_s``: seconds of simulated compute per step on every worker (a heavier model);
    ``slow_worker``, ``slow_factor``: that worker is that many times slower (a straggler);
    ``crash_worker``, ``crash_step``: that worker's process exits with code 3 at its step ``crash_step``.
    """
    import torch

    options = train.options
    module, _, function = str(options.get("base", "hpctrain.examples.digits:build")).partition(":")
    task = getattr(importlib.import_module(module), function)(train)
    worker = _worker_index(train)
    delay = float(options.get("delay_s", 0.0))
    if worker is not None and worker == options.get("slow_worker"):
        delay *= float(options.get("slow_factor", 1.0))
    crashes = worker is not None and worker == options.get("crash_worker")
    crash_at = options.get("crash_step") if crashes else None
    inner = task.loss
    steps = 0

    def loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        nonlocal steps
        if outputs.requires_grad:  # a training forward, not an evaluation
            if steps == crash_at:
                os._exit(3)
            steps += 1
            if delay:
                time.sleep(delay)
        return inner(outputs, targets)

    task.loss = loss
    return task


def wait_for(predicate: Any, timeout: float, interval: float = 0.2) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def check_result(run_dir: Path) -> int:
    """Exit code of ``python -m hpctrain.runtime --check-result``, as the batch script runs it."""
    return subprocess.run(
        [sys.executable, "-m", "hpctrain.runtime", "--check-result"], env=task_env(run_dir), check=False
    ).returncode
