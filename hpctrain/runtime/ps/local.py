"""Run a parameter-server job as local processes on one machine: tests, benchmarks, laptops."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hpctrain import spec


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_run_dir(
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


def launch(run_dir: Path, world: int, env: dict[str, str] | None = None) -> list[subprocess.Popen[bytes]]:
    """Start ``world`` processes of ``python -m hpctrain.runtime.ps``; logs in run_dir/logs/rank-N.log."""
    port = free_port()
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    for rank in range(world):
        task_env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "HPCTRAIN_RUN_DIR": str(run_dir),
            "OMP_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": "lo",
            **(env or {}),
        }
        for name in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_HET_SIZE"):
            task_env.pop(name, None)  # a test run inside an allocation must not read its ranks
        log = open(logs / f"rank-{rank}.log", "wb")  # noqa: SIM115 - the child owns it
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "hpctrain.runtime.ps"],
                env=task_env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        log.close()
    return procs


def wait_all(procs: list[subprocess.Popen[bytes]], timeout_s: float) -> list[int | None]:
    """Exit codes (None = still running at the deadline, then killed)."""
    deadline = time.time() + timeout_s
    codes: list[int | None] = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(0.1, deadline - time.time())))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            codes.append(None)
    return codes


def log_text(run_dir: Path, rank: int) -> str:
    return (run_dir / "logs" / f"rank-{rank}.log").read_text(errors="replace")
