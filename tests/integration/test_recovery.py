"""Restores from memory on the real local cluster: a killed rank and a lost node cost seconds of steps.

A 2 x 2 DDP digits job keeps a checkpoint in node memory every 5 steps and on disk every 50. A rank
killed with kill -9 after a memory checkpoint newer than the disk one: the next attempt resumes from
the memory step, not the disk step. A lost node whose memory is gone with it: its ranks' state comes
from the copies the other node holds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hpctrain.runtime.memory_checkpoint import run_memory_folder
from tests.integration import faults
from tests.integration.cluster import require_cluster, wait_state
from tests.integration.test_restarts import QUEUE_S, ends, events, logs, submit_two_by_two
from tests.launcher import wait_for

pytestmark = pytest.mark.cluster
TRAIN = {"steps": 300, "checkpoint_every": 50, "memory_checkpoint_every": 5, "options": {"delay_s": 0.1}}


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def memory_ahead_of_disk(run: Path, least: int) -> bool:
    """A memory checkpoint of step `least` or later, newer than every disk checkpoint."""
    memory = [e["step"] for e in events(run, "memory_checkpoint")]
    disk = [e["step"] for e in events(run, "checkpoint")]
    return bool(memory) and max(memory) >= least and max(memory) > max(disk, default=-1)


def restored(run: Path) -> dict[str, Any]:
    [event] = events(run, "restored")
    return {**event, **event.get("detail", {})}


def test_a_killed_rank_resumes_from_memory_not_from_disk(hpctrain_home: Path, tmp_path: Path) -> None:
    job_id, run = submit_two_by_two(tmp_path, "memory-rank", TRAIN)
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        assert wait_for(lambda: memory_ahead_of_disk(run, 60), timeout=300), logs(run)
        remembered = max(e["step"] for e in events(run, "memory_checkpoint"))
        os.kill(int((run / "pids" / "rank-1").read_text()), signal.SIGKILL)
        final = wait_state(job_id, set(), timeout=600)
        assert final["state"] == "COMPLETED", logs(run)
        assert [outcome for outcome, _ in ends(run)] == ["rank_failure", "completed"], ends(run)
        back = restored(run)
        assert back["source"] == "memory", back
        assert back["step"] >= remembered and back["step"] > back["disk_step"], back
        result = json.loads((run / "result.json").read_text())
        assert result["step"] == 300 and result["eval_accuracy"] >= 0.9, result
        print(
            f"\nkilled after memory step {remembered}: resumed at {back['step']} (disk {back['disk_step']}), "
            f"{back['rolled_back_steps']} steps rolled back, state loaded in {back['load_s']} s"
        )
        assert not run_memory_folder(run).exists()  # removed when training completed
    finally:
        subprocess.run(["scancel", job_id], check=False)


@pytest.mark.skipif(
    os.environ.get("HPCTRAIN_DISRUPTIVE") != "1",
    reason="kills node2's slurmd: set HPCTRAIN_DISRUPTIVE=1 (under flock /work/cluster-disruptive.lock)",
)
@pytest.mark.timeout(1500)
def test_a_lost_nodes_ranks_restore_from_the_peer_copy(hpctrain_home: Path, tmp_path: Path) -> None:
    """node2 loses its power and its memory; the job, which may not shrink and may go back to
    node2, requeues; once node2 is back, ranks 2 and 3 load the copies node1 held for them."""
    restart = {"shrink": False, "exclude_failed_nodes": False}
    train = {**TRAIN, "steps": 400}
    job_id, run = submit_two_by_two(tmp_path, "memory-node", train, restart=restart)
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        assert wait_for(lambda: memory_ahead_of_disk(run, 60), timeout=300), logs(run)
        remembered = max(e["step"] for e in events(run, "memory_checkpoint"))
        faults.kill_node("node2")
        shutil.rmtree(run_memory_folder(run) / "node2")  # the node's memory went with its power
        assert wait_for(lambda: bool(ends(run)), timeout=300), logs(run)
        # A rank of node2 that outlived its slurmd for a moment may have saved again: the attempt is
        # over now, so nothing writes there any more.
        shutil.rmtree(run_memory_folder(run) / "node2", ignore_errors=True)
        faults.recover_nodes()
        final = wait_state(job_id, set(), timeout=900, poll=1)
        assert final["state"] == "COMPLETED", logs(run)
        assert ends(run)[0] == ("node_failure", ["node2"]), ends(run)
        back = restored(run)
        assert back["source"] == "peer_memory" and back["peer_copies"] == 2, back
        assert back["step"] >= remembered and back["step"] > back["disk_step"], back
        result = json.loads((run / "result.json").read_text())
        assert result["step"] == 400 and result["world_size"] == 4 and result["eval_accuracy"] >= 0.9, result
        print(f"\nnode2 lost after memory step {remembered}: resumed at {back['step']} from node1's copies")
    finally:
        subprocess.run(["scancel", job_id], check=False)
        faults.recover_nodes()
