"""The job's Python (spec `python`): the batch script runs it, and says in one line when it lacks hpctrain."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import JOBS, run_cli
from tests.integration.cluster import require_cluster, run_dir, wait_state

pytestmark = pytest.mark.cluster


def test_a_python_without_hpctrain_fails_the_job_in_one_line(hpctrain_home: Path, tmp_path: Path) -> None:
    require_cluster()
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = bare / "bin" / "python"
    proc = run_cli(
        "submit",
        str(JOBS / "digits-ddp.yaml"),
        "--site",
        "local",
        "--json",
        "--set",
        f"python={python}",
        "--set",
        "train.steps=5",
        cwd=tmp_path,  # not the checkout, whose hpctrain/ any python started there would import
    )
    assert proc.returncode == 0, proc.stderr
    job_id = json.loads(proc.stdout)["job_id"]
    entry = wait_state(job_id, {"FAILED"}, timeout=120)
    assert entry["state"] == "FAILED", entry
    log = (run_dir(entry) / "logs" / "batch.log").read_text()
    assert f"hpctrain: {python} cannot import hpctrain; set the job's python:" in log, log
    assert "Traceback" not in log
