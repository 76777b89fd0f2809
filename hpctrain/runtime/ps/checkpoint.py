"""Server shard checkpoints in the runtime's checkpoint folders: one file per server plus a manifest.

Each server writes its own shard file (tmp + rename). Whichever server finds all shard files of a
step present after writing its own writes the manifest, so no server waits on another; a step
directory without a manifest is incomplete and never resumed from. Shards are keyed by parameter
name, so a restart with a different number of servers can still pick its tensors out.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from hpctrain.rundir import RunDir
from hpctrain.runtime.checkpoint_folder import MANIFEST, step_name


def step_of(name: str) -> int | None:
    """The step of a checkpoint folder's name (the runtime's :func:`step_name`), else None."""
    digits = name.rpartition("-")[2]
    return int(digits) if digits.isdigit() and step_name(int(digits)) == name else None


def root(run_dir: Path) -> Path:
    return RunDir(run_dir).checkpoints


def step_dir(run_dir: Path, step: int) -> Path:
    return root(run_dir) / step_name(step)


def shard_name(server: int) -> str:
    return f"server-{server}.pt"


def save_shard(run_dir: Path, step: int, server: int, servers: int, state: dict[str, Any], keep: int) -> Path:
    """Write this server's shard for ``step``; write the manifest and prune if the set is complete."""
    folder = step_dir(run_dir, step)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / shard_name(server)
    tmp = folder / f".{path.name}.tmp{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)
    present = sorted(name for name in map(shard_name, range(servers)) if (folder / name).exists())
    if len(present) >= servers:
        manifest = {"step": step, "servers": servers, "files": present, "time": round(time.time(), 3)}
        tmp = folder / f".{MANIFEST}.tmp{os.getpid()}"
        tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, folder / MANIFEST)
        prune(run_dir, keep)
    return path


def complete_steps(run_dir: Path) -> list[int]:
    """Steps with a manifest, oldest first."""
    folder = root(run_dir)
    if not folder.is_dir():
        return []
    steps = []
    for child in folder.iterdir():
        step = step_of(child.name)
        if step is not None and (child / MANIFEST).exists():
            steps.append(step)
    return sorted(steps)


def prune(run_dir: Path, keep: int) -> None:
    """Keep the newest ``keep`` complete checkpoints; drop older ones and stale incomplete ones."""
    complete = complete_steps(run_dir)
    if not complete:
        return
    kept = set(complete[-keep:])
    oldest_kept = min(kept)
    for child in root(run_dir).iterdir():
        step = step_of(child.name)
        if step is not None and step not in kept and step < oldest_kept:
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
    manifest = json.loads((step_dir(run_dir, step) / MANIFEST).read_text())
    for name in manifest["files"]:
        shard = torch.load(step_dir(run_dir, step) / name, map_location="cpu", weights_only=True)
        merged["params"].update(shard["params"])
        merged["optim"].update(shard["optim"])
        if sum(shard["clocks"].values()) >= sum(merged["clocks"].values()):
            merged["clocks"] = shard["clocks"]
    return step, merged
