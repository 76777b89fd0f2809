"""Server shard checkpoints, in the runtime's checkpoint folders: one file per server plus the manifest.

Each server writes its own shard file (atomically). Whichever server finds every shard of a step
present after writing its own writes the manifest with every shard's size and CRC32, so no server
waits on another. A folder without a manifest is incomplete, one whose shards do not match it is
corrupt: neither is resumed from, and a corrupt one is reported and passed over for the one before
(checkpoint_folder.py, as for every other strategy). Shards are keyed by parameter name, so a
restart with a different number of servers can still pick its tensors out.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from hpctrain.rundir import SERVER_SHARD, RunDir, replacing
from hpctrain.runtime.checkpoint_folder import (
    complete,
    discard,
    file_sum,
    newest_good,
    prune,
    read_manifest,
    step_of,
    write_manifest,
)


def save_shard(run_dir: Path, step: int, server: int, servers: int, state: dict[str, Any], keep: int) -> Path:
    """Write this server's shard of ``step``; complete the checkpoint and prune if every shard is there."""
    run = RunDir(run_dir)
    folder = run.checkpoint(step)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SERVER_SHARD.name(server)
    with replacing(path) as tmp:
        torch.save(state, tmp)
    shards = [folder / SERVER_SHARD.name(s) for s in range(servers)]
    if all(shard.is_file() for shard in shards):
        write_manifest(folder, step, {shard.name: file_sum(shard) for shard in shards}, servers=servers)
        prune(run.checkpoints, keep, published=folder)
        discard_older_incomplete(run.checkpoints, step)
    return path


def discard_older_incomplete(root: Path, step: int) -> None:
    """Folders older than ``step`` that never got their manifest: a server crashed while writing them."""
    done = set(complete(root))
    for child in root.iterdir():
        older = step_of(child.name)
        if older is not None and older < step and child not in done:
            discard(child)


def forget_newer_shards(run_dir: Path, server: int, resumed: int | None) -> None:
    """On start, after loading: this server's shards of steps after the one it resumed from (a
    previous attempt's), so that no later manifest mixes them with shards of this attempt. A newer
    folder with a manifest was corrupt; it keeps the manifest, so that every server that looks later
    still finds it corrupt (and server 0 reports it) instead of incomplete."""
    root = RunDir(run_dir).checkpoints
    if not root.is_dir():
        return
    for child in root.iterdir():
        step = step_of(child.name)
        if step is not None and (resumed is None or step > resumed):
            (child / SERVER_SHARD.name(server)).unlink(missing_ok=True)


def load_latest(run_dir: Path, event: Callable[..., None]) -> tuple[int, dict[str, Any]] | None:
    """(step, merged state) of the newest checkpoint that verifies, or None.

    The merged state has every server's ``params`` and ``optim`` by parameter name and the
    ``clocks`` of the file with the most progress (all equal in sync mode).
    """
    folder = newest_good(RunDir(run_dir).checkpoints, event)
    if folder is None:
        return None
    manifest = read_manifest(folder)
    if isinstance(manifest, str):  # deleted since it verified: nothing to resume from
        return None
    merged: dict[str, Any] = {"params": {}, "optim": {}, "clocks": {}}
    for name in manifest.files:
        shard = torch.load(folder / name, map_location="cpu", weights_only=True)
        merged["params"].update(shard["params"])
        merged["optim"].update(shard["optim"])
        if sum(shard["clocks"].values()) >= sum(merged["clocks"].values()):
            merged["clocks"] = shard["clocks"]
    return manifest.step, merged
