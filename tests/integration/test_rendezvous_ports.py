"""Rendezvous ports of a real job: outside the node's ephemeral range, and the printed one is the one used."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpctrain.rundir.ports import ephemeral_range
from tests.conftest import JOBS
from tests.integration.cluster import require_cluster, run_dir, submit, wait_state

pytestmark = pytest.mark.cluster

QUICK = ["train.steps=20", "train.log_every=10", "train.eval_every=0", "train.checkpoint_every=0"]


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def test_the_printed_rendezvous_is_the_ranks_and_outside_the_ephemeral_range(hpctrain_home: Path) -> None:
    """Issue 23 item 13: the batch log printed `rendezvous node1:<20000 + id % 20000>` while the ranks
    met elsewhere. The job line, the attempt line and every rank name the same port; none is ephemeral
    on this host (both nodes of the local cluster are this host)."""
    entry = wait_state(submit(JOBS / "digits-ddp.yaml", *QUICK)["job_id"], {"COMPLETED"}, timeout=300)
    logs = run_dir(entry) / "logs"
    batch = (logs / "batch.log").read_text()
    assert entry["state"] == "COMPLETED", batch[-3000:]
    printed = re.findall(r"^hpctrain: (?:job|attempt) .*, rendezvous (\S+):(\d+)", batch, re.MULTILINE)
    used = [
        match
        for rank_log in sorted(logs.glob("rank-*.log"))
        for match in re.findall(r"rendezvous (\S+):(\d+)", rank_log.read_text())
    ]
    assert len(printed) == 2 and len(used) == 4, (printed, used)
    assert set(printed) == set(used), (printed, used)
    low, high = ephemeral_range()
    port = int(printed[0][1])
    assert not low <= port <= high, (port, (low, high))
