"""Test helper for the runtime: write a run dir, run its ranks locally or as a real sbatch job.

Cluster jobs go through the product's sbatch template (``hpctrain.scheduler.render``), so the preemption
trap, the requeue request and ``--kill-on-bad-exit`` are the ones users get. Also holds
``slow_digits``, a test entrypoint (digits with a short sleep per forward) that leaves time to
signal or kill a rank mid-run; the runtime imports it as ``_runtime_job:slow_digits`` with this
folder on PYTHONPATH.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # for tests.launcher when this module is imported as _runtime_job
from tests import launcher  # noqa: E402
from tests.launcher import metrics, task_env, wait_for  # noqa: E402, F401

start_local = launcher.start  # tests start ranks through the one shared launcher

QUEUE_TIMEOUT = 600  # seconds a test job may wait behind other jobs on the shared local cluster
HERE = Path(__file__).resolve().parent


def slow_digits(train):  # type: ignore[no-untyped-def]
    """digits, with ``train.options.delay_s`` seconds of sleep per training forward."""
    import torch

    from hpctrain.examples import digits

    task = digits.build(train)
    delay = float(train.options.get("delay_s", 0.01))
    inner = task.loss

    def loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if outputs.requires_grad:
            time.sleep(delay)
        return inner(outputs, targets)

    task.loss = loss
    return task


def raises_at_step(train):  # type: ignore[no-untyped-def]
    """digits whose training forward raises at step ``train.options.at``: a bug, the same every time."""
    from hpctrain.examples import digits

    task = digits.build(train)
    at = int(train.options.get("at", 5))
    inner = task.loss
    forwards = [0]

    def loss(outputs, targets):  # type: ignore[no-untyped-def]
        if outputs.requires_grad:
            if forwards[0] == at:
                raise ValueError(f"bad batch at forward {at}")
            forwards[0] += 1
        return inner(outputs, targets)

    task.loss = loss
    return task


def write_run_dir(
    run_dir: Path,
    train: dict,
    nodes: int = 1,
    tasks_per_node: int = 1,
    resources_gpus: int = 0,
    **job: object,
) -> Path:
    """A run dir with spec.json for a job on the local site (CPU partition unless GPUs are asked)."""
    from hpctrain import spec

    run_dir.mkdir(parents=True, exist_ok=True)
    data = {
        "name": "runtime-test",
        "resources": {
            "nodes": nodes,
            "tasks_per_node": tasks_per_node,
            "partition": "debug" if resources_gpus else "cpu",
            "gpus_per_node": resources_gpus,
            "time": "00:10:00",
            "mem": "2G",
        },
        "train": {"entrypoint": "hpctrain.examples.digits:build", **train},
        **job,
    }
    # Inside the job the runtime must import test entrypoints such as _runtime_job:slow_digits.
    data["env"] = {
        "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)]),
        "OMP_NUM_THREADS": "1",
        **dict(job.get("env") or {}),
    }  # type: ignore[call-overload]
    job_file = run_dir / "job.yaml"
    job_file.write_text(yaml.safe_dump(data))
    resolved = spec.resolve(spec.load_job(job_file), spec.load_site(REPO / "site-configs" / "local.yaml"))
    (run_dir / "spec.json").write_bytes(spec.dumps(resolved))
    return run_dir


def run_local(run_dir: Path, world_size: int, timeout: float = 120) -> list[int | None]:
    """Run all ranks on this host to the end (``tests/launcher.py``); their exit codes."""
    return launcher.run(run_dir, world_size, timeout)


def events(run_dir: Path) -> list[str]:
    return [m["event"] for m in metrics(run_dir) if m["kind"] == "event"]


def latest_step(run_dir: Path) -> int:
    steps = [m["step"] for m in metrics(run_dir) if m["kind"] == "train"]
    return max(steps, default=0)


# ------------------------------------------------------------------------------------------------
# A real Slurm job (2 nodes x 2 tasks by default)
# ------------------------------------------------------------------------------------------------


def submit(run_dir: Path) -> str:
    """sbatch the run dir's job with the product's own template (trap, requeue, kill-on-bad-exit)."""
    from hpctrain import spec
    from hpctrain.scheduler import render

    resolved = spec.loads((run_dir / "spec.json").read_bytes())
    path = run_dir / "job.sbatch"
    path.write_text(render.render(resolved, run_dir))
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        ["sbatch", "--parsable", str(path)], capture_output=True, text=True, check=True, env=task_env(run_dir)
    )
    return out.stdout.strip().split(";")[0]


def job_state(job_id: str) -> str:
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=False
    ).stdout
    for field in out.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return "UNKNOWN"


def wait_state(job_id: str, states: set[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    state = job_state(job_id)
    while state not in states and time.monotonic() < deadline:
        time.sleep(0.5)
        state = job_state(job_id)
    return state


def cluster_up() -> bool:
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    unusable = ("down", "drain", "fail", "inval", "unk", "not_responding")
    states = out.stdout.split()
    return out.returncode == 0 and any(not s.lower().startswith(unusable) for s in states)
