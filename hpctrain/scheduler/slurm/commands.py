"""Running a Slurm command from the login node or inside a job: its failures as one-line errors."""

from __future__ import annotations

import subprocess

from hpctrain.errors import BackendError


def command(argv: list[str], timeout: float = 30, merge: bool = False) -> str:
    """Run a Slurm command; a missing binary, a timeout or a non-zero exit is one BackendError line."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise BackendError(f"{argv[0]} not found: is this a Slurm login node?") from None
    except subprocess.TimeoutExpired:
        raise BackendError(f"{' '.join(argv)} did not answer within {timeout:.0f} s") from None
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip().splitlines()
        raise BackendError(f"{' '.join(argv)} failed: {message[-1] if message else proc.returncode}")
    return proc.stdout + (proc.stderr if merge else "")
