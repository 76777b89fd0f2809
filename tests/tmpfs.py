"""Test helper: a small RAM file system, mounted for one test, to run code out of disk space for real."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's notation: 64k, 8m) at `folder` (made), unmounted afterwards; the
    test is skipped, saying why, where it cannot be mounted (it needs root)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]
    mounted = subprocess.run(mount, capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def resize(folder: Path, size: str) -> None:
    """Make room (or take it away) on the tmpfs at `folder`."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], check=True)


def fill(folder: Path) -> Path:
    """Take every free byte of the file system at `folder` with one file (returned)."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while handle.write(b"\0" * 4096):
                pass
        except OSError:  # the file system is full
            pass
    return filler
