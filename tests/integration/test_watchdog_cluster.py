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
from hpctrain.rundir.slots import read_slot_file, slot_path
from tests.conftest import JOBS, run_cli
from tests.integration.cluster import TERMINAL, require_cluster, run_dir, submit, wait_state

pytestmark = pytest.mark.cluster

STOPPED_RANK = 2  # the first rank of node2: also its node's first heartbeat writer, which must be taken over
HANG_FLOOR_S = 10
HEARTBEAT_INTERVAL_S = 1
DETECTION_TARGET_S = 60
MEMORY_EVERY_STEP = "train.memory_checkpoint_every=1"


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


def stop_in_phase(run: RunDir, job_id: str, pid: int, phase: str, timeout: float = 60) -> None:
    """SIGSTOP `pid` (rank STOPPED_RANK) while its heartbeat slot says it is in `phase`: stop it, read
    the slot again (a stopped rank's slot no longer changes), and let it go on if it had left."""
    slots = slot_path(run.root.resolve(), job_id, 0, "node2")  # both nodes are this host: its /dev/shm
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if rank_phase(slots) == phase:
            os.kill(pid, signal.SIGSTOP)
            if rank_phase(slots) == phase:
                return
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.001)
    raise AssertionError(f"rank {STOPPED_RANK} was never seen in phase {phase} within {timeout} s")


def rank_phase(slots: Path) -> str | None:
    return next((s.beat.phase for s in read_slot_file(slots) if s.rank == STOPPED_RANK), None)


@pytest.mark.parametrize(
    ("watchdog", "phase"),
    [
        ([f"watchdog.hang_timeout={HANG_FLOOR_S}"], None),
        # hang_timeout alone would take 120 s: only the stopped rule names the rank within the target.
        (["watchdog.hang_timeout=120", "watchdog.stopped_timeout=2"], None),
        # A checkpoint into node memory every step: stopped in one, the rank is named just as fast.
        (["watchdog.hang_timeout=120", "watchdog.stopped_timeout=2", MEMORY_EVERY_STEP], "snapshot"),
    ],
    ids=["hang_timeout", "stopped_timeout", "stopped_in_memory_snapshot"],
)
def test_a_stopped_rank_is_named_with_its_node_and_stacks_and_the_job_ends(
    watchdog: list[str], phase: str | None, hpctrain_home: Path
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
        if phase is None:
            os.kill(pid, signal.SIGSTOP)
        else:
            stop_in_phase(run, job_id, pid, phase)
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
        if phase is not None:
            assert report.hung[0].phase == phase, report
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
