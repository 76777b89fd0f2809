"""A job array on the real local Slurm: each element trains in its own array-N/, status and logs show both."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import JOBS, run_cli
from tests.integration.cluster import require_cluster, run_dir, status, submit, wait_state

pytestmark = pytest.mark.cluster

ONE_NODE_QUICK = [
    "array=0-1",
    "resources.nodes=1",
    "train.steps=20",
    "train.log_every=10",
    "train.eval_every=0",
    "train.checkpoint_every=0",
]


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def test_array_elements_have_their_own_status_and_logs(hpctrain_home: Path) -> None:
    job_id = submit(JOBS / "digits-ddp.yaml", *ONE_NODE_QUICK)["job_id"]
    entry = wait_state(job_id, {"COMPLETED"}, timeout=400)
    assert entry["state"] == "COMPLETED", entry
    entry = status(job_id)
    elements = entry["elements"]
    assert [e["index"] for e in elements] == [0, 1], elements
    for element in elements:
        assert element["state"] == "COMPLETED", element
        assert element["progress"]["result"]["step"] == 20, element
        assert Path(element["run_dir"]) == run_dir(entry) / f"array-{element['index']}"
    table = run_cli("status", job_id).stdout
    assert f"{job_id}_0" in table and f"{job_id}_1" in table and table.count("20/20") == 2, table
    for index in (0, 1):
        batch = run_cli("logs", job_id, "--element", str(index))
        assert batch.returncode == 0 and "step ended with exit code 0" in batch.stdout, batch.stderr
        rank = run_cli("logs", job_id, "--element", str(index), "--rank", "1")
        assert rank.returncode == 0 and "step 20/20" in rank.stdout, rank.stdout + rank.stderr
