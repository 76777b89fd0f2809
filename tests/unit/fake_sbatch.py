"""Test helper: sbatch replaced by a recorder that hands out job ids, for tests of what is submitted."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain.scheduler.slurm.cli import SlurmCliBackend

FIRST_JOB_ID = 4242


def fake_sbatch(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """sbatch answers job ids 4242, 4243...; the scripts it was handed, in order."""
    scripts: list[Path] = []

    def submit(self: SlurmCliBackend, script: Path, run_dir: Path, batch: object = None) -> str:
        scripts.append(script)
        return str(FIRST_JOB_ID - 1 + len(scripts))

    monkeypatch.setattr(SlurmCliBackend, "submit", submit)
    return scripts


def directive(script: Path, option: str) -> list[str]:
    """The script's `#SBATCH --OPTION...` lines."""
    return [line for line in script.read_text().splitlines() if line.startswith(f"#SBATCH --{option}")]
