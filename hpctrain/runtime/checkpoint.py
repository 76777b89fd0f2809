"""Atomic, verified checkpoints with torch.distributed.checkpoint (DCP), and resume from the newest good one.

Layout of ``$RUN/checkpoints/step-XXXXXXXX/``:

* DCP files of ``{"model", "optim"}`` from ``get_state_dict`` (sharded layouts save their shards;
  a save under one layout loads under another);
* ``trainer.pt`` (rank 0): step, data position, LR scheduler state;
* ``rng-rank-N.pt`` (each rank): torch CPU/CUDA, python and numpy RNG states;
* ``manifest.json`` (rank 0, written last): every file's size and CRC32.

Everything is written into ``step-XXXXXXXX.tmp/`` and renamed once the manifest exists, so a
directory without ``.tmp`` is complete; one whose files no longer match the manifest (truncated,
overwritten) is skipped on load in favour of the previous one.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
TRAINER = "trainer.pt"
EventFn = Callable[..., None]


def step_name(step: int) -> str:
    return f"step-{step:08d}"


def rng_name(rank: int) -> str:
    return f"rng-rank-{rank}.pt"


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def crc32(path: Path, chunk: int = 1 << 20) -> str:
    value = 0
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            value = zlib.crc32(block, value)
    return f"{value:08x}"


def write_manifest(folder: Path, step: int) -> None:
    files = {
        str(p.relative_to(folder)): {"size": p.stat().st_size, "crc32": crc32(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    target = folder / MANIFEST
    with open(target, "w", encoding="utf-8") as handle:
        json.dump({"step": step, "files": files}, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())


def verify(folder: Path) -> str | None:
    """None when every file matches the manifest, else what is wrong (one line)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return "no manifest"
    except (OSError, ValueError) as err:
        return f"unreadable manifest ({err})"
    for name, expected in manifest.get("files", {}).items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != expected["size"]:
            return f"{name} has {size} bytes, the manifest says {expected['size']}"
        if crc32(path) != expected["crc32"]:
            return f"{name} fails its checksum"
    return None


@dataclass
class Restored:
    """What a resume hands back to the loop (model and optimizer are loaded in place)."""

    step: int
    path: Path
    trainer: dict[str, Any]


class Checkpointer:
    """Saves and restores checkpoints in ``$RUN/checkpoints``; every method is collective."""

    def __init__(self, run_dir: Path, rank: int, keep: int, event: EventFn) -> None:
        self.root = run_dir / "checkpoints"
        self.rank = rank
        self.keep = keep
        self.event = event

    def complete(self) -> list[Path]:
        """Finished checkpoint folders, newest first."""
        if not self.root.is_dir():
            return []
        found = [p for p in self.root.glob("step-*") if p.is_dir() and not p.name.endswith(".tmp")]
        return sorted(found, key=lambda p: p.name, reverse=True)

    def save(
        self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, trainer: dict[str, Any]
    ) -> float:
        """Write checkpoint ``step``; returns the seconds training was blocked."""
        started = time.perf_counter()
        final = self.root / step_name(step)
        tmp = final.with_name(final.name + ".tmp")
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        dist.barrier()
        model_state, optim_state = get_state_dict(model, optimizer)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(tmp))
        torch.save(rng_state(), tmp / rng_name(self.rank))
        if self.rank == 0:
            torch.save({"step": step, **trainer}, tmp / TRAINER)
        dist.barrier()  # every rank's files are in tmp
        if self.rank == 0:
            write_manifest(tmp, step)
            shutil.rmtree(final, ignore_errors=True)  # a re-save of the same step after a resume
            os.replace(tmp, final)
            self._prune()
        dist.barrier()  # nobody moves on (or exits for a requeue) before the rename
        seconds = time.perf_counter() - started
        if self.rank == 0:
            log.info("checkpoint step %d saved to %s in %.3f s", step, final, seconds)
            self.event("checkpoint", step=step, path=str(final), save_s=round(seconds, 4))
        return seconds

    def _prune(self) -> None:
        for old in self.complete()[self.keep :]:
            shutil.rmtree(old, ignore_errors=True)

    def clean_partial(self) -> None:
        """Rank 0 on start: folders left by a save that was killed before its rename."""
        if self.rank == 0 and self.root.is_dir():
            for tmp in self.root.glob("step-*.tmp"):
                log.warning("removing partial checkpoint %s", tmp)
                shutil.rmtree(tmp, ignore_errors=True)

    def _choose(self) -> Path | None:
        """Rank 0: the newest checkpoint that verifies; corrupt ones are reported and skipped."""
        for folder in self.complete():
            problem = verify(folder)
            if problem is None:
                return folder
            log.error("checkpoint %s is corrupt (%s); falling back to the previous one", folder.name, problem)
            self.event("checkpoint_corrupt", path=str(folder), problem=problem)
        return None

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> Restored | None:
        """Load the newest good checkpoint into model and optimizer (and this rank's RNG)."""
        choice: list[str | None] = [None]
        if self.rank == 0:
            folder = self._choose()
            choice[0] = str(folder) if folder is not None else None
        dist.broadcast_object_list(choice, src=0)
        if choice[0] is None:
            return None
        path = Path(choice[0])
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        trainer = torch.load(path / TRAINER, weights_only=False)
        rng_path = path / rng_name(self.rank)
        if rng_path.exists():
            set_rng_state(torch.load(rng_path, weights_only=False))
        else:  # saved with fewer ranks: data order is still exact, dropout streams are not
            log.warning("%s has no RNG state for rank %d; keeping the fresh seed", path.name, self.rank)
        return Restored(step=int(trainer["step"]), path=path, trainer=trainer)
