"""Figures of a report caught as they are saved: a test reads what was drawn, not only that a PNG exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpctrain.report import plotting


class Saved(list[Any]):
    """Every figure saved, in order; each is written too (save is the real one, wrapped)."""


@pytest.fixture
def saved(monkeypatch: pytest.MonkeyPatch) -> Saved:
    figures = Saved()
    real = plotting.save

    def keep(fig: Any, path: Path) -> Path:
        figures.append(fig)
        return real(fig, path)

    for module in ("curves", "ranks", "ps", "trials"):
        monkeypatch.setattr(f"hpctrain.report.{module}.save", keep)
    return figures
