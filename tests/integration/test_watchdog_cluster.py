"""The hang watchdog on the real local Slurm: `kill -STOP` one rank of a 2 x 2 digits job.

The watchdog (started by the batch script beside the step) must name the stopped rank and its
node in failures/hang.json within 60 s of the stop (by hang_timeout, or by stopped_timeout where
hang_timeout is longer), leave every rank's stacks in failures/stacks/,
end the step (restart.max 0: the job ends), and `hpctrain status JOB` must print the HUNG line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hpctrain.rundir import HangReport, Heartbeat, RunDir, read_json
from tests.conftest import JOBS, run_cli
from tests.integration.cluster import TERMINAL, require_cluster, run_dir, submit, wait_state

pytestmark = pytest.mark.cluster

STOPPED_RANK = 2  # the first rank of node2: also its node's first heartbeat writer, which must be taken over
HANG_FLOOR_S = 10
HEARTBEAT_INTERVAL_S = 1
DETECTION_TARGET_S = 60


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def rank_beat(run: RunDir, rank: int) -> tuple[str, int, float | None] | None:
    """(node, step, last step time) of `rank` in the node heartbeats, once it has finished a step."""
    for beat in run.read_heartbeats():
        if isinstance(beat, Heartbeat) and rank in beat.ranks:
            mine = beat.ranks[rank]
            return beat.node, mine.step, mine.step_s
    return None


@pytest.mark.parametrize(
    "watchdog",
    [
        [f"watchdog.hang_timeout={HANG_FLOOR_S}"],
        # hang_timeout alone would take 120 s: only the stopped rule names the rank within the target.
        ["watchdog.hang_timeout=120", "watchdog.stopped_timeout=2"],
    ],
    ids=["hang_timeout", "stopped_timeout"],
)
def test_a_stopped_rank_is_named_with_its_node_and_stacks_and_the_job_ends(
    watchdog: list[str], hpctrain_home: Path
) -> None:
    entry = submit(
        JOBS / "digits-ddp.yaml",
        "train.steps=200000",
        "train.checkpoint_every=0",
        "train.eval_every=0",
        "train.log_every=100",
        *watchdog,
        f"watchdog.heartbeat_interval={HEARTBEAT_INTERVAL_S}",
        "restart.max=0",
    )
    job_id = entry["job_id"]
    pid = None
    try:
        entry = wait_state(job_id, {"RUNNING"}, timeout=300)
        assert entry["state"] == "RUNNING", entry
        run = RunDir(run_dir(entry))
        deadline = time.monotonic() + 180
        seen = rank_beat(run, STOPPED_RANK)
        while time.monotonic() < deadline and not (seen and seen[1] >= 20 and seen[2]):
            time.sleep(1)
            seen = rank_beat(run, STOPPED_RANK)
        assert seen and seen[1] >= 20, f"rank {STOPPED_RANK} never got going: {seen}"
        assert seen[0] == "node2"
        pid = int(run.pid(STOPPED_RANK).read_text())
        os.kill(pid, signal.SIGSTOP)
        stopped_at = time.time()

        deadline = time.monotonic() + DETECTION_TARGET_S + 30
        report = read_json(run.hang_report, HangReport)
        while time.monotonic() < deadline and not isinstance(report, HangReport):
            time.sleep(0.5)
            report = read_json(run.hang_report, HangReport)
        assert isinstance(report, HangReport), f"no hang report: {run.batch_log.read_text()[-2000:]}"
        detection_s = report.time - stopped_at
        print(f"hang detected and diagnosed {detection_s:.1f} s after the stop: {report.summary}")
        assert detection_s < DETECTION_TARGET_S
        assert [(r.rank, r.node) for r in report.hung] == [(STOPPED_RANK, "node2")], report
        assert sorted(r.rank for r in report.waiting) == [0, 1, 3]
        assert report.summary.startswith(f"rank {STOPPED_RANK} on node2 hung at step ")
        assert "others waiting in" in report.summary
        for rank in range(4):
            text = run.rank_stacks(rank).read_text()
            assert f"rank {rank} pid" in text and '"MainThread"' in text, text  # py-spy's view, stopped too
            if rank != STOPPED_RANK:
                assert "== faulthandler ==" in text and "most recent call first" in text, text

        final = wait_state(job_id, TERMINAL, timeout=120)
        assert final["state"] in ("FAILED", "CANCELLED"), final
        shown = run_cli("status", job_id)
        assert shown.returncode == 0, shown.stderr
        assert f"HUNG: rank {STOPPED_RANK} on node2 hung at step" in shown.stdout, shown.stdout
        assert f"stacks: {run.stacks}" in shown.stdout
        as_json = json.loads(run_cli("status", job_id, "--json").stdout)[0]
        assert as_json["health"]["hung"] == report.summary
    finally:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        subprocess.run(["scancel", job_id], capture_output=True, check=False)
