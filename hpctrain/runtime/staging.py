"""Host staging of checkpoint state into buffers allocated once, before the first save, and reused.

A checkpoint's state (model and optimizer tensors, on the GPU) is copied into host buffers that
belong to the stager for the whole run, allocated in a background thread (pinned, so the GPU copies
at full PCIe speed, and in shared memory when a writer process reads them; pinning touches every
page, which took 5.6 to 9.6 s for 11 GB). :meth:`HostStaging.reserve_like` starts before the first
step with the shapes the state will have (the weights, and the optimizer's per-parameter moments),
so a compiled first step hides the allocation; :meth:`HostStaging.reserve` then maps the real
state's tensors onto those buffers by shape and allocates only what was not foreseen. Every save
copies into the same buffers. A save that comes while the reservation still runs waits for it; one
after a failed reservation allocates itself.

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
        self._foreseen: Future[dict[BufferSpec, list[torch.Tensor]]] | None = None
        self._reserver: ThreadPoolExecutor | None = None
        self._reserve_started: float | None = None
        self.reserve_s: float | None = (
            None  # seconds from the first background allocation to all buffers ready
        )
        self.foreseen_bytes = 0  # bytes allocated before the state existed and then used by it

    def _background(self) -> ThreadPoolExecutor:
        """One thread for every background allocation, so the real state's plan runs after the
        foreseen buffers exist. One, not several: on an H200, four threads pinning at once slowed
        the steps beside them by 0.7 s in all and one slowed them by nothing."""
        if self._reserver is None:
            self._reserver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-reserve")
            self._reserve_started = time.perf_counter()
        return self._reserver

    def reserve_like(self, specs: Iterable[BufferSpec]) -> None:
        """Before the state exists: allocate buffers of these shapes in the background, for
        :meth:`reserve` to hand out by shape. Called before the first step (the step that creates
        the optimizer's state), so the allocation runs beside it, not beside the steps after it."""
        if self._foreseen is not None or self._reservation is not None or self.buffers:
            return
        wanted = list(specs)
        if not wanted:
            return
        if self.shared:
            raise_open_file_limit(len(wanted))
        device = torch.cuda.current_device() if self.cuda else None
        self._foreseen = self._background().submit(self._allocate_foreseen, wanted, device)

    def reserve(self, state: STATE) -> None:
        """Allocate (and pin) a buffer for every tensor of ``state`` in a background thread, once.

        Called once the optimizer state exists (after the first step, or while a resume loads):
        the buffers :meth:`reserve_like` foresaw are taken by shape, the rest allocated, and the
        first save finds them ready.
        """
        if self._reservation is not None or self.buffers:
            return
        plan = {path: (tuple(t.shape), t.dtype) for path, t in leaves(state)}
        device = torch.cuda.current_device() if self.cuda else None
        if self.shared:
            raise_open_file_limit(len(plan))
        self._reservation = self._background().submit(self._allocate_all, plan, device)

    def _allocate_foreseen(
        self, wanted: list[BufferSpec], device: int | None
    ) -> dict[BufferSpec, list[torch.Tensor]]:
        _use_device(device)
        pool: dict[BufferSpec, list[torch.Tensor]] = {}
        for spec in wanted:
            pool.setdefault(spec, []).append(self._allocate(*spec))
        return pool

    def _allocate_all(self, plan: dict[str, BufferSpec], device: int | None) -> dict[str, torch.Tensor]:
        _use_device(device)
        pool = self._foreseen_pool()
        buffers = {}
        for path, spec in plan.items():
            spare = pool.get(spec)
            if spare:
                buffers[path] = spare.pop()
                self.foreseen_bytes += math.prod(spec[0]) * spec[1].itemsize
            else:
                buffers[path] = self._allocate(*spec)
        for unused in (buffer for spare in pool.values() for buffer in spare):
            self._release(unused)
        assert self._reserve_started is not None
        self.reserve_s = time.perf_counter() - self._reserve_started
        size = sum(b.numel() * b.element_size() for b in buffers.values())
        log.info(
            "staging buffers of %.2f GB allocated in the background in %.2f s"
            " (%.2f GB before the first step)",
            size / 1e9,
            self.reserve_s,
            self.foreseen_bytes / 1e9,
        )
        return buffers

    def _foreseen_pool(self) -> dict[BufferSpec, list[torch.Tensor]]:
        """The buffers allocated before the state existed; none if that allocation failed."""
        if self._foreseen is None:
            return {}
        try:
            return self._foreseen.result()
        except Exception as error:  # the plan allocates what it needs; the save reports a failure again
            log.warning("allocating the staging buffers before the first step failed (%s)", error)
            return {}

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
        if self._reserver is not None:
            self._reserver.shutdown(wait=True)
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

    def _release(self, buffer: torch.Tensor) -> None:
        """A foreseen buffer the state did not need: unpin it before its memory goes."""
        if self.shared and self.cuda and buffer.numel():
            torch.cuda.cudart().cudaHostUnregister(buffer.data_ptr())


def foreseen_specs(model_state: STATE, optimizer: torch.optim.Optimizer) -> list[BufferSpec]:
    """The buffer shapes of a checkpoint before its optimizer state exists: every tensor of the
    model's state, and per trainable parameter one like it for each moment the optimizer keeps
    (the scalar step counters are too small to matter and are allocated with the state)."""
    specs = [(tuple(t.shape), t.dtype) for _, t in leaves(model_state)]
    moments = moments_per_parameter(optimizer) or 0
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            if parameter.requires_grad:
                local = parameter.to_local() if isinstance(parameter, DTensor) else parameter
                specs.extend([(tuple(local.shape), local.dtype)] * moments)
    return specs


def moments_per_parameter(optimizer: torch.optim.Optimizer) -> int | None:
    """How many parameter-shaped tensors the optimizer keeps per parameter; None for an optimizer
    whose state is not known here (its buffers are then all allocated after the first step)."""
    settings = optimizer.defaults
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return 3 if settings.get("amsgrad") else 2
    if isinstance(optimizer, torch.optim.SGD):
        return 1 if settings.get("momentum") else 0
    return None


def _use_device(device: int | None) -> None:
    """A new thread's current GPU is GPU 0: pin for this rank's GPU, not on a context of GPU 0."""
    if device is not None:
        torch.cuda.set_device(device)


def _when_done(ready: torch.cuda.Event, staged: STATE) -> STATE:
    ready.synchronize()
    return staged
