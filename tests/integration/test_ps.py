"""Parameter-server jobs through `hpctrain submit` on the real local Slurm: heterogeneous jobs.

The jobs import ``tests.launcher:faulty`` (the test-only fault injection) from the repository,
which the submitting environment's PYTHONPATH carries into the job.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from hpctrain.rundir import Result, RunDir
from tests.conftest import JOBS, run_cli
from tests.integration.cluster import require_cluster, run_dir, submit, wait_state

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

PS_JOB = JOBS / "digits-ps-async.yaml"


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def components(job_id: str) -> list[dict[str, str]]:
    """`scontrol show job` parsed: one dict per hetjob component."""
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True)
    return [dict(re.findall(r"(\w+)=(\S*)", block)) for block in out.stdout.split("\n\n") if block.strip()]


def run_ps(*overrides: str) -> tuple[dict, list[dict[str, str]], Result]:
    done = submit(
        PS_JOB,
        "train.steps=200",
        "resources.tasks_per_node=2",
        "train.parallel.ps.worker_timeout=15",
        "train.timeout_s=60",
        *overrides,
    )
    entry = wait_state(done["job_id"], {"COMPLETED"}, timeout=400)
    parts = components(done["job_id"])
    rdir = run_dir(entry)
    batch = (
        (rdir / "logs" / "batch.log").read_text(errors="replace")
        if (rdir / "logs" / "batch.log").exists()
        else ""
    )
    assert entry["state"] == "COMPLETED", (entry, batch[-3000:])
    result = RunDir(rdir).read_result()
    assert isinstance(result, Result), result
    return entry, parts, result


def test_sync_in_graph_hetjob_servers_and_workers_in_separate_components(hpctrain_home: Path) -> None:
    """Sync training with in-graph feeding: server 0 on component 0 sends the workers their batches."""
    entry, parts, result = run_ps("train.parallel.ps.mode=sync", "train.parallel.ps.feeding=in-graph")
    assert [p["HetJobOffset"] for p in parts] == ["0", "1"]
    servers, workers = parts
    assert (servers["Partition"], servers["NumTasks"]) == ("cpu", "1")
    assert (workers["Partition"], workers["NumTasks"]) == ("debug", "2")
    assert [p["JobState"] for p in parts] == ["COMPLETED", "COMPLETED"], parts
    # Rank 0 (the server) ran on component 0's node, the workers on component 1's.
    assert result.nodes is not None and result.nodes["servers"] == [servers["NodeList"]]
    assert set(result.nodes["workers"]) == {workers["NodeList"]}
    assert (result.status, result.step, result.layout) == ("completed", 200, "ps")
    assert result.eval_accuracy is not None and result.eval_accuracy > 0.9
    assert entry["progress"]["train"]["workers_alive"] == 2
    assert "in-graph feeding" in (run_dir(entry) / "logs" / "rank-0.log").read_text(errors="replace")


def test_async_hetjob_survives_a_dead_worker(hpctrain_home: Path) -> None:
    entry, _, result = run_ps(
        "train.parallel.ps.mode=async",
        "train.entrypoint=tests.launcher:faulty",
        "train.options.crash_worker=1",
        "train.options.crash_step=20",
    )
    assert result.step == 200
    assert result.per_worker is not None and result.per_worker["1"].status == "dropped"
    events = [json.loads(x) for x in (run_dir(entry) / "metrics.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "worker_dropped" and e["worker"] == 1 for e in events)
    assert result.eval_accuracy is not None and result.eval_accuracy > 0.85
    # The batch script asked the runtime whether training finished although a task exited 3.
    log = (run_dir(entry) / "logs" / "batch.log").read_text(errors="replace")
    assert "training finished although a task exited with code" in log
    table = run_cli("status", entry["job_id"]).stdout
    assert "parameter server (async), staleness mean" in table
    assert "worker 1: dropped" in table
