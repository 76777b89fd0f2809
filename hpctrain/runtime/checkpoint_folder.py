"""A checkpoint folder on disk: its names, the manifest of sizes and CRC32s, verification, pruning.

Torch-free: the runtime's Checkpointer (checkpoint.py) and the parameter server's shard checkpoints
(ps/checkpoint.py) write these folders; anything may verify one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zlib
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
TRAINER = "trainer.pt"

COMPLETE_NAME = re.compile(r"^step-\d{8}$")  # step-N.tmp is being written, step-N.discarded deleted


def step_name(step: int) -> str:
    return f"step-{step:08d}"


def discard(folder: Path) -> None:
    """Delete a checkpoint folder so that a kill in the middle leaves no half-deleted "complete" one:
    renamed out of the complete names first (atomic), then removed."""
    doomed = folder.with_name(folder.name + ".discarded")
    shutil.rmtree(doomed, ignore_errors=True)
    try:
        os.replace(folder, doomed)
    except FileNotFoundError:
        return
    shutil.rmtree(doomed, ignore_errors=True)


def rng_name(rank: int) -> str:
    return f"rng-rank-{rank}.pt"


def crc32(path: Path, chunk: int = 16 << 20) -> str:
    value = 0
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            value = zlib.crc32(block, value)
    return f"{value:08x}"


def file_sum(path: Path) -> dict[str, Any]:
    return {"size": path.stat().st_size, "crc32": crc32(path)}


def owner(name: str) -> int:
    """Which rank writes a checkpoint file: DCP's ``__R_N.distcp``, ``rng-rank-R.pt``; else rank 0."""
    match = re.match(r"^__(\d+)_\d+\.distcp$", name) or re.match(r"^rng-rank-(\d+)\.pt$", name)
    return int(match.group(1)) if match else 0


def write_manifest(folder: Path, step: int, summed: dict[str, dict[str, Any]]) -> None:
    """The manifest from the ranks' checksums (``summed``); files nobody summed are summed here."""
    files = dict(summed)
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_file() and name != MANIFEST and name not in files:
            files[name] = file_sum(path)
    target = folder / MANIFEST
    with open(target, "w", encoding="utf-8") as handle:
        json.dump({"step": step, "files": dict(sorted(files.items()))}, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())


def verify(folder: Path) -> str | None:
    """None when every file matches the manifest, else what is wrong (one line)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return "no manifest"
    except (OSError, ValueError) as err:
        return f"unreadable manifest ({err})"
    for name, expected in manifest.get("files", {}).items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != expected["size"]:
            return f"{name} has {size} bytes, the manifest says {expected['size']}"
        if crc32(path) != expected["crc32"]:
            return f"{name} fails its checksum"
    return None


def expendable(complete: list[Path], keep: int, published: Path) -> list[Path]:
    """What pruning deletes of ``complete`` (newest first) to keep ``keep`` checkpoints: all but the
    one just published and the ``keep - 1`` newest others.

    The one just published is the last verified checkpoint (its files were checksummed as they were
    written), so it stays even when newer-named folders outrank it: a run that resumed behind a
    corrupt newer checkpoint must not count that one among the ``keep``.
    """
    others = [p for p in complete if p != published]
    return others[keep - 1 :]
