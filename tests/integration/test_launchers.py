"""Every launcher the template offers, through `hpctrain submit` on the real cluster: 2 nodes x 2 ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import JOBS
from tests.integration.cluster import require_cluster, run_dir, submit, wait_state

pytestmark = pytest.mark.cluster


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


@pytest.mark.parametrize(("launcher", "seen_as"), [("torchrun", "torchrun"), ("mpi", "mpi")])
def test_launcher_trains_on_two_nodes(launcher: str, seen_as: str, hpctrain_home: Path) -> None:
    done = submit(
        JOBS / "digits-ddp.yaml",
        f"launcher={launcher}",
        "train.steps=30",
        "train.eval_every=0",
        "train.checkpoint_every=0",
    )
    entry = wait_state(done["job_id"], {"COMPLETED"}, timeout=300)
    rdir = run_dir(entry)
    logs = {p.name: p.read_text(errors="replace")[-2000:] for p in (rdir / "logs").glob("*.log")}
    assert entry["state"] == "COMPLETED", logs
    result = json.loads((rdir / "result.json").read_text())
    assert result["world_size"] == 4 and result["step"] == 30
    start = next(json.loads(x) for x in (rdir / "metrics.jsonl").read_text().splitlines() if '"start"' in x)
    assert start["launcher"] == seen_as
    assert {f"rank-{r}.log" for r in range(4)} <= set(logs), sorted(logs)
