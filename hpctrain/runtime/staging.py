"""Host staging of checkpoint state into buffers allocated once, before the first save, and reused.

A checkpoint's state (model and optimizer tensors, on the GPU) is copied into host buffers that
belong to the stager for the whole run: :meth:`HostStaging.reserve` allocates them in a background
thread once the state's shapes are known (pinned, so the GPU copies at full PCIe speed, and in
shared memory when a writer process reads them; pinning touches every page, which took seconds for
11 GB when the first save did it), and every save copies into the same buffers. A save that comes
while the reservation still runs waits for it; one after a failed reservation allocates itself.

On a GPU the copies run on a side stream that first waits for the work already queued, so the
host never waits for them: ``stage`` returns a future that a helper thread
completes once the copies are done, and :meth:`HostStaging.fence` (called just before the optimizer
updates the parameters in place) makes the compute stream wait for the copies on the GPU.
Tensors that a forward pass may update in place (module buffers such as running statistics) are
copied on the compute stream itself, so they are taken before the next forward.

Implements DCP's ``AsyncStager`` protocol, so ``dcp.async_save(..., async_stager=...)`` uses it.
"""

from __future__ import annotations

import logging
import math
import resource
import shutil
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch.distributed.tensor import DTensor

STATE = dict[str, Any]
BufferSpec = tuple[tuple[int, ...], torch.dtype]
log = logging.getLogger(__name__)


def child(path: str, key: object) -> str:
    """The staging path of an item of a dict or list: one buffer per path."""
    return f"{path}/{key}"


def leaves(state: Any, path: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of a nested state dict with its staging path (a DTensor as its local shard)."""
    if isinstance(state, torch.Tensor):
        yield path, state.to_local() if isinstance(state, DTensor) else state
    elif isinstance(state, dict):
        for key, value in state.items():
            yield from leaves(value, child(path, key))
    elif isinstance(state, (list, tuple)):
        for index, value in enumerate(state):
            yield from leaves(value, child(path, index))


def tensors(state: Any) -> Iterator[torch.Tensor]:
    """Every tensor of a nested state dict (a DTensor as its local shard)."""
    return (tensor for _, tensor in leaves(state))


def has_dtensor(state: Any) -> bool:
    if isinstance(state, dict):
        return any(has_dtensor(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return any(has_dtensor(v) for v in state)
    return isinstance(state, DTensor)


def on_cuda(state: Any) -> bool:
    return any(t.device.type == "cuda" for t in tensors(state))


def shared_memory_fits(state: dict[str, Any]) -> bool:
    """Whether /dev/shm can hold the staging buffers a writer process reads (twice over, for headroom)."""
    needed = sum(t.numel() * t.element_size() for t in tensors(state))
    try:
        free = shutil.disk_usage("/dev/shm").free
    except OSError:
        return False
    if free < 2 * needed:
        log.warning(
            "/dev/shm has %.1f GB free for %.1f GB of checkpoint state: writing from a thread",
            free / 1e9,
            needed / 1e9,
        )
        return False
    return True


def raise_open_file_limit(needed: int) -> None:
    """Each shared-memory buffer holds a file descriptor for the whole run: lift the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = needed + 1024
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


class HostStaging:
    """Copies a state dict into reusable host buffers; DCP's AsyncStager protocol."""

    should_synchronize_after_execute = False

    def __init__(self, cuda: bool, shared: bool) -> None:
        self.cuda = cuda
        self.shared = shared
        self.buffers: dict[str, torch.Tensor] = {}
        self.allocations = 0  # buffers ever allocated: stays flat after the first save
        self.staged_bytes = 0
        self._stream: torch.cuda.Stream | None = torch.cuda.Stream() if cuda else None
        self._ready: torch.cuda.Event | None = None
        self._waiter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-staging") if cuda else None
        self._mutable: set[int] = set()
        self._reservation: Future[dict[str, torch.Tensor]] | None = None
        self.reserve_s: float | None = None  # seconds the background allocation took

    def reserve(self, state: STATE) -> None:
        """Allocate (and pin) a buffer for every tensor of ``state`` in a background thread, once.

        Called once the optimizer state exists (after the first step, or while a resume loads):
        training goes on while the buffers are allocated, and the first save finds them ready.
        """
        if self._reservation is not None or self.buffers:
            return
        plan = {path: (tuple(t.shape), t.dtype) for path, t in leaves(state)}
        device = torch.cuda.current_device() if self.cuda else None
        if self.shared:
            raise_open_file_limit(len(plan))
        reserver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-reserve")
        self._reservation = reserver.submit(self._allocate_all, plan, device)
        reserver.shutdown(wait=False)  # its one task still runs; the thread ends with it

    def _allocate_all(self, plan: dict[str, BufferSpec], device: int | None) -> dict[str, torch.Tensor]:
        """One thread, one buffer after another: on an H200, with four threads pinning at once the
        steps beside them ran 0.7 s slower in all; with one they ran as fast as without any
        allocation beside them, and the 11.3 GB of a 944M GPT took 5.6 s instead of 2.8 s."""
        _use_device(device)
        started = time.perf_counter()
        buffers = {path: self._allocate(*spec) for path, spec in plan.items()}
        self.reserve_s = time.perf_counter() - started
        size = sum(b.numel() * b.element_size() for b in buffers.values())
        log.info(
            "staging buffers of %.2f GB allocated in the background in %.2f s", size / 1e9, self.reserve_s
        )
        return buffers

    def _take_reservation(self) -> None:
        """The reserved buffers, waiting for them if the allocation still runs; after a failed
        reservation the save allocates what it needs itself."""
        if self._reservation is None:
            return
        reservation, self._reservation = self._reservation, None
        try:
            reserved = reservation.result()
        except Exception as error:  # e.g. pinning refused: the save path allocates and reports it
            log.warning(
                "background allocation of the staging buffers failed (%s): allocating at the save", error
            )
            return
        self.buffers.update(reserved)
        self.allocations += len(reserved)

    def protect_in_place_updates(self, module_buffers: Iterable[torch.Tensor]) -> None:
        """Tensors that a forward pass updates in place: copied on the compute stream, in order."""
        self._mutable = {t.data_ptr() for t in module_buffers}

    # -- the AsyncStager protocol -----------------------------------------------------------------

    def stage(self, state_dict: STATE, **_: Any) -> STATE | Future[STATE]:
        self._take_reservation()
        self.staged_bytes = 0
        if not self.cuda:
            return self._copy(state_dict, "")
        assert self._stream is not None and self._waiter is not None
        compute = torch.cuda.current_stream()
        self._stream.wait_stream(compute)  # the copies see every update queued before the save
        staged = self._copy(state_dict, "")
        ready = torch.cuda.Event()
        ready.record(self._stream)
        self._ready = ready
        return self._waiter.submit(_when_done, ready, staged)

    def synchronize_staging(self) -> None:
        if self._ready is not None:
            self._ready.synchronize()

    def close(self) -> None:
        self._take_reservation()
        if self._waiter is not None:
            self._waiter.shutdown(wait=True)

    # -- the loop's side ---------------------------------------------------------------------------

    def fence(self) -> None:
        """Before an in-place update of the staged tensors: the GPU (not the host) waits for the copies."""
        if self._ready is not None:
            torch.cuda.current_stream().wait_event(self._ready)
            self._ready = None

    # -- copying -----------------------------------------------------------------------------------

    def _copy(self, value: Any, path: str) -> Any:
        if isinstance(value, DTensor):
            local = self._copy_tensor(value.to_local(), path)
            return DTensor.from_local(
                local,
                value.device_mesh,
                value.placements,
                run_check=False,
                shape=value.shape,
                stride=value.stride(),
            )
        if isinstance(value, torch.Tensor):
            return self._copy_tensor(value, path)
        if isinstance(value, dict):
            return {key: self._copy(item, child(path, key)) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self._copy(item, child(path, index)) for index, item in enumerate(value))
        return value

    def _copy_tensor(self, tensor: torch.Tensor, path: str) -> torch.Tensor:
        tensor = tensor.detach()
        buffer = self.buffers.get(path)
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            self.allocations += 1
            if self.shared:
                raise_open_file_limit(self.allocations)
            buffer = self._allocate(tuple(tensor.shape), tensor.dtype)
            self.buffers[path] = buffer
        self.staged_bytes += buffer.numel() * buffer.element_size()
        if tensor.device.type != "cuda":
            buffer.copy_(tensor)
        elif tensor.data_ptr() in self._mutable:
            buffer.copy_(tensor, non_blocking=True)  # on the compute stream, before the next forward
            self._stream.wait_stream(torch.cuda.current_stream())  # type: ignore[union-attr]
        else:
            with torch.cuda.stream(self._stream):
                buffer.copy_(tensor, non_blocking=True)
            tensor.record_stream(self._stream)  # type: ignore[arg-type]
        return buffer

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if not self.shared:
            return torch.empty(shape, dtype=dtype, pin_memory=self.cuda)
        # Straight into shared memory: share_memory_() of a fresh tensor would also copy it there.
        storage = torch.UntypedStorage._new_shared(math.prod(shape) * dtype.itemsize)
        buffer = torch.empty(0, dtype=dtype).set_(storage, 0, shape)
        if self.cuda and buffer.numel():
            # Shared memory cannot be allocated pinned; registering it pins it in place. Pages are
            # touched first (zero_ frees the GIL), so the driver call only pins resident pages.
            buffer.zero_()
            code = torch.cuda.cudart().cudaHostRegister(
                buffer.data_ptr(), buffer.numel() * buffer.element_size(), 0
            )
            if int(code) != 0:
                raise RuntimeError(
                    f"cudaHostRegister of a {tuple(buffer.shape)} staging buffer failed ({code})"
                )
        return buffer


def _use_device(device: int | None) -> None:
    """A new thread's current GPU is GPU 0: pin for this rank's GPU, not on a context of GPU 0."""
    if device is not None:
        torch.cuda.set_device(device)


def _when_done(ready: torch.cuda.Event, staged: STATE) -> STATE:
    ready.synchronize()
    return staged
