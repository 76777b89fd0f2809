"""`hpctrain submit --from RUN` on the real local cluster: the digits example trained 20 steps, then a
new run started from its last checkpoint trains on to 40, from step 20, with its weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import JOBS, run_cli
from tests.integration.cluster import require_cluster, run_dir, submit, wait_state

pytestmark = pytest.mark.cluster

JOB = JOBS / "digits-ddp.yaml"
TRAIN = ["train.log_every=5", "train.eval_every=0", "train.checkpoint_every=10"]


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def metrics(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]


def test_a_run_started_from_another_trains_on_from_its_last_checkpoint(hpctrain_home: Path) -> None:
    first = submit(JOB, "train.steps=20", *TRAIN)
    entry = wait_state(first["job_id"], {"COMPLETED"}, timeout=300)
    assert entry["state"] == "COMPLETED", entry
    first_dir = run_dir(entry)
    first_losses = {m["step"]: m["loss"] for m in metrics(first_dir) if m["kind"] == "train"}

    args = ["submit", str(JOB), "--site", "local", "--from", first["run_id"], "--set", "train.steps=40"]
    proc = run_cli(*args, *[a for item in TRAIN for a in ("--set", item)])
    assert proc.returncode == 0, proc.stderr
    checkpoint = first_dir / "checkpoints" / "step-00000020"
    assert f"starts from: {checkpoint} (step 20 of run {first['run_id']})" in proc.stdout, proc.stdout
    job_id = proc.stdout.split()[2]
    entry = wait_state(job_id, {"COMPLETED"}, timeout=300)
    assert entry["state"] == "COMPLETED", entry
    lines = metrics(run_dir(entry))
    (resumed,) = [m for m in lines if m["kind"] == "event" and m["event"] == "resumed"]
    assert resumed["step"] == 20 and resumed["path"] == str(checkpoint), resumed
    assert not [m for m in lines if m["kind"] == "event" and m["event"] == "start"]
    steps = [m["step"] for m in lines if m["kind"] == "train"]
    assert steps and min(steps) > 20 and max(steps) == 40, steps
    # The weights were loaded: the loss goes on from where the first run ended, not from scratch.
    first_loss = next(m["loss"] for m in lines if m["kind"] == "train")
    assert first_loss < max(first_losses.values()), (first_loss, first_losses)
    # The earlier run is never written to: its checkpoint is still there, whole.
    assert (checkpoint / "manifest.json").is_file()


def test_a_run_whose_model_differs_is_refused_before_anything_is_submitted(hpctrain_home: Path) -> None:
    first = submit(JOB, "train.steps=20", *TRAIN)
    entry = wait_state(first["job_id"], {"COMPLETED"}, timeout=300)
    assert entry["state"] == "COMPLETED", entry
    base = ["submit", str(JOB), "--site", "local", "--from", first["run_id"]]
    for extra, says in (
        (["--set", "train.steps=40", "--set", "train.options.hidden=7"], "train.options.hidden differ"),
        (["--set", "train.steps=20"], "train.steps: 20 is not above step 20"),
    ):
        runs_before = sorted((hpctrain_home / "runs").iterdir())
        proc = run_cli(*base, *extra)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert says in proc.stderr, proc.stderr
        assert sorted((hpctrain_home / "runs").iterdir()) == runs_before
