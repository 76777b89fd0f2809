"""Helpers for tests that drive the real local Slurm cluster through the real `hpctrain` CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_cli

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "SUBMIT_FAILED"}


def require_cluster() -> None:
    """Fail (not skip) when the cluster is down: scripts/test.sh brings it up before the tests."""
    if shutil.which("sinfo") is None:
        pytest.fail("Slurm is not installed: run scripts/local-cluster.sh up (scripts/test.sh does)")
    proc = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, check=False, timeout=30)
    if "UP" not in proc.stdout:
        pytest.fail(f"slurmctld is not answering: {proc.stdout.strip()} {proc.stderr.strip()}")


def cancel_leftovers(submitted: list[str]) -> Iterator[None]:
    """A test's body with the cluster up; afterwards the jobs it left in `submitted` are cancelled, so
    a failed test leaves none of its arrays behind on the shared cluster."""
    require_cluster()
    yield
    if submitted:
        subprocess.run(["scancel", *submitted], check=False)
        submitted.clear()


def submit(
    job: str | Path, *overrides: str, site: str = "local", env: dict[str, str] | None = None
) -> dict[str, Any]:
    args = ["submit", str(job), "--site", site, "--json"]
    for item in overrides:
        args += ["--set", item]
    proc = run_cli(*args, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def status(job_id: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = run_cli("status", job_id, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    (entry,) = json.loads(proc.stdout)
    return entry


def wait_state(
    job_id: str, states: set[str], timeout: float = 240, env: dict[str, str] | None = None, poll: float = 1.0
) -> dict[str, Any]:
    """Poll `hpctrain status` until the job is in one of `states` (or any terminal state)."""
    deadline = time.monotonic() + timeout
    entry: dict[str, Any] = {}
    while time.monotonic() < deadline:
        entry = status(job_id, env)
        if entry["state"] in states or entry["state"] in TERMINAL:
            return entry
        time.sleep(poll)
    pytest.fail(f"job {job_id} still {entry.get('state')} after {timeout} s: {entry}")


def scontrol_job(job_id: str) -> str:
    return subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=False
    ).stdout


def make_eligible(job_id: str) -> None:
    """A requeued job waits ~120 s (BeginTime) before Slurm runs it again; tests skip most of the wait.
    Not all of it: a batch script launched in the same second as the requeue's credential revocation
    is refused ("Job credential revoked") and the job FAILS, so the start is 2 s on."""
    subprocess.run(
        ["scontrol", "update", f"jobid={job_id}", "starttime=now+2"], capture_output=True, check=False
    )


def sacct_elements(job_id: str, field: str, timeout: float = 60) -> dict[str, str]:
    """`field` of each element of array `job_id` as accounting holds it ({"123_0": "1G", ...}),
    waiting until accounting lists every element that the queue no longer does."""
    deadline = time.monotonic() + timeout
    while True:
        proc = subprocess.run(
            ["sacct", "-n", "-X", "--parsable2", "-j", job_id, "-o", f"JobID,{field}"],
            capture_output=True,
            text=True,
            check=False,
        )
        rows = dict(line.split("|", 1) for line in proc.stdout.splitlines() if "|" in line)
        if (rows and not any("[" in key for key in rows)) or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def run_dir(entry: dict[str, Any]) -> Path:
    return Path(entry["run_dir"])


__all__ = [
    "REPO",
    "make_eligible",
    "require_cluster",
    "run_dir",
    "sacct_elements",
    "scontrol_job",
    "status",
    "submit",
    "wait_state",
]
