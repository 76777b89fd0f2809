"""Server shard checkpoints: checkpoints/step-N/server-K.pt plus manifest.json, atomic, resumable.

Each server writes its own shard file (tmp + rename). Whichever server finds all shard files of a
step present after writing its own writes the manifest, so no server waits on another; a step
directory without a manifest is incomplete and never resumed from. Shards are keyed by parameter
name, so a restart with a different number of servers can still pick its tensors out.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from .common import write_json_atomic

_STEP_DIR = re.compile(r"^step-(\d+)$")


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step}"


def save_shard(run_dir: Path, step: int, server: int, servers: int, state: dict[str, Any], keep: int) -> Path:
    """Write this server's shard for ``step``; write the manifest and prune if the set is complete."""
    folder = step_dir(run_dir, step)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"server-{server}.pt"
    tmp = folder / f".server-{server}.pt.tmp{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)
    present = sorted(p.name for p in folder.glob("server-*.pt"))
    if len(present) >= servers:
        write_json_atomic(
            folder / "manifest.json",
            {"step": step, "servers": servers, "files": present, "time": round(time.time(), 3)},
        )
        prune(run_dir, keep)
    return path


def complete_steps(run_dir: Path) -> list[int]:
    """Steps with a manifest, oldest first."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    steps = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / "manifest.json").exists():
            steps.append(int(match.group(1)))
    return sorted(steps)


def prune(run_dir: Path, keep: int) -> None:
    """Keep the newest ``keep`` complete checkpoints; drop older ones and stale incomplete ones."""
    complete = complete_steps(run_dir)
    if not complete:
        return
    kept = set(complete[-keep:])
    oldest_kept = min(kept)
    for child in (run_dir / "checkpoints").iterdir():
        match = _STEP_DIR.match(child.name)
        if match and int(match.group(1)) not in kept and int(match.group(1)) < oldest_kept:
            shutil.rmtree(child, ignore_errors=True)


def load_latest(run_dir: Path) -> tuple[int, dict[str, Any]] | None:
    """(step, merged state) of the newest complete checkpoint, or None.

    The merged state has every server's ``params`` and ``optim`` by parameter name and the
    ``clocks`` of the file with the most progress (all equal in sync mode).
    """
    steps = complete_steps(run_dir)
    if not steps:
        return None
    step = steps[-1]
    merged: dict[str, Any] = {"params": {}, "optim": {}, "clocks": {}}
    for path in sorted(step_dir(run_dir, step).glob("server-*.pt")):
        shard = torch.load(path, map_location="cpu", weights_only=True)
        merged["params"].update(shard["params"])
        merged["optim"].update(shard["optim"])
        if sum(shard["clocks"].values()) >= sum(merged["clocks"].values()):
            merged["clocks"] = shard["clocks"]
    return step, merged
