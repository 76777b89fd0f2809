"""Against the real local Slurm: `hpctrain status` warns about a pending job that can never run (issue 36
item 1): one whose ExcNodeList holds every node of its partition, and one that waits (afterok) on a run
that ended without success (DependencyNeverSatisfied). Nothing runs: both jobs only ever pend."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

import hpctrain
from tests.conftest import run_cli
from tests.integration.cluster import require_cluster

pytestmark = pytest.mark.cluster

HELD = ["train.steps=30", "begin=now+1hour"]


def test_status_warns_about_an_exclusion_of_every_node_and_a_dependency_that_can_never_be_met(
    hpctrain_home: Path,
) -> None:
    require_cluster()
    held = hpctrain.submit("digits-ddp", "local", HELD, backend="slurm")
    waiting = hpctrain.submit("digits-ddp", "local", ["train.steps=30"], backend="slurm", after=[held])
    try:
        subprocess.run(
            ["scontrol", "update", f"jobid={held.job_id}", "ExcNodeList=node1,node2"],
            check=True,
            capture_output=True,
        )
        table = run_cli("status")
        assert table.returncode == 0, table.stderr
        warning = f"  job {held.job_id}: can never run: its ExcNodeList node1,node2 leaves 0 of the 2 nodes"
        assert any(line.startswith(warning) for line in table.stdout.splitlines()), table.stdout
        assert f"`hpctrain cancel {held.job_id}`, then submit it again" in table.stdout

        hpctrain.cancel([held])  # afterok on a cancelled run: Slurm can never start the waiting job
        deadline = time.monotonic() + 20
        while (status := waiting.status()).blocked is None:
            assert time.monotonic() < deadline, status
            time.sleep(1)
        assert status.state == "PENDING" and status.blocked.certain
        assert f"its dependency afterok:{held.job_id}" in status.blocked.cause
        assert f"`hpctrain cancel {waiting.job_id}`" in status.blocked.fix
        detail = run_cli("status", str(waiting.job_id))
        assert f"job {waiting.job_id}: can never run: its dependency" in detail.stdout, detail.stdout
    finally:
        hpctrain.cancel([held, waiting])
