"""`parallel: fsdp|tp|pp` on one process runs that layout's code path, with the same losses as plain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpctrain import spec
from tests.conftest import REPO, SITES


def run_one(tmp_path: Path, parallel: str) -> tuple[str, list[float]]:
    run_dir = tmp_path / parallel
    run_dir.mkdir()
    job = {
        "name": f"one-{parallel}",
        "resources": {"nodes": 1, "tasks_per_node": 1},
        "train": {
            "entrypoint": "hpctrain.examples.gpt:build",
            "parallel": parallel,
            "steps": 4,
            "batch_size": 8,
            "log_every": 1,
            "options": {"size": "tiny"},
        },
    }
    (run_dir / "job.yaml").write_text(yaml.safe_dump(job))
    resolved = spec.resolve(spec.load_job(run_dir / "job.yaml"), spec.load_site(SITES / "local.yaml"))
    (run_dir / "spec.json").write_bytes(spec.dumps(resolved))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE"))}
    proc = subprocess.run(
        [sys.executable, "-m", "hpctrain.runtime"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**env, "HPCTRAIN_RUN_DIR": str(run_dir), "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    start = next(x for x in lines if x.get("event") == "start")
    return start["layout"], [x["loss"] for x in lines if x.get("kind") == "train"]


def test_one_process_layouts_run_their_own_code_with_the_same_losses(tmp_path: Path) -> None:
    layout, plain = run_one(tmp_path, "ddp")
    assert layout == "single" and len(plain) == 4
    for parallel in ("fsdp", "tp", "pp"):
        layout, losses = run_one(tmp_path, parallel)
        assert layout == parallel
        assert losses == pytest.approx(plain, rel=1e-5, abs=1e-6), parallel
