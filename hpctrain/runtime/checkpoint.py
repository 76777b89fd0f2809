"""Atomic, verified checkpoints with torch.distributed.checkpoint (DCP), and resume from the newest good one.

Layout of ``$RUN/checkpoints/step-XXXXXXXX/``:

* DCP files of ``{"model", "optim"}`` from ``get_state_dict`` (sharded layouts save their shards;
  a save under one layout loads under another);
* ``trainer.pt`` (rank 0): step, data position, LR scheduler state;
* ``rng-rank-N.pt`` (each rank): torch CPU/CUDA, python and numpy RNG states;
* ``manifest.json`` (rank 0, written last): every file's size and CRC32 (each rank sums its own
  and sends the sums to rank 0 over the checkpoint's process group).

Everything is written into ``step-XXXXXXXX.tmp/`` and renamed once the manifest exists, so a
directory without ``.tmp`` is complete; one whose files no longer match the manifest (truncated,
overwritten) is skipped on load in favour of the previous one. Saves are asynchronous: the state is
copied into host buffers that are allocated once, in the background once an attempt's optimizer has
its state (after the first step, or while a resume loads), and reused (``runtime/staging.py``), and
the files are written by a checkpoint process (GPU state) or thread while training goes on. A rank
killed in the middle of a save leaves only a ``.tmp`` folder, which is never loaded. Once every rank
has written and checksummed its files, rank 0 publishes the checkpoint from its background thread;
the next save (or ``wait()``) only confirms it with a barrier. The sums travel by a gather, not by
files that rank 0 polls for: the publication follows the last rank at once, and a large job does not
stat one file per rank many times a second on the shared filesystem.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

from hpctrain.rundir import CHECKPOINT, CHECKPOINT_RNG, CHECKPOINT_TRAINER, FileSum, RunDir, TrainLine
from hpctrain.runtime.checkpoint_folder import (
    complete,
    discard,
    file_sum,
    newest_good,
    owner,
    prune,
    step_of,
    unsummed,
    write_manifest,
)
from hpctrain.runtime.memory_checkpoint import MemoryCheckpoints, Plan
from hpctrain.runtime.staging import (
    HostStaging,
    foreseen_specs,
    has_dtensor,
    leaves,
    moments_per_parameter,
    on_cuda,
    shared_memory_fits,
)

log = logging.getLogger(__name__)

EventFn = Callable[..., None]
WRITE_THREADS = 4  # files per rank, written and checksummed in parallel
SMALL_STATE_BYTES = 64 << 20  # below this a rank writes one file: threads cost more than they save


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


@dataclass
class Pending:
    """A save whose files are being written in the background."""

    step: int
    tmp: Path
    final: Path
    started: float
    blocked: float
    writer: threading.Thread
    own_done: threading.Event  # this rank's files are written and checksummed
    staged_bytes: int


@dataclass
class Restored:
    """What a resume hands back to the loop (model and optimizer are loaded in place)."""

    step: int
    path: Path
    trainer: dict[str, Any]


class Checkpointer:
    """Saves and restores checkpoints in ``$RUN/checkpoints``; every method is collective.

    ``writer`` picks who writes the files of a save: ``process`` (DCP's checkpoint process, one per
    rank, started at the first save; the training process's GIL stays with the training loop),
    ``thread`` (a thread of this process), or ``auto``: the process for GPU state without DTensors,
    else the thread (sharded DTensor state is written by the thread of each rank).
    """

    def __init__(
        self,
        run_dir: Path,
        rank: int,
        keep: int,
        event: EventFn,
        writer: str = "auto",
        memory: MemoryCheckpoints | None = None,
    ) -> None:
        self.run = RunDir(run_dir)
        self.memory = memory
        self.root = self.run.checkpoints
        self.rank = rank
        self.keep = keep
        self.event = event
        self.writer = writer
        self.staging: HostStaging | None = None
        self._group: Any = None
        self._memory_group: Any = None
        self._fenced: set[int] = set()
        self._pending: Pending | None = None
        self._write_error: BaseException | None = None
        self._written_at: float | None = None
        self._published_at: float | None = None

    def complete(self) -> list[Path]:
        """Finished checkpoint folders, newest first."""
        return complete(self.root)

    def save(
        self,
        step: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        trainer: dict[str, Any],
        blocking: bool = True,
    ) -> float:
        """Write checkpoint ``step``; returns the seconds training (the host) was blocked.

        The state is copied into host buffers that are reused from save to save, and the files are
        written, checksummed and published (manifest, rename) in the background; the next save or
        ``wait()`` confirms the publication. ``blocking=True`` (preemption) waits for it here.
        """
        self.wait()
        started = time.perf_counter()
        final = self.run.checkpoint(step)
        tmp = final.with_name(final.name + ".tmp")
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        dist.barrier()
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state}
        torch.save(rng_state(), tmp / CHECKPOINT_RNG.name(self.rank))
        if self.rank == 0:
            torch.save({"step": step, **trainer}, tmp / CHECKPOINT_TRAINER)
        staging = self._staging_for(state, model, optimizer)
        kind = AsyncCheckpointerType.PROCESS if staging.shared else AsyncCheckpointerType.THREAD
        response = dcp.async_save(
            state,
            storage_writer=FileSystemWriter(str(tmp), thread_count=self._write_threads(staging)),
            process_group=self._group,
            async_checkpointer_type=kind,
            async_stager=staging,
        )
        upload = getattr(response, "upload_completion", response)
        self._written_at = self._published_at = None
        own_done = threading.Event()
        writer = threading.Thread(
            target=self._finish_write, args=(upload, step, tmp, final, own_done), daemon=True
        )
        writer.start()
        blocked = time.perf_counter() - started
        self._pending = Pending(step, tmp, final, started, blocked, writer, own_done, staging.staged_bytes)
        if self.rank == 0:
            log.info("checkpoint step %d staged in %.3f s; writing in the background", step, blocked)
        if blocking:
            self.wait()
            return time.perf_counter() - started
        return blocked

    @staticmethod
    def _write_threads(staging: HostStaging) -> int:
        """One file per rank for a small state (the size of the previous save; a first save is small).

        FileSystemWriter starts its threads at every save; on a small state that costs more than the
        parallel writes save, and on a busy CPU each thread also waits for its turn.
        """
        return WRITE_THREADS if staging.staged_bytes >= SMALL_STATE_BYTES else 1

    def _staging_for(
        self, state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer
    ) -> HostStaging:
        """The run's stager and the fence before the optimizer's update."""
        if self._group is None:
            # A group of its own: the background write's collectives must not interleave with training's.
            self._group = dist.new_group(backend="gloo")
        staging = self._stager(state, model)
        if staging.cuda and id(optimizer) not in self._fenced:
            optimizer.register_step_pre_hook(lambda *_: staging.fence())
            self._fenced.add(id(optimizer))
        return staging

    def _stager(self, state: dict[str, Any], model: nn.Module) -> HostStaging:
        """The run's stager, built for the first state it sees (GPU or not, process writer or not)."""
        if self.staging is None:
            cuda = on_cuda(state)
            process = self.writer == "process" or (
                self.writer == "auto" and cuda and not has_dtensor(state) and shared_memory_fits(state)
            )
            self.staging = HostStaging(cuda=cuda, shared=process)
            self.staging.protect_in_place_updates(model.buffers())
        return self.staging

    def reserve_staging_after_next_step(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Once the optimizer's next step has created its state, allocate the staging buffers in the
        background, so that the first save only copies (allocating and pinning 11 GB at the save
        blocked training for seconds). On a resume that step is the one ``set_state_dict`` takes to
        create the state it loads into, so the allocation overlaps the load. Purely local: no
        collective, so ranks need not agree on when.

        For an optimizer whose state is known (AdamW, SGD), the buffers are foreseen and their
        allocation starts now, before the first step: a compiled first step (30 to 80 s on an
        H200) hides it, where the steps after it (7 s to the first save at step 40) did not."""
        if moments_per_parameter(optimizer) is not None:
            model_state = model.state_dict()
            specs = foreseen_specs(model_state, optimizer)
            moments = [torch.empty(shape, dtype=dtype, device="meta") for shape, dtype in specs]
            # The stager's choices (GPU, writer process, /dev/shm room) from the state to come.
            foreseen = {"model": model_state, "optim": moments[len(list(leaves(model_state))) :]}
            self._stager(foreseen, model).reserve_like(specs)
        handle: Any = None

        def after_step(*_: Any) -> None:
            handle.remove()
            model_state, optim_state = get_state_dict(model, optimizer)
            state = {"model": model_state, "optim": optim_state}
            self._stager(state, model).reserve(state)

        handle = optimizer.register_step_post_hook(after_step)

    def _finish_write(
        self, upload: Any, step: int, tmp: Path, final: Path, own_done: threading.Event
    ) -> None:
        """Background: wait for the files, checksum this rank's and gather the sums on rank 0, which
        then publishes at once, so a checkpoint is loadable long before the next save. A peer that
        dies before its sums arrive fails the gather: the folder stays ``.tmp``, never loaded."""
        try:
            upload.result()
            self._written_at = time.perf_counter()
            sums = self._checksum_own_files(tmp)
            gathered: list[Any] | None = [None] * dist.get_world_size() if self.rank == 0 else None
            dist.gather_object(sums, gathered, dst=0, group=self._group)
            if gathered is not None:
                self._rename(step, tmp, final, {name: s for part in gathered for name, s in part.items()})
                self._published_at = time.perf_counter()
        except BaseException as error:  # reported on the main thread by wait()
            self._write_error = error
        finally:
            own_done.set()

    def _checksum_own_files(self, tmp: Path) -> dict[str, FileSum]:
        """Each rank checksums the files it wrote, in parallel with the others (zlib frees the GIL)."""
        mine = [p for p in tmp.iterdir() if p.is_file() and owner(p.name) == self.rank]
        if len(mine) <= 1:
            return {p.name: file_sum(p) for p in mine}
        with ThreadPoolExecutor(max_workers=WRITE_THREADS) as pool:
            return dict(zip((p.name for p in mine), pool.map(file_sum, mine), strict=True))

    def _rename(self, step: int, tmp: Path, final: Path, summed: dict[str, FileSum]) -> None:
        """Rank 0: manifest, then the atomic rename that makes the checkpoint loadable, then pruning."""
        write_manifest(tmp, step, {**summed, **unsummed(tmp, summed)})
        discard(final)  # a re-save of the same step after a resume
        os.replace(tmp, final)
        self._prune(final)

    def wait(self) -> None:
        """Until the checkpoint being written in the background is published, if any (collective)."""
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        pending.own_done.wait()
        if self._write_error is None:
            dist.barrier()  # every rank's sums reached rank 0 (a dead peer times out here)
            pending.writer.join()  # rank 0: the rename
        if self._write_error is not None:
            error, self._write_error = self._write_error, None
            raise RuntimeError(
                f"background checkpoint write of step {pending.step} failed: {error}"
            ) from error
        dist.barrier()  # nobody moves on (or exits for a requeue) before the rename
        if self.rank == 0:
            self._report(pending)

    def _report(self, pending: Pending) -> None:
        now = time.perf_counter()
        write_s = (self._written_at or now) - pending.started
        published_s = (self._published_at or now) - pending.started
        log.info(
            "checkpoint step %d saved to %s: training blocked %.3f s, files written after %.3f s "
            "(%.2f GB/s), published after %.3f s",
            pending.step,
            pending.final,
            pending.blocked,
            write_s,
            pending.staged_bytes / write_s / 1e9,
            published_s,
        )
        self.event(
            "checkpoint",
            step=pending.step,
            path=str(pending.final),
            save_s=round(pending.blocked, 4),
            write_s=round(write_s, 4),
            written_s=round(published_s, 4),
            bytes=pending.staged_bytes,
        )

    def _prune(self, published: Path) -> None:
        prune(self.root, self.keep, published)

    def clean_partial(self) -> None:
        """Rank 0 on start: folders left by a save killed before its rename, or a deletion killed midway."""
        if self.rank == 0 and self.root.is_dir():
            for partial in self.root.glob(f"{CHECKPOINT.prefix}*.*"):
                log.warning("removing partial checkpoint %s", partial)
                shutil.rmtree(partial, ignore_errors=True)

    def _choose(self) -> Path | None:
        """Rank 0: the newest checkpoint that verifies; corrupt ones are reported and skipped."""
        return newest_good(self.root, self.event)

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> Restored | None:
        """Load the newest state into model and optimizer (and this rank's RNG): the memory copy
        (``memory_checkpoint.py``) when it is newer than the newest good checkpoint on disk, else that.

        Every attempt starts here, so this also arranges for the staging buffers to be allocated
        after the first step (:meth:`reserve_staging_after_next_step`).
        """
        started = time.perf_counter()
        self.reserve_staging_after_next_step(model, optimizer)
        choice: list[str | None] = [None]
        if self.rank == 0:
            folder = self._choose()
            choice[0] = str(folder) if folder is not None else None
        dist.broadcast_object_list(choice, src=0)
        disk = Path(choice[0]) if choice[0] is not None else None
        plan = None
        if self.memory is not None and self.memory.every:  # the spec's: the same on every rank
            self._memory_group = dist.new_group(backend="gloo")  # CPU tensors, whatever the device
            newer_than = step_of(disk.name) if disk is not None else None
            plan = self.memory.plan(newer_than, dist.get_world_size(), self._memory_group)
        if plan is not None:
            restored = self._load_memory(plan, model, optimizer)
        elif disk is not None:
            restored = self._load_disk(disk, model, optimizer)
        else:
            return None
        if self.memory is not None:
            self.memory.drop_newer(restored.step)
        if self.rank == 0:
            self._report_restore(restored, plan, disk, time.perf_counter() - started)
        return restored

    def _load_disk(self, path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> Restored:
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        trainer = torch.load(path / CHECKPOINT_TRAINER, weights_only=False)
        rng_path = path / CHECKPOINT_RNG.name(self.rank)
        if rng_path.exists():
            set_rng_state(torch.load(rng_path, weights_only=False))
        else:  # saved with fewer ranks: data order is still exact, dropout streams are not
            log.warning("%s has no RNG state for rank %d; keeping the fresh seed", path.name, self.rank)
        return Restored(step=int(trainer["step"]), path=path, trainer=trainer)

    def _load_memory(self, plan: Plan, model: nn.Module, optimizer: torch.optim.Optimizer) -> Restored:
        assert self.memory is not None
        state = self.memory.fetch(plan, self._memory_group)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        if plan.origin[self.rank] == self.rank:  # another rank's RNG streams are not this rank's
            set_rng_state(state["rng"])
        trainer = state["trainer"]
        return Restored(step=int(trainer["step"]), path=self.memory.folder or self.root, trainer=trainer)

    def _report_restore(
        self, restored: Restored, plan: Plan | None, disk: Path | None, load_s: float
    ) -> None:
        """Rank 0: the ``restored`` event: where the state came from and the steps the fault cost."""
        reached = max(
            (m.step for m in self.run.read_metrics(head=0) if isinstance(m, TrainLine)), default=None
        )
        source = "disk" if plan is None else "peer_memory" if any(plan.peer) else "memory"
        self.event(
            "restored",
            step=restored.step,
            source=source,
            disk_step=step_of(disk.name) if disk is not None else None,
            reached_step=reached,
            rolled_back_steps=max(0, reached - restored.step) if reached is not None else None,
            peer_copies=sum(plan.peer) if plan is not None else 0,
            load_s=round(load_s, 4),
        )

    def save_memory(
        self,
        step: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        trainer: dict[str, Any],
        step_s: float = 0.0,
    ) -> float:
        """Checkpoint ``step`` into node memory, replicated to the peer node; returns the seconds
        training was blocked (the copy to host memory). Collective. `step_s`: the recent step time."""
        assert self.memory is not None
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {
            "model": model_state,
            "optim": optim_state,
            "trainer": {"step": step, **trainer},
            "rng": rng_state(),
        }
        return self.memory.save(step, state, self._memory_group, step_s)

    def memory_due(self, step: int) -> bool:
        return self.memory is not None and self.memory.due(step)

    def forget_memory(self) -> None:
        """Training completed: the memory copies are no longer needed."""
        if self.memory is not None:
            self.memory.forget()
