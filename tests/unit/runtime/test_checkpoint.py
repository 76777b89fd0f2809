"""Checkpoints in one process: round trip, atomic folders, manifest verification and fallback."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from hpctrain.runtime.checkpoint import Checkpointer
from hpctrain.runtime.checkpoint_folder import verify


@pytest.fixture(autouse=True)
def world_of_one() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def model_and_optimizer(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict]] = []

    def __call__(self, event: str, **fields: object) -> None:
        self.seen.append((event, fields))


def save(tmp_path: Path, step: int, seed: int, keep: int = 3) -> tuple[Checkpointer, nn.Module, Events]:
    events = Events()
    checkpoints = Checkpointer(tmp_path, 0, keep, events)
    model, optimizer = model_and_optimizer(seed)
    checkpoints.save(step, model, optimizer, {"position": {"epoch": 0, "offset": step}})
    return checkpoints, model, events


def test_round_trip_restores_model_optimizer_trainer_and_rng(tmp_path: Path) -> None:
    events = Events()
    checkpoints = Checkpointer(tmp_path, 0, 2, events)
    saved, saved_optimizer = model_and_optimizer(1)
    torch.manual_seed(99)
    random.seed(99)
    checkpoints.save(11, saved, saved_optimizer, {"position": {"epoch": 0, "offset": 11}})
    expected = (torch.rand(1), random.random())  # what the run would have drawn next
    assert events.seen[-1][0] == "checkpoint" and events.seen[-1][1]["save_s"] >= 0

    model, optimizer = model_and_optimizer(seed=2)
    restored = checkpoints.load(model, optimizer)
    assert restored is not None and restored.step == 11
    assert restored.trainer["position"] == {"epoch": 0, "offset": 11}
    for a, b in zip(model.parameters(), saved.parameters(), strict=True):
        assert torch.equal(a, b)
    assert optimizer.state_dict()["state"][0]["step"].item() == 1
    assert (torch.rand(1), random.random()) == expected


def test_saves_are_atomic_and_pruned(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        checkpoints, _, _ = save(tmp_path, step, seed=step, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-00000002", "step-00000003"]
    manifest = json.loads((tmp_path / "checkpoints" / "step-00000003" / "manifest.json").read_text())
    assert manifest["step"] == 3 and {"trainer.pt", "rng-rank-0.pt"} <= set(manifest["files"])
    # A save killed before its rename leaves a .tmp folder: never loaded, removed on start.
    partial = tmp_path / "checkpoints" / "step-00000009.tmp"
    partial.mkdir()
    assert [p.name for p in checkpoints.complete()] == ["step-00000003", "step-00000002"]
    checkpoints.clean_partial()
    assert not partial.exists()


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "manifest"])
def test_corrupt_newest_falls_back_to_previous(tmp_path: Path, damage: str) -> None:
    save(tmp_path, 1, seed=1)
    checkpoints, _, events = save(tmp_path, 2, seed=2)
    newest = tmp_path / "checkpoints" / "step-00000002"
    data_file = next(newest.glob("*.distcp"))
    if damage == "truncate":
        data_file.write_bytes(data_file.read_bytes()[:-10])
    elif damage == "flip":
        raw = bytearray(data_file.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data_file.write_bytes(bytes(raw))
    elif damage == "delete":
        data_file.unlink()
    else:
        (newest / "manifest.json").write_text("{not json")
    assert verify(newest) is not None
    model, optimizer = model_and_optimizer(seed=3)
    restored = checkpoints.load(model, optimizer)
    assert restored is not None and restored.step == 1
    assert [e for e, _ in events.seen][-2:] == ["checkpoint_corrupt", "restored"]
    assert events.seen[-2][1]["path"] == str(newest)
    assert events.seen[-1][1]["source"] == "disk" and events.seen[-1][1]["step"] == 1


def test_nothing_to_resume(tmp_path: Path) -> None:
    checkpoints = Checkpointer(tmp_path, 0, 2, Events())
    assert checkpoints.load(*model_and_optimizer(0)) is None


def test_background_save_publishes_the_state_as_it_was_when_staged(tmp_path: Path) -> None:
    events = Events()
    checkpoints = Checkpointer(tmp_path, 0, 2, events)
    saved, saved_optimizer = model_and_optimizer(1)
    expected = [p.detach().clone() for p in saved.parameters()]
    checkpoints.save(5, saved, saved_optimizer, {"position": {"epoch": 0, "offset": 5}}, blocking=False)
    # Training goes on while the files are written: later updates must not leak into step 5.
    with torch.no_grad():
        for p in saved.parameters():
            p.add_(1.0)
    checkpoints.wait()  # published in the background as soon as written; wait() confirms it
    folder = tmp_path / "checkpoints" / "step-00000005"
    assert verify(folder) is None
    assert not list(folder.glob(".sums-rank-*"))
    event = events.seen[-1][1]
    assert events.seen[-1][0] == "checkpoint" and event["save_s"] <= event["written_s"]
    model, optimizer = model_and_optimizer(seed=2)
    restored = checkpoints.load(model, optimizer)
    assert restored is not None and restored.step == 5
    for a, b in zip(model.parameters(), expected, strict=True):
        assert torch.equal(a, b)


def test_process_writer_reuses_its_staging_buffers(tmp_path: Path) -> None:
    """The checkpoint process writes from shared buffers that the first save allocated, once."""
    events = Events()
    checkpoints = Checkpointer(tmp_path, 0, 2, events, writer="process")
    model, optimizer = model_and_optimizer(1)
    states = []
    for step in (1, 2):
        states.append([p.detach().clone() for p in model.parameters()])
        checkpoints.save(step, model, optimizer, {"position": {"epoch": 0, "offset": step}}, blocking=False)
        assert checkpoints.staging is not None and checkpoints.staging.shared
        allocated = checkpoints.staging.allocations
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
        model(torch.randn(3, 4)).sum().backward()
        optimizer.step()
    # Published from the background thread before anyone waits: a kill now loses nothing.
    deadline = time.monotonic() + 60
    while not (tmp_path / "checkpoints" / "step-00000002").is_dir() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert verify(tmp_path / "checkpoints" / "step-00000002") is None
    checkpoints.wait()
    assert allocated == len(checkpoints.staging.buffers)  # the second save allocated nothing
    assert [e for e, _ in events.seen] == ["checkpoint", "checkpoint"]
    assert events.seen[-1][1]["bytes"] > 0
    for step in (1, 2):
        assert verify(tmp_path / "checkpoints" / f"step-{step:08d}") is None
    restored = checkpoints.load(*model_and_optimizer(seed=5))
    assert restored is not None and restored.step == 2
    fresh, fresh_optimizer = model_and_optimizer(seed=5)
    checkpoints.load(fresh, fresh_optimizer)
    for a, b in zip(fresh.parameters(), states[1], strict=True):
        assert torch.equal(a, b)


def test_pruning_never_deletes_the_checkpoint_just_published(tmp_path: Path) -> None:
    """A run resumed behind a newer (corrupt) folder keeps its own newest save even with keep=1."""
    save(tmp_path, 5, seed=1, keep=3)
    newer = tmp_path / "checkpoints" / "step-00000009"
    newer.mkdir()
    (newer / "manifest.json").write_text("{not json")
    checkpoints, _, _ = save(tmp_path, 6, seed=2, keep=1)
    names = sorted(p.name for p in checkpoints.complete())
    assert "step-00000006" in names and "step-00000005" not in names
    assert checkpoints.load(*model_and_optimizer(seed=3)).step == 6  # type: ignore[union-attr]


def test_rank_killed_during_a_background_save_leaves_nothing_loadable(tmp_path: Path) -> None:
    """SIGKILL of a rank whose checkpoint process is writing: step 2 stays a .tmp folder, step 1 loads."""
    helper = Path(__file__).with_name("_killed_saver.py")
    proc = subprocess.Popen(
        [sys.executable, str(helper), str(tmp_path), "process"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "staged"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    checkpoints = Checkpointer(tmp_path, 0, 2, Events())
    assert [p.name for p in checkpoints.complete()] == ["step-00000001"]
    assert (tmp_path / "checkpoints" / "step-00000002.tmp").is_dir()
    model = nn.Linear(1024, 1024)
    optimizer = torch.optim.AdamW(model.parameters())
    restored = checkpoints.load(model, optimizer)
    assert restored is not None and restored.step == 1
    checkpoints.clean_partial()
    assert not (tmp_path / "checkpoints" / "step-00000002.tmp").exists()


def test_pruning_a_linked_checkpoint_drops_the_link_never_the_earlier_runs_folder(tmp_path: Path) -> None:
    from hpctrain.runtime.checkpoint_folder import complete, prune

    earlier = tmp_path / "earlier" / "checkpoints" / "step-00000020"
    earlier.mkdir(parents=True)
    (earlier / "manifest.json").write_text("{}")
    (earlier / "__0_0.distcp").write_bytes(b"weights")
    root = tmp_path / "new" / "checkpoints"
    root.mkdir(parents=True)
    (root / "step-00000020").symlink_to(earlier, target_is_directory=True)
    for step in (30, 40):
        (root / f"step-000000{step}").mkdir()
        (root / f"step-000000{step}" / "manifest.json").write_text("{}")
    prune(root, keep=2, published=root / "step-00000040")
    assert [p.name for p in complete(root)] == ["step-00000040", "step-00000030"]
    assert sorted(p.name for p in root.iterdir()) == ["step-00000030", "step-00000040"]
    assert (earlier / "__0_0.distcp").read_bytes() == b"weights"
