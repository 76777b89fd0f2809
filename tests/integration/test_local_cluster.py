"""Integration tests for scripts/local-cluster.sh against a real local Slurm cluster.

No mocks: these tests talk to the slurmctld/slurmd/slurmdbd that
``scripts/local-cluster.sh up`` starts on this host (run as root).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "local-cluster.sh"
NODES = ("node1", "node2")
GPUS_PER_NODE = 4


def run(*args: str, timeout: float = 180, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=check)


def cluster(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = run(str(SCRIPT), *args, timeout=timeout, check=False)
    assert proc.returncode == 0, (
        f"local-cluster.sh {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    )
    return proc


def node_info(name: str) -> dict[str, str]:
    out = run("scontrol", "-o", "show", "node", name).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def wait_for(predicate, timeout: float, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def sacct_job(job_id: str) -> list[dict[str, str]]:
    """sacct rows of a job, newest submission first: ids repeat after a `down --wipe`."""
    fields = "JobID,State,NodeList,ExitCode,Submit"
    proc = run("sacct", "--parsable2", "-n", "-j", job_id, "-o", fields, check=False)
    if proc.returncode != 0:
        return []
    keys = fields.split(",")
    rows = [dict(zip(keys, line.split("|"), strict=False)) for line in proc.stdout.splitlines() if line]
    return sorted(rows, key=lambda r: r.get("Submit", ""), reverse=True)


@pytest.fixture(scope="module")
def local_cluster() -> None:
    if shutil.which("sinfo") is None:
        pytest.skip("Slurm is not installed (no 'sinfo' on PATH); run scripts/local-cluster.sh up as root")
    if os.geteuid() != 0:
        pytest.skip("scripts/local-cluster.sh must run as root")
    cluster("up")


@pytest.mark.cluster
def test_cluster_is_up(local_cluster: None) -> None:
    status = cluster("status")
    assert "cluster: usable" in status.stdout
    assert run("sinfo", "-h").returncode == 0
    assert run("sacct", "-n", "-X").returncode == 0


@pytest.mark.cluster
@pytest.mark.parametrize("node", NODES)
def test_node_idle_with_gpus(local_cluster: None, node: str) -> None:
    info = node_info(node)
    # Other tests may be running jobs: IDLE, MIXED or ALLOCATED are all healthy,
    # but no DOWN/DRAIN/FAIL/NOT_RESPONDING flags.
    assert re.fullmatch(r"(IDLE|MIXED|ALLOCATED)", info["State"]), info["State"]
    assert info["Gres"].startswith(f"gpu:{GPUS_PER_NODE}"), info["Gres"]
    assert f"gres/gpu={GPUS_PER_NODE}" in info["CfgTRES"], info["CfgTRES"]
    assert info["CPUTot"] == "8"


@pytest.mark.cluster
def test_two_node_gpu_job_runs_and_is_accounted(local_cluster: None) -> None:
    with tempfile.TemporaryDirectory(prefix="hpctrain-lc-") as tmp:
        os.chmod(tmp, 0o777)
        out = Path(tmp) / "job.out"
        proc = run(
            "sbatch",
            "--parsable",
            "--wait",
            "-N2",
            "--ntasks-per-node=2",
            "--gpus-per-node=2",
            "-t",
            "5",
            "-o",
            str(out),
            "--wrap",
            "srun printenv SLURMD_NODENAME",
            timeout=180,
        )
        job_id = proc.stdout.strip().split(";")[0]
        assert job_id.isdigit(), proc.stdout
        names = out.read_text().split()
    assert sorted(names) == ["node1", "node1", "node2", "node2"]
    rows = wait_for(
        # slurmdbd first records the batch host alone and the full node list a moment later.
        lambda: [
            r
            for r in sacct_job(job_id)
            if r["JobID"] == job_id and r["State"] == "COMPLETED" and r["NodeList"] == "node[1-2]"
        ],
        timeout=30,
    )
    assert rows, f"job {job_id} not COMPLETED in sacct: {sacct_job(job_id)}"
    assert rows[0]["NodeList"] == "node[1-2]"
    assert rows[0]["ExitCode"] == "0:0"


@pytest.mark.cluster
def test_up_is_idempotent_and_quick(local_cluster: None) -> None:
    pids_before = run("pgrep", "-x", "slurmctld", check=False).stdout.split()
    start = time.monotonic()
    cluster("up")
    elapsed = time.monotonic() - start
    assert elapsed < 20, f"second 'up' took {elapsed:.1f}s"
    assert run("pgrep", "-x", "slurmctld", check=False).stdout.split() == pids_before
    assert len(run("pgrep", "-x", "slurmd", check=False).stdout.split()) == len(NODES)


@pytest.mark.cluster
def test_accounting_toggle(local_cluster: None) -> None:
    try:
        cluster("accounting", "off")
        assert run("sacct", "-n", "-X", check=False).returncode != 0
        assert cluster("accounting").stdout.strip() == "off"
        # The cluster still schedules work without accounting.
        proc = run("srun", "-N2", "-t", "2", "hostname", timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        cluster("accounting", "off")  # idempotent
    finally:
        cluster("accounting", "on")
    assert run("sacct", "-n", "-X", check=False).returncode == 0
    assert cluster("accounting").stdout.strip() == "on"
