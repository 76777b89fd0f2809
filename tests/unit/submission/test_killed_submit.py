"""A submit killed at any point leaves no job that hpctrain does not know about, once `index check` ran.

Real kills of a real `hpctrain submit` process, at random moments, with a stand-in sbatch that takes
a while (a busy controller) and a stand-in squeue that lists the jobs it took with their comments."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpctrain.tracking.index import Index
from tests.conftest import JOBS, REPO

STAND_INS = {
    # Takes the job after a while: the job id and the script's --comment go to the queue.
    "sbatch": """#!/bin/bash
script="${@: -1}"
touch "$FAKE/inflight/$$"
sleep "0.$((RANDOM % 4))"
comment=$(sed -n 's/^#SBATCH --comment=//p' "$script" | tr -d '"')
echo "$$|$comment" >> "$FAKE/queue"
rm -f "$FAKE/inflight/$$"
echo "$$"
""",
    "squeue": '#!/bin/sh\ncat "$FAKE/queue" 2>/dev/null\n',
    "sacct": "#!/bin/sh\nexit 0\n",
}


SUBMIT_OPTIONS = ["--site", "local", "--backend", "slurm", "--no-check"]


@pytest.fixture
def fake_slurm(tmp_path: Path) -> dict[str, str]:
    fake = tmp_path / "slurm"
    (fake / "bin").mkdir(parents=True)
    (fake / "inflight").mkdir()
    for name, text in STAND_INS.items():
        path = fake / "bin" / name
        path.write_text(text)
        path.chmod(0o755)
    return {
        "FAKE": str(fake),
        "PATH": f"{fake / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "HPCTRAIN_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(REPO),
    }


def submit(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "hpctrain.cli.main", "submit", str(JOBS / "digits-ddp.yaml"), *SUBMIT_OPTIONS],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def queued(fake: Path) -> dict[str, str]:
    """Job id -> the comment the stand-in sbatch took it with."""
    text = (fake / "queue").read_text() if (fake / "queue").exists() else ""
    return dict(line.split("|", 1) for line in text.splitlines())


def test_no_killed_submit_leaves_an_untracked_job(fake_slurm: dict[str, str]) -> None:
    fake = Path(fake_slurm["FAKE"])
    started = time.monotonic()
    assert submit(fake_slurm).wait(60) == 0  # one that runs to the end: how long a submit takes
    whole = time.monotonic() - started
    chooser = random.Random(23)
    kills = [signal.SIGKILL, signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT]
    for attempt in range(15):
        proc = submit(fake_slurm)
        time.sleep(chooser.uniform(0.2, whole + 0.2))
        proc.send_signal(kills[attempt % len(kills)])
        proc.wait(60)
    deadline = time.monotonic() + 30
    while any((fake / "inflight").iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)  # a stand-in sbatch outlives the submit that SIGKILL ended
    check = subprocess.run(
        [sys.executable, "-m", "hpctrain.cli.main", "index", "check"],
        env={**os.environ, **fake_slurm},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    runs = {run.run_id: run for run in Index(Path(fake_slurm["HPCTRAIN_HOME"])).runs()}
    tracked = {run.job_id for run in runs.values()}
    jobs = queued(fake)
    assert len(jobs) >= 2, "the kills never came after sbatch: nothing was tested"
    untracked = {job: comment for job, comment in jobs.items() if job not in tracked}
    assert untracked == {}, f"jobs hpctrain does not know: {untracked}\n{check.stdout}{check.stderr}"
    # Each job is the job of the run whose id it carries.
    for job, comment in jobs.items():
        run_id = comment.split()[0].removeprefix("hpctrain-run=")
        assert runs[run_id].job_id == job
    # A submit killed before it recorded the run leaves a directory the index does not know, never a
    # job: the run is recorded before sbatch is asked.
    carried = {comment.split()[0].removeprefix("hpctrain-run=") for comment in jobs.values()}
    unindexed = Index(Path(fake_slurm["HPCTRAIN_HOME"])).check().unindexed_dirs
    assert not carried & set(unindexed)
