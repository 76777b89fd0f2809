"""A checkpoint folder on disk: its manifest of sizes and CRC32s, verification, choice, pruning.

Torch-free: the runtime's Checkpointer (checkpoint.py) and the parameter server's shard checkpoints
(ps/checkpoint.py) write these folders the same way, and both load the newest one that verifies.
A folder is complete once its manifest is in it (the manifest is written last, atomically); one
whose files do not match the manifest is corrupt and never loaded.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import zlib
from collections.abc import Callable
from pathlib import Path

from hpctrain.rundir import (
    CHECKPOINT,
    CHECKPOINT_MANIFEST,
    CHECKPOINT_RNG,
    CheckpointManifest,
    FileSum,
    Unreadable,
    read_json,
    write_json,
)

log = logging.getLogger(__name__)
_DCP_FILE = re.compile(r"^__(\d+)_\d+\.distcp$")  # torch.distributed.checkpoint's name for rank R's file


def step_of(name: str) -> int | None:
    """The step of a complete checkpoint folder's name; None for any other name (.tmp, .discarded)."""
    step = CHECKPOINT.number(name)
    return step if step is not None and CHECKPOINT.name(step) == name else None


def complete(root: Path) -> list[Path]:
    """The complete checkpoint folders under `root`, newest first."""
    try:
        children = list(root.iterdir())
    except OSError:
        return []
    found = [p for p in children if step_of(p.name) is not None and (p / CHECKPOINT_MANIFEST).is_file()]
    return sorted(found, key=lambda p: p.name, reverse=True)


def discard(folder: Path) -> None:
    """Delete a checkpoint folder so that a kill in the middle leaves no half-deleted "complete" one:
    renamed out of the complete names first (atomic), then removed. A link (to an earlier run's
    checkpoint, `submit --from`) is removed itself, never what it names."""
    if folder.is_symlink():
        folder.unlink(missing_ok=True)
        return
    doomed = folder.with_name(folder.name + ".discarded")
    shutil.rmtree(doomed, ignore_errors=True)
    try:
        os.replace(folder, doomed)
    except FileNotFoundError:
        return
    shutil.rmtree(doomed, ignore_errors=True)


def crc32(path: Path, chunk: int = 16 << 20) -> str:
    value = 0
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            value = zlib.crc32(block, value)
    return f"{value:08x}"


def file_sum(path: Path) -> FileSum:
    return FileSum(size=path.stat().st_size, crc32=crc32(path))


def owner(name: str) -> int:
    """Which rank writes a checkpoint file: DCP's ``__R_N.distcp``, the rank's RNG file; else rank 0."""
    match = _DCP_FILE.match(name)
    if match:
        return int(match.group(1))
    rank = CHECKPOINT_RNG.number(name)
    return rank if rank is not None else 0


def unsummed(folder: Path, summed: dict[str, FileSum]) -> dict[str, FileSum]:
    """Sums of the files in `folder` missing from `summed`: nobody checksummed them as they were written."""
    found = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_file() and name != CHECKPOINT_MANIFEST and name not in summed:
            found[name] = file_sum(path)
    return found


def write_manifest(folder: Path, step: int, files: dict[str, FileSum], servers: int | None = None) -> None:
    """The manifest of exactly `files`, on disk before it is in place: the folder is then complete."""
    manifest = CheckpointManifest(step=step, files=dict(sorted(files.items())), servers=servers)
    write_json(folder / CHECKPOINT_MANIFEST, manifest, durable=True)


def read_manifest(folder: Path) -> CheckpointManifest | str:
    """The folder's manifest, or why there is none to trust (one line)."""
    manifest = read_json(folder / CHECKPOINT_MANIFEST, CheckpointManifest)
    if manifest is None:
        return "no manifest"
    if isinstance(manifest, Unreadable):
        return f"unreadable manifest ({manifest.reason})"
    return manifest


def verify(folder: Path) -> str | None:
    """None when every file matches the manifest, else what is wrong (one line)."""
    manifest = read_manifest(folder)
    if isinstance(manifest, str):
        return manifest
    for name, expected in manifest.files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != expected.size:
            return f"{name} has {size} bytes, the manifest says {expected.size}"
        if crc32(path) != expected.crc32:
            return f"{name} fails its checksum"
    return None


def newest_good(root: Path, event: Callable[..., None]) -> Path | None:
    """The newest complete checkpoint that verifies; each corrupt one on the way is logged and sent
    to `event` as ``checkpoint_corrupt``, and the one before it is tried."""
    for folder in complete(root):
        problem = verify(folder)
        if problem is None:
            return folder
        log.error("checkpoint %s is corrupt (%s); falling back to the previous one", folder.name, problem)
        event("checkpoint_corrupt", path=str(folder), problem=problem)
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


def prune(root: Path, keep: int, published: Path) -> None:
    """Keep `keep` complete checkpoints (the one just published among them); discard the others."""
    for old in expendable(complete(root), keep, published):
        discard(old)
