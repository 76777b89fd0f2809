"""Parallel layouts of the tiny GPT on the real local Slurm cluster: 2 nodes x 2 tasks, gloo.

Each job's loss curve must match one local process of the same model and global batch; a job saved
under fsdp=4 resumes under fsdp=2 x tp=2 with the reference's next losses. Submission, waiting and
logs go through the runtime's cluster test harness (``_runtime_job``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _runtime_job as job
import pytest

from tests.integration.cluster import require_cluster

pytestmark = pytest.mark.cluster


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


STEPS = 6
TOLERANCE = 2e-3
TRAIN: dict[str, Any] = {
    "entrypoint": "hpctrain.examples.gpt:build",
    "options": {"size": "tiny"},
    "steps": STEPS,
    "batch_size": 16,
    "lr": 3e-3,
    "log_every": 1,
}
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
# pp is the outermost mesh dim, so the two stages sit on different nodes; tp stays inside a node.
LAYOUTS: dict[str, dict[str, Any]] = {
    "ddp": {"dp": 4},
    "fsdp": {"dp": 1, "fsdp": 4},
    "tp": {"dp": 2, "tp": 2},
    "pp_gpipe": {"dp": 1, "pp": 4, "pp_schedule": "gpipe"},
    "pp_1f1b": {"dp": 1, "pp": 4, "pp_schedule": "1f1b"},
    "fsdp_tp": {"dp": 1, "fsdp": 2, "tp": 2},
    "dp_pp": {"dp": 2, "pp": 2, "pp_schedule": "1f1b"},
    "fsdp_pp_gpipe": {"dp": 1, "fsdp": 2, "pp": 2, "pp_schedule": "gpipe"},
}


def losses(run_dir: Path) -> list[float]:
    return [m["loss"] for m in job.metrics(run_dir) if m.get("kind") == "train"]


def logs(run_dir: Path) -> str:
    return "\n".join(
        f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((run_dir / "logs").glob("*.log"))
    )


def run_on_cluster(run_dir: Path, parallel: dict[str, Any], **train: Any) -> list[float]:
    job.write_run_dir(
        run_dir, {**TRAIN, "parallel": {"microbatches": 4, **parallel}, **train}, nodes=2, tasks_per_node=2
    )
    job_id = job.submit(run_dir)
    job.wait_state(job_id, {"RUNNING"} | TERMINAL, timeout=job.QUEUE_TIMEOUT)
    assert job.wait_state(job_id, TERMINAL, timeout=300) == "COMPLETED", logs(run_dir)
    return losses(run_dir)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    run_dir = job.write_run_dir(tmp_path_factory.mktemp("single"), TRAIN)
    assert job.run_local(run_dir, 1, timeout=300) == [0]
    return losses(run_dir)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layout_on_two_nodes_matches_one_process(name: str, reference: list[float], tmp_path: Path) -> None:
    assert run_on_cluster(tmp_path, LAYOUTS[name]) == pytest.approx(reference, abs=TOLERANCE)


def test_fsdp4_checkpoint_resumes_as_fsdp2_tp2(reference: list[float], tmp_path: Path) -> None:
    first = run_on_cluster(tmp_path, {"dp": 1, "fsdp": 4}, steps=3, checkpoint_every=3)
    assert first == pytest.approx(reference[:3], abs=TOLERANCE)
    (tmp_path / "metrics.jsonl").unlink()
    resumed = run_on_cluster(tmp_path, LAYOUTS["fsdp_tp"])
    assert resumed == pytest.approx(reference[3:], abs=TOLERANCE)
