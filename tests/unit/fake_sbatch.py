"""Test helper: sbatch replaced by a recorder that hands out job ids, for tests of what is submitted."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from hpctrain.scheduler.base import JobInfo, JobState
from hpctrain.scheduler.slurm.cli import SlurmCliBackend

FIRST_JOB_ID = 4242


def fake_sbatch(monkeypatch: pytest.MonkeyPatch, held: Mapping[str, JobState] | None = None) -> list[Path]:
    """sbatch answers job ids 4242, 4243...; the scripts it was handed, in order. A poll finds the jobs
    it handed out pending, the `held` ones in their state, and knows no other."""
    scripts: list[Path] = []

    def submit(self: SlurmCliBackend, script: Path, run_dir: Path, batch: object = None) -> str:
        scripts.append(script)
        return str(FIRST_JOB_ID - 1 + len(scripts))

    def poll(self: SlurmCliBackend, job_ids: Iterable[str], array_sizes: object = None) -> dict[str, JobInfo]:
        handed_out = {str(FIRST_JOB_ID + n): JobState.PENDING for n in range(len(scripts))}
        known = {**handed_out, **(held or {})}
        return {j: JobInfo(j, known.get(j, JobState.UNKNOWN)) for j in job_ids}

    monkeypatch.setattr(SlurmCliBackend, "submit", submit)
    monkeypatch.setattr(SlurmCliBackend, "poll", poll)
    return scripts


def directive(script: Path, option: str) -> list[str]:
    """The script's `#SBATCH --OPTION...` lines."""
    return [line for line in script.read_text().splitlines() if line.startswith(f"#SBATCH --{option}")]
