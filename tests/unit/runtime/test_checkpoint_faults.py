"""Checkpoints under faults: ranks killed with SIGKILL in the middle of real background saves, and a
retention policy that never deletes the last verified checkpoint, whatever the save/fail/corrupt/resume
sequence."""

from __future__ import annotations

import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from hpctrain.rundir import RunDir
from hpctrain.runtime import checkpoint_folder
from hpctrain.runtime.checkpoint import Checkpointer
from hpctrain.runtime.checkpoint_folder import verify

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
import _runtime_job as job

# ------------------------------------------------------------------------------------------------
# SIGKILL during real saves of a 2-rank training run
# ------------------------------------------------------------------------------------------------

# Hidden 512: 0.9 MB of parameters, 2.8 MB with Adam's moments per save, so a save is in flight
# most of the time when one starts every 2 steps.
KILLED = dict(
    steps=60,
    batch_size=32,
    lr=0.003,
    log_every=2,
    checkpoint_every=2,
    keep_checkpoints=2,
    deterministic=True,
    timeout_s=20,
    options={"hidden": 512},
)


def saving(run: Path) -> bool:
    return any((run / "checkpoints").glob("step-*.tmp"))


def kill_one_rank_mid_save(run: Path, chance: random.Random) -> int:
    """Start 2 ranks, SIGKILL one of them while a save is in flight; end the other as srun
    --kill-on-bad-exit would. Returns the killed rank."""
    earlier = len(job.metrics(run))

    def in_flight() -> bool:  # a save of this attempt (a stale .tmp is removed before training starts)
        trained = [m for m in job.metrics(run)[earlier:] if m["kind"] == "train"]
        return len(trained) >= 3 and saving(run)

    procs = job.start_local(run, 2)
    try:
        assert job.wait_for(in_flight, timeout=180, interval=0.002)
        time.sleep(chance.uniform(0, 0.03))  # anywhere in the write, checksum, gather or rename
        victim = chance.randrange(2)
        os.kill(procs[victim].pid, signal.SIGKILL)
        time.sleep(1)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    return victim


def test_ranks_killed_in_the_middle_of_saves_never_leave_a_checkpoint_that_loads_as_good(
    tmp_path: Path,
) -> None:
    run = job.write_run_dir(tmp_path, KILLED, tasks_per_node=2)
    chance = random.Random(11)
    torn = 0
    for _ in range(4):
        kill_one_rank_mid_save(run, chance)
        torn += len(list((run / "checkpoints").glob("step-*.tmp")))
        for folder in Checkpointer(run, 0, 2, lambda *_, **__: None).complete():
            assert verify(folder) is None, folder  # every published folder is whole
    assert torn >= 1, "no kill landed in the middle of a save"
    assert job.run_local(run, 2, timeout=300) == [0, 0]  # resumes from the newest good one, finishes
    resumed = [m["step"] for m in job.metrics(run) if m.get("event") == "resumed"]
    assert len(resumed) == 4 and all(step >= 2 for step in resumed)  # every attempt after the first
    assert not [m for m in job.metrics(run) if m.get("event") == "checkpoint_corrupt"]
    assert (run / "result.json").exists() and not list((run / "checkpoints").glob("*.tmp"))


# ------------------------------------------------------------------------------------------------
# Retention: keep N, never the last verified one
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def world_of_one() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def naive(complete: list[Path], keep: int, published: Path) -> list[Path]:
    """The policy this module guards against: the ``keep`` newest names."""
    return complete[keep:]


class Run:
    """One run directory driven through saves, failed saves, corruptions and resumes."""

    def __init__(self, root: Path, keep: int) -> None:
        self.root = root
        self.keep = keep
        self.step = 0
        self.checkpoints = self._resume()

    def _resume(self) -> Checkpointer:
        checkpoints = Checkpointer(self.root, 0, self.keep, lambda *_, **__: None)
        checkpoints.clean_partial()
        restored = checkpoints.load(*self._model())
        self.step = restored.step if restored is not None else 0
        return checkpoints

    @staticmethod
    def _model() -> tuple[nn.Module, torch.optim.Optimizer]:
        model = nn.Linear(4, 2)
        return model, torch.optim.AdamW(model.parameters())

    def newest_good(self) -> int:
        good = [int(p.name[5:]) for p in self.checkpoints.complete() if verify(p) is None]
        return max(good, default=-1)

    def save(self, dies: bool) -> None:
        self.step += 1
        if dies:  # the save never publishes: a peer died before its sums reached rank 0
            self.checkpoints._checksum_own_files = _raise  # type: ignore[method-assign]
        trainer = {"position": {"epoch": 0, "offset": self.step}}
        try:
            self.checkpoints.save(self.step, *self._model(), trainer)
        except RuntimeError:
            assert dies
            self.checkpoints = self._resume()

    def corrupt(self, which: int) -> None:
        folders = self.checkpoints.complete()
        if folders:
            data = next(folders[which % len(folders)].glob("*.distcp"))
            data.write_bytes(data.read_bytes()[:10])

    def resume(self, keep: int) -> None:
        """A new attempt; its spec may keep another number of checkpoints (edited before a requeue)."""
        self.keep = keep
        self.checkpoints = self._resume()


def _raise(tmp: Path) -> dict[str, dict[str, object]]:
    raise OSError("peer gone")


OPERATIONS = st.lists(
    st.one_of(
        st.just(("save", 0)),
        st.just(("fail", 0)),
        st.tuples(st.just("resume"), st.integers(1, 3)),
        st.tuples(st.just("corrupt"), st.integers(0, 5)),
    ),
    max_size=14,
)


def replay(root: Path, keep: int, operations: list[tuple[str, int]]) -> list[str]:
    """Run the operations; what went wrong: a save, failed save or resume that lost the newest good
    checkpoint without a newer good one taking its place."""
    run = Run(root, keep)
    problems = []
    for name, which in operations:
        before = run.newest_good()
        if name == "corrupt":
            run.corrupt(which)
            continue
        if name == "resume":
            run.resume(keep=which)
        else:
            run.save(dies=name == "fail")
        after = run.newest_good()
        lost = before >= 0 and not RunDir(run.root).checkpoint(before).is_dir()
        if lost and after < 0:
            problems.append(f"{name} deleted step {before}, the last good checkpoint")
    return problems


def test_a_naive_policy_deletes_the_last_verified_checkpoint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Keep 3: save 1..3, corrupt 3 and 2; resume (at 1) keeping 1; save 2. The naive policy keeps
    the newest name, the corrupt 3, and deletes 2 and 1: nothing good is left."""
    steps = [("save", 0)] * 3 + [("corrupt", 0), ("corrupt", 1), ("resume", 1), ("save", 0)]
    assert replay(tmp_path / "kept", 3, steps) == []
    with monkeypatch.context() as patch:
        patch.setattr(checkpoint_folder, "expendable", naive)
        assert replay(tmp_path / "naive", 3, steps) == ["save deleted step 1, the last good checkpoint"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keep=st.integers(1, 3), operations=OPERATIONS)
def test_no_sequence_of_saves_failures_and_resumes_loses_the_last_good_checkpoint(
    keep: int, operations: list[tuple[str, int]]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        assert replay(Path(folder), keep, operations) == []
