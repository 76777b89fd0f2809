"""Test entrypoint of the elastic tests: digits that records a fingerprint of every sample it trains on.

Each training forward appends one line per sample to ``$HPCTRAIN_RUN_DIR/seen/<pid>.txt``, so a
test can compare the samples a run saw (as a multiset) with those of another run on another world
size. The fingerprint is a fixed weighted sum of the 64 pixels: distinct for distinct images.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from _runtime_job import slow_digits

PIXEL_WEIGHTS = torch.arange(1, 65, dtype=torch.float64) ** 1.5


def recording_digits(train: Any) -> Any:
    task = slow_digits(train)
    folder = Path(os.environ["HPCTRAIN_RUN_DIR"]) / "seen"
    folder.mkdir(exist_ok=True)
    path = folder / f"{os.getpid()}.txt"

    def record(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        if module.training:
            prints = (args[0].detach().double().cpu() @ PIXEL_WEIGHTS).tolist()
            with open(path, "a", encoding="utf-8") as handle:
                handle.write("".join(f"{value:.4f}\n" for value in prints))

    task.model.register_forward_pre_hook(record)
    return task


def seen(run_dir: Path) -> list[str]:
    """Every recorded sample of the run, sorted (a multiset: samples repeat across epochs)."""
    return sorted(line for path in (run_dir / "seen").glob("*.txt") for line in path.read_text().split())
