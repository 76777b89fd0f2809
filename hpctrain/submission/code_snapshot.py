"""The code snapshot of a command job: the workdir's source, copied into the run directory at submit.

What is copied is decided by rule, so that data, environments and outputs never are:
- folders skipped by name: version control (.git, .hg, .svn), caches (__pycache__, .mypy_cache,
  .pytest_cache, .ruff_cache, .ipynb_checkpoints), environments (.venv, venv, .tox, node_modules),
  and data and outputs (data, datasets, checkpoints, outputs, runs, wandb, lightning_logs, mlruns);
  any folder holding a pyvenv.cfg (a virtual environment) and any *.egg-info;
- files skipped: larger than MAX_FILE_BYTES, or with a data or weights suffix (DATA_SUFFIXES);
- symbolic links are copied as links, never followed.
More than MAX_TOTAL_BYTES or MAX_FILES in all is refused with one line: point `workdir` at the
source folder, or set `code.snapshot: false`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from hpctrain.errors import SpecError

SKIPPED_FOLDERS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
        ".venv",
        "venv",
        ".tox",
        "node_modules",
        "data",
        "datasets",
        "checkpoints",
        "outputs",
        "runs",
        "wandb",
        "lightning_logs",
        "mlruns",
    }
)
DATA_SUFFIXES = frozenset(
    {
        ".pt",
        ".pth",
        ".ckpt",
        ".bin",
        ".safetensors",
        ".npy",
        ".npz",
        ".h5",
        ".hdf5",
        ".parquet",
        ".arrow",
        ".tar",
        ".zip",
        ".gz",
        ".tgz",
        ".zst",
        ".pkl",
        ".pickle",
        ".sqlite",
        ".db",
        ".log",
    }
)
MAX_FILE_BYTES = 1 << 20
MAX_TOTAL_BYTES = 64 << 20
MAX_FILES = 5000


@dataclass(frozen=True)
class Snapshot:
    """What a snapshot copied."""

    files: int
    size: int
    source: Path

    def line(self) -> str:
        return f"code snapshot: {self.files} files, {self.size / 2**20:.2f} MiB copied from {self.source}"


def skipped_folder(folder: Path) -> bool:
    return (
        folder.name in SKIPPED_FOLDERS
        or folder.name.endswith(".egg-info")
        or (folder / "pyvenv.cfg").exists()
    )


def skipped_file(path: Path, size: int) -> bool:
    return size > MAX_FILE_BYTES or path.suffix.lower() in DATA_SUFFIXES


def chosen_files(source: Path) -> list[tuple[Path, int]]:
    """(path relative to `source`, size) of every file the rule copies; SpecError past the limits."""
    chosen: list[tuple[Path, int]] = []
    total = 0
    for folder, folders, files in os.walk(source):
        here = Path(folder)
        folders[:] = sorted(name for name in folders if not skipped_folder(here / name))
        for name in sorted(files):
            path = here / name
            try:
                size = path.lstat().st_size
            except OSError:
                continue
            if skipped_file(path, size):
                continue
            chosen.append((path.relative_to(source), size))
            total += size
            if len(chosen) > MAX_FILES or total > MAX_TOTAL_BYTES:
                raise SpecError(
                    f"code.snapshot: {source} holds over {MAX_FILES} files or {MAX_TOTAL_BYTES >> 20} MiB of "
                    "source; point workdir at the code's folder, or set code.snapshot: false"
                )
        # Folders reached through a link are not walked (os.walk does not follow them); the link is copied.
        for name in folders:
            if (here / name).is_symlink():
                chosen.append(((here / name).relative_to(source), 0))
    return chosen


def take(source: Path, target: Path) -> Snapshot:
    """Copy the rule's files of `source` into `target` (made here)."""
    files = chosen_files(source)
    target.mkdir(parents=True)
    for relative, _size in files:
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / relative, destination, follow_symlinks=False)
    return Snapshot(files=len(files), size=sum(size for _, size in files), source=source)
