"""The node-local heartbeat slots: file paths, binary layout and total readers, shared by rank and watchdog.

The ranks of a node (``hpctrain.runtime.heartbeat``) write their step and phase into one slot file
per (job, attempt, node) under /dev/shm; the watchdog (``hpctrain.supervisor``) reads it back to
collect stacks. This module is the contract between the two: torch-free, and it imports neither side.

Slot file layout (little-endian): ``HEADER`` (64 bytes: magic, version, writer pid, lease time),
then :data:`MAX_SLOTS` slots of :data:`SLOT_SIZE` bytes, the slot of local rank ``i`` at
``HEADER_SIZE + i * SLOT_SIZE``: ``IDENT`` (magic, rank, pid) at 0, ``PROGRESS`` (phase code,
step, phase_since, step_since, step_s) at 16, ``ALIVE`` (time) at 56. The loop writes only
PROGRESS, the ticker only ALIVE, so the two threads never write the same bytes.
"""

from __future__ import annotations

import glob
import hashlib
import math
import mmap
import os
import signal
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where a slot is decoded: hpctrain.client loads this module with no msgspec
    from hpctrain.rundir.structs import RankBeat

# Codes are positions: a new phase goes at the end, so that a reader of another version still decodes.
PHASES = (
    "startup",
    "data",
    "forward",
    "backward",
    "optimizer",
    "collective",
    "checkpoint",
    "eval",
    "snapshot",
    "running",  # a command's rank whose child's output or CPU time advanced (hpctrain.command)
)
PHASE_CODE = {name: code for code, name in enumerate(PHASES)}
UNKNOWN_PHASE = "unknown"

MAGIC = b"HPHB"
VERSION = 1
HEADER = struct.Struct("<4siid")  # magic, version, writer pid, writer lease (time)
HEADER_SIZE = 64
IDENT = struct.Struct("<4sii")  # magic, rank, pid
PROGRESS = struct.Struct("<iqddd")  # phase code, step, phase_since, step_since, step_s (-1: none)
ALIVE = struct.Struct("<d")
PROGRESS_AT, ALIVE_AT = 16, 56
SLOT_SIZE = 64
MAX_SLOTS = 256
FILE_SIZE = HEADER_SIZE + MAX_SLOTS * SLOT_SIZE

TICK_S = 0.25
"""A rank ticks its slot's ALIVE time this often (a background thread)."""
SILENT_AFTER_S = 5.0
"""No tick for this long (margin for a loaded node) means the rank is not running."""
LEASE_S = 1.0
"""A writer lease not refreshed for this long is taken over (the writer ticks every TICK_S)."""


def slot_dir() -> Path:
    """Node-local memory when there is some (/dev/shm), else the temporary directory."""
    chosen = os.environ.get("HPCTRAIN_HEARTBEAT_DIR")
    if chosen:
        return Path(chosen)
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def slot_path(run_dir: Path, job_id: str, attempt: int, node: str) -> Path:
    """The node's slot file. Keyed by node too (on the local test cluster both nodes are one
    host) and by the run directory (runs without a Slurm job id share a host too)."""
    run_key = hashlib.sha1(os.fsencode(run_dir)).hexdigest()[:10]
    key = f"{job_id or 'nojob'}-{attempt}-{node}-{run_key}"
    return slot_dir() / f"hpctrain-heartbeat-{''.join(c if c.isalnum() or c in '-_.' else '_' for c in key)}"


def remove_node_files(run_dir: Path, job_id: str, attempt: int, node: str) -> None:
    """The node's slot file and its ranks' stack files, once the step has ended."""
    slots = slot_path(run_dir, job_id, attempt, node)
    for path in [slots, *slots.parent.glob(f"{glob.escape(slots.name)}.rank-*.stacks")]:
        path.unlink(missing_ok=True)


def stack_file(slots: Path, rank: int) -> Path:
    """Where a rank's faulthandler writes its stacks when asked (node-local, beside the slots)."""
    return slots.with_name(f"{slots.name}.rank-{rank}.stacks")


def current_attempt(env: dict[str, str] | None = None) -> int:
    """This training step's number within the run (HPCTRAIN_ATTEMPT from the batch script)."""
    env = dict(os.environ) if env is None else env
    for key in ("HPCTRAIN_ATTEMPT", "SLURM_RESTART_COUNT"):
        value = env.get(key, "")
        if value.isdigit():
            return int(value)
    return 0


def stack_signal(preemption_signal: str) -> signal.Signals:
    """The signal that makes a rank print its stacks (faulthandler): never the preemption signal."""
    # The spec validated the name already (a number is not USR2 either).
    preemption = preemption_signal.upper().removeprefix("SIG")
    return signal.SIGUSR1 if preemption == "USR2" else signal.SIGUSR2


@dataclass(frozen=True)
class Slot:
    """One rank's slot as read back: the rank, its process, and its entry of the node's file."""

    rank: int
    pid: int
    beat: RankBeat


def put(buffer: mmap.mmap, offset: int, layout: struct.Struct, *values: object) -> None:
    """Write `values` packed by `layout` at `offset` as one copy of the packed bytes. Not
    ``layout.pack_into``: that zero-fills the region before it packs each field, and a process
    reading the slot meanwhile (the node's writer, the watchdog) sees zeros there: a step begun at
    time 0, a rank that last ticked at time 0, a header without its magic. A reader of one copy
    sees the old bytes or the new (tests/unit/runtime/test_heartbeat.py reads a slot while another
    process marks it)."""
    buffer[offset : offset + layout.size] = layout.pack(*values)


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _slot_count(buffer: bytes | mmap.mmap) -> int:
    return max(0, min(MAX_SLOTS, (len(buffer) - HEADER_SIZE) // SLOT_SIZE))


def _claimed(buffer: bytes | mmap.mmap, start: int) -> tuple[int, int, float] | None:
    """Rank, pid and last tick of the slot at `start`; None when it is unused, not a slot, or not yet
    ticked (a rank writes its slot's identity last; a slot that has it without a tick is half written,
    and its rank is starting, not silent since time 0)."""
    magic, rank, pid = IDENT.unpack_from(buffer, start)
    if magic != MAGIC or rank < 0:
        return None
    (alive,) = ALIVE.unpack_from(buffer, start + ALIVE_AT)
    return (rank, pid, alive) if _finite(alive) > 0 else None


def decode_slot(buffer: bytes | mmap.mmap, index: int) -> Slot | None:
    """Slot `index` of a slot file's bytes; None when unused, out of range, not a slot, or not yet
    ticked (see `_claimed`). Total."""
    start = HEADER_SIZE + index * SLOT_SIZE
    if index < 0 or start + SLOT_SIZE > len(buffer):
        return None
    claimed = _claimed(buffer, start)
    if claimed is None:
        return None
    from hpctrain.rundir.structs import RankBeat

    rank, pid, alive = claimed
    code, step, phase_since, step_since, step_s = PROGRESS.unpack_from(buffer, start + PROGRESS_AT)
    step_s = _finite(step_s)
    beat = RankBeat(
        step=step,
        phase=PHASES[code] if 0 <= code < len(PHASES) else UNKNOWN_PHASE,
        time=alive,
        phase_since=_finite(phase_since),
        step_since=_finite(step_since),
        step_s=step_s if step_s >= 0 else None,
        pid=pid,
    )
    return Slot(rank, pid, beat)


def decode_slots(buffer: bytes | mmap.mmap) -> list[Slot]:
    return [slot for i in range(_slot_count(buffer)) if (slot := decode_slot(buffer, i)) is not None]


def silent_ranks(buffer: bytes | mmap.mmap, now: float, after: float) -> set[int]:
    """The ranks of a slot file whose last tick is `after` seconds old or older (reads only each slot's
    identity and tick: the node's writer asks this at every tick)."""
    silent = set()
    for index in range(_slot_count(buffer)):
        claimed = _claimed(buffer, HEADER_SIZE + index * SLOT_SIZE)
        if claimed is not None and now - claimed[2] >= after:
            silent.add(claimed[0])
    return silent


def read_slot_file(path: Path) -> list[Slot]:
    """Every used slot of a node's slot file ([] when it is missing or not one)."""
    try:
        with path.open("rb") as handle:
            data = handle.read(FILE_SIZE)
    except OSError:
        return []
    return decode_slots(data)


def open_slot_file(path: Path) -> tuple[int, mmap.mmap]:
    """Create (or join) the node's slot file and map it; zero-filled when new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    if os.fstat(fd).st_size < FILE_SIZE:
        os.ftruncate(fd, FILE_SIZE)  # growing fills with zeros: unused slots, no writer yet
    return fd, mmap.mmap(fd, FILE_SIZE)
