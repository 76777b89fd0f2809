"""Memory checkpoints: the choice of copies (pure), the peer pairing, and a 4-rank save and restore."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from hpctrain.runtime.memory_checkpoint import Copy, auto_interval, choose, peer_of, private_folder
from tests import tmpfs

HOSTS = ["n1", "n1", "n2", "n2"]


def copies(step: int, holders: dict[int, list[str]], world: int = 4, layout: str = "ddp") -> list[Copy]:
    """Copies of `step`: origin rank -> the nodes whose memory holds it (ranks 0, 1 ran on n1)."""
    return [
        Copy(step, rank, world, layout, HOSTS[rank] if rank < len(HOSTS) else "n9", holder)
        for rank, nodes in holders.items()
        for holder in nodes
    ]


EVERYWHERE = {0: ["n1", "n2"], 1: ["n1", "n2"], 2: ["n2", "n1"], 3: ["n2", "n1"]}


def test_peers_are_on_the_next_node_and_none_on_a_single_node() -> None:
    assert [peer_of(HOSTS, r) for r in range(4)] == [2, 3, 0, 1]
    assert [peer_of(["a", "b", "c"], r) for r in range(3)] == [1, 2, 0]
    assert peer_of(["a", "a"], 0) is None


def test_each_rank_reads_its_own_copy_when_its_node_kept_it() -> None:
    plan = choose(copies(7, EVERYWHERE), HOSTS, "ddp", False, newer_than=3)
    assert plan is not None and plan.step == 7
    assert plan.origin == (0, 1, 2, 3) and plan.holder == (0, 1, 2, 3) and plan.peer == (False,) * 4


def test_a_lost_nodes_ranks_get_the_peer_copy() -> None:
    only_n1 = {rank: ["n1"] for rank in range(4)}  # n2 came back without its memory
    plan = choose(copies(7, only_n1), HOSTS, "ddp", False, newer_than=3)
    assert plan is not None and plan.holder == (0, 1, 0, 0) and plan.peer == (False, False, True, True)


def test_an_incomplete_step_falls_back_to_the_one_before() -> None:
    half = {0: ["n1"], 1: ["n1"]}  # killed in the middle of the step-9 save
    plan = choose(copies(9, half) + copies(7, EVERYWHERE), HOSTS, "ddp", False, newer_than=3)
    assert plan is not None and plan.step == 7


def test_a_rank_killed_before_its_copy_left_loads_a_copy_its_own_node_saved() -> None:
    """Rank 1 died in the step-9 save before sending its copy: the step is still whole for a
    replicated (DDP) job. Rank 1 loads rank 0's copy from n1; ranks 2 and 3 keep their own (and
    their RNG streams), not the copy of rank 0 that n2 holds for n1."""
    without_1 = {0: ["n1", "n2"], 2: ["n2", "n1"], 3: ["n2", "n1"]}
    plan = choose(copies(9, without_1) + copies(7, EVERYWHERE), HOSTS, "ddp", True, newer_than=3)
    assert plan is not None and plan.step == 9
    assert plan.origin == (0, 0, 2, 3) and plan.holder == (0, 1, 2, 3) and plan.peer == (False,) * 4


def test_memory_not_newer_than_disk_is_not_used() -> None:
    assert choose(copies(7, EVERYWHERE), HOSTS, "ddp", False, newer_than=7) is None
    assert choose(copies(7, EVERYWHERE), HOSTS, "ddp", False, newer_than=None) is not None


def test_another_world_needs_a_replicated_layout() -> None:
    shrunk = ["n1", "n1"]
    assert choose(copies(7, EVERYWHERE), shrunk, "ddp", False, newer_than=3) is None
    plan = choose(copies(7, EVERYWHERE), shrunk, "ddp", True, newer_than=3)
    assert plan is not None and plan.origin == (0, 0) and plan.holder == (0, 1)
    assert choose(copies(7, EVERYWHERE), HOSTS, "pp", False, newer_than=3) is None  # saved as ddp


def test_a_memory_folder_open_to_others_is_refused(tmp_path: Path) -> None:
    assert private_folder(tmp_path / "mine")
    (tmp_path / "open").mkdir(mode=0o755)
    os.chmod(tmp_path / "open", 0o755)
    assert not private_folder(tmp_path / "open")
    (tmp_path / "link").symlink_to(tmp_path / "mine")
    assert not private_folder(tmp_path / "link")


def run_world(
    tmp_path: Path, run_dir: Path, what: str, *extra: str, memory: list[Path] | None = None
) -> None:
    """The 4 ranks of _memory_ranks.py; `memory`: each rank's HPCTRAIN_MEMORY_DIR (default tmp_path/shm)."""
    store = tmp_path / f"store-{what}"
    folders = memory or [tmp_path / "shm"] * 4
    helper = Path(__file__).with_name("_memory_ranks.py")
    command = [sys.executable, str(helper), str(run_dir), str(store)]
    ranks = [
        subprocess.Popen(
            [*command, str(rank), what, *extra],
            env={**os.environ, "HPCTRAIN_MEMORY_DIR": str(folders[rank]), "OMP_NUM_THREADS": "1"},
        )
        for rank in range(4)
    ]
    try:
        assert [proc.wait(timeout=240) for proc in ranks] == [0, 0, 0, 0]
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()


@pytest.mark.timeout(600)
def test_a_lost_nodes_ranks_restore_from_the_peer_copy_not_from_disk(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (tmp_path / "shm").mkdir()
    run_world(tmp_path, run_dir, "save")
    [root] = (tmp_path / "shm").iterdir()
    assert oct(root.stat().st_mode & 0o777) == "0o700"
    [folder] = root.iterdir()
    held = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("copy-*.pt"))
    assert held == [f"{node}/step-00000007/copy-{r}.pt" for node in ("n1", "n2") for r in range(4)]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in folder.rglob("copy-*.pt"))
    shutil.rmtree(folder / "n2")  # n2 lost its power, and its memory with it
    run_world(tmp_path, run_dir, "restore")
    got = [torch.load(run_dir / f"restored-{r}.pt", weights_only=False) for r in range(4)]
    assert [g["step"] for g in got] == [7] * 4
    for g in got[1:]:
        assert torch.equal(g["weight"], got[0]["weight"])
    [restored] = [fields for event, fields in got[0]["events"] if event == "restored"]
    assert restored["source"] == "peer_memory" and restored["disk_step"] == 3 and restored["peer_copies"] == 2


@pytest.mark.parametrize(
    ("blocked_s", "step_s", "stored_s", "interval"),
    [
        (0.005, 0.15, 0.0, 4),
        (0.5, 1.0, 0.0, 50),
        (0.0, 0.1, 0.0, 1),
        (0.01, 0.0, 0.0, 1),
        (60.0, 0.1, 0.0, 1000),
        # A small model on a busy CPU: a 1 ms copy, but 30 ms to encode, write and send per 15 ms step.
        (0.001, 0.015, 0.03, 20),
        (0.005, 0.15, 0.01, 4),  # the store is cheap: the wait decides
    ],
)
def test_the_automatic_interval_keeps_the_wait_under_one_percent_and_the_store_under_a_tenth(
    blocked_s: float, step_s: float, stored_s: float, interval: int
) -> None:
    assert auto_interval(blocked_s, step_s, stored_s) == interval


def test_run_folders_no_save_touched_for_hours_are_removed_and_the_current_one_kept(tmp_path: Path) -> None:
    from hpctrain.runtime.memory_checkpoint import STALE_AFTER_S, remove_stale

    current, recent, stale = (tmp_path / name for name in ("current", "recent", "stale"))
    for folder in (current, recent, stale):
        (folder / "node1" / "step-5").mkdir(parents=True)
    now = time.time()
    old = now - STALE_AFTER_S - 60
    for path in (stale, stale / "node1", current, current / "node1"):
        os.utime(path, (old, old))
    assert remove_stale(tmp_path, keep=current, now=now) == [stale]
    assert current.is_dir() and recent.is_dir() and not stale.exists()


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB RAM file system: a memory folder that fills up."""
    with tmpfs.small_tmpfs(tmp_path / "shm", "64k") as folder:
        yield folder


@pytest.mark.timeout(600)
@pytest.mark.parametrize("full", [["n1", "n2"], ["n1"]], ids=["every-node-full", "one-node-full"])
def test_a_full_memory_folder_warns_once_leaves_no_partial_copy_and_training_goes_on(
    tmp_path: Path, small_tmpfs: Path, full: list[str]
) -> None:
    run_dir, roomy = tmp_path / "run", tmp_path / "roomy"
    run_dir.mkdir()
    roomy.mkdir()
    memory = [small_tmpfs if host in full else roomy for host in HOSTS]
    run_world(tmp_path, run_dir, "save", "256", memory=memory)  # each copy about 800 KiB: none fits
    for rank, host in enumerate(HOSTS):
        saved = torch.load(run_dir / f"saved-{rank}.pt", weights_only=False)
        stored = [fields["step"] for event, fields in saved["events"] if event == "memory_checkpoint"]
        if host in full:
            [warning] = saved["warnings"]
            assert "memory checkpoints not stored" in warning and "No space left on device" in warning
            assert stored == []
        else:
            assert (saved["warnings"], stored) == ([], [7, 8])
    assert [p.name for p in small_tmpfs.rglob("*") if p.is_file()] == []  # no half-written copy left
    run_world(tmp_path, run_dir, "restore", "256", memory=memory)
    got = [torch.load(run_dir / f"restored-{r}.pt", weights_only=False) for r in range(4)]
    [restored] = [fields for event, fields in got[0]["events"] if event == "restored"]
    if full == ["n1", "n2"]:  # nothing in memory: the disk checkpoint serves
        assert [g["step"] for g in got] == [3] * 4 and restored["source"] == "disk"
    else:  # n2 kept every rank's copy (n1's were sent to it)
        assert [g["step"] for g in got] == [8] * 4 and restored["source"] == "peer_memory"
