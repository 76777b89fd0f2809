"""`parallel: fsdp|tp|pp` on one process runs that layout's code path, with the same losses as plain."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.launcher import run_one_process


def run_one(tmp_path: Path, parallel: str) -> tuple[str, list[float]]:
    run_dir = tmp_path / parallel
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
    lines = run_one_process(run_dir, job)
    start = next(x for x in lines if x.get("event") == "start")
    return start["layout"], [x["loss"] for x in lines if x.get("kind") == "train"]


def test_one_process_layouts_run_their_own_code_with_the_same_losses(tmp_path: Path) -> None:
    layout, plain = run_one(tmp_path, "ddp")
    assert layout == "single" and len(plain) == 4
    for parallel in ("fsdp", "tp", "pp"):
        layout, losses = run_one(tmp_path, parallel)
        assert layout == parallel
        assert losses == pytest.approx(plain, rel=1e-5, abs=1e-6), parallel
