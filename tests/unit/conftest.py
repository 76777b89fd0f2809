"""Unit tests run ranks on this machine without Slurm: their heartbeat slots go to the test's folder."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def heartbeat_slots_in_the_test_folder(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A rank that a unit test kills on purpose cannot remove its slot file: kept under /dev/shm it
    would outlive the test run (16 KiB each, plus its stack files)."""
    folder = tmp_path_factory.mktemp("heartbeat")
    monkeypatch.setenv("HPCTRAIN_HEARTBEAT_DIR", str(folder))
    return folder
