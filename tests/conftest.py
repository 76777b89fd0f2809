"""Shared fixtures: an isolated HPCTRAIN_HOME per test, and the repo's paths."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
JOBS = REPO / "jobs"
SITES = REPO / "site-configs"


@pytest.fixture
def hpctrain_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "hpctrain-home"
    monkeypatch.setenv("HPCTRAIN_HOME", str(home))
    return home


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real `hpctrain` console entry point in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "hpctrain.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or REPO,
        env={**os.environ, **(env or {})},
    )
