"""Rank heartbeats: each rank's step and phase in a node-local slot, one writer per node (torch-free).

The training loop calls :func:`mark` at every phase change. That is one ``time.time()`` (vDSO, no
syscall) and one ``struct.pack_into`` into a shared memory map: no file write, no fsync, no GPU
sync. A background thread per rank ticks the slot's ``alive`` time every second: a STOPped or
frozen process stops ticking, a rank blocked in a collective (which releases the GIL) does not.

The one process per node that holds the node's writer lease copies all slots into
``heartbeats/node-<node>.json`` of the run directory every ``watchdog.heartbeat_interval``. The
lease is a (pid, time) pair in the file's header, refreshed every tick and taken over under a
``flock`` once it is older than :data:`LEASE_S`. A plain long-held flock would not do: a STOPped
writer keeps its lock, and its whole node would look dead when only one rank is.

Slot file layout (little-endian), one file per (job, attempt, node) under /dev/shm:
``HEADER`` (64 bytes: magic, version, writer pid, lease time), then :data:`MAX_SLOTS` slots of
:data:`SLOT_SIZE` bytes, the slot of local rank ``i`` at ``HEADER_SIZE + i * SLOT_SIZE``:
``IDENT`` (magic, rank, pid) at 0, ``PROGRESS`` (phase code, step, phase_since, step_since,
step_s) at 16, ``ALIVE`` (time) at 56. The loop writes only PROGRESS, the ticker only ALIVE, so
the two threads never write the same bytes.
"""

from __future__ import annotations

import faulthandler
import fcntl
import glob
import hashlib
import logging
import math
import mmap
import os
import signal
import struct
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from hpctrain.rundir import Heartbeat, RankBeat, RunDir

if TYPE_CHECKING:
    from hpctrain.runtime.bootstrap import DistInfo
    from hpctrain.spec import Resolved

log = logging.getLogger(__name__)

PHASES = ("startup", "data", "forward", "backward", "optimizer", "collective", "checkpoint", "eval")
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

TICK_S = 1.0
LEASE_S = 3.0
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
    from hpctrain.spec.slurm_values import signal_name

    try:
        preemption = "SIG" + signal_name(preemption_signal.upper())
    except ValueError:  # validated in the spec already; a number is not USR2 either
        preemption = ""
    return signal.SIGUSR1 if preemption == "SIGUSR2" else signal.SIGUSR2


# ----------------------------------------------------------------------------------------------
# The slot format
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """One rank's slot as read back: the rank, its process, and its entry of the node's file."""

    rank: int
    pid: int
    beat: RankBeat


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def decode_slot(buffer: bytes | mmap.mmap, index: int) -> Slot | None:
    """Slot `index` of a slot file's bytes; None when unused, out of range or not a slot (total)."""
    start = HEADER_SIZE + index * SLOT_SIZE
    if index < 0 or start + SLOT_SIZE > len(buffer):
        return None
    magic, rank, pid = IDENT.unpack_from(buffer, start)
    if magic != MAGIC or rank < 0:
        return None
    code, step, phase_since, step_since, step_s = PROGRESS.unpack_from(buffer, start + PROGRESS_AT)
    (alive,) = ALIVE.unpack_from(buffer, start + ALIVE_AT)
    step_s = _finite(step_s)
    beat = RankBeat(
        step=step,
        phase=PHASES[code] if 0 <= code < len(PHASES) else UNKNOWN_PHASE,
        time=_finite(alive),
        phase_since=_finite(phase_since),
        step_since=_finite(step_since),
        step_s=step_s if step_s >= 0 else None,
        pid=pid,
    )
    return Slot(rank, pid, beat)


def decode_slots(buffer: bytes | mmap.mmap) -> list[Slot]:
    count = max(0, min(MAX_SLOTS, (len(buffer) - HEADER_SIZE) // SLOT_SIZE))
    return [slot for i in range(count) if (slot := decode_slot(buffer, i)) is not None]


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


# ----------------------------------------------------------------------------------------------
# The rank side
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Where:
    """Which node file and slot a rank reports into, and how often the node's file is written."""

    run_dir: Path
    job_id: str
    attempt: int
    node: str
    rank: int
    local_rank: int
    step_id: str
    interval: float


class RankHeartbeat:
    """This rank's slot, its alive ticker and (while it holds the lease) its node's writer."""

    def __init__(self, where: Where) -> None:
        self.where = where
        self.path = slot_path(where.run_dir, where.job_id, where.attempt, where.node)
        self._fd, self._map = open_slot_file(self.path)
        self._offset = HEADER_SIZE + where.local_rank * SLOT_SIZE
        self._pid = os.getpid()
        self._step = -1
        self._step_since = time.time()
        self._step_s = -1.0
        self._last_write = 0.0
        self._stop = threading.Event()
        self._stack_output: IO[str] | None = None
        IDENT.pack_into(self._map, self._offset, MAGIC, where.rank, self._pid)
        self.mark("startup")
        self.tick(time.time())

    def mark(self, phase: str, step: int | None = None) -> None:
        """Enter `phase` (at `step`, when given): a memory write, cheap enough for every phase."""
        now = time.time()
        if step is not None and step != self._step:
            if self._step >= 0:
                self._step_s = now - self._step_since
            self._step, self._step_since = step, now
        PROGRESS.pack_into(
            self._map,
            self._offset + PROGRESS_AT,
            PHASE_CODE[phase],
            self._step,
            now,
            self._step_since,
            self._step_s,
        )

    def tick(self, now: float) -> None:
        ALIVE.pack_into(self._map, self._offset + ALIVE_AT, now)
        magic, _version, writer, lease = HEADER.unpack_from(self._map, 0)
        if writer != self._pid and magic == MAGIC and now - lease < LEASE_S:
            return
        if writer != self._pid and not self._take_lease(now):
            return
        HEADER.pack_into(self._map, 0, MAGIC, VERSION, self._pid, now)
        if now - self._last_write >= self.where.interval:
            self._last_write = now
            self.write_node_file(now)

    def _take_lease(self, now: float) -> bool:
        """Become the node's writer if the lease is still stale once we hold the lock."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        try:
            magic, _version, writer, lease = HEADER.unpack_from(self._map, 0)
            if magic == MAGIC and writer != self._pid and now - lease < LEASE_S:
                return False
            HEADER.pack_into(self._map, 0, MAGIC, VERSION, self._pid, now)
            return True
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def write_node_file(self, now: float) -> None:
        where = self.where
        beat = Heartbeat(
            node=where.node,
            time=now,
            attempt=where.attempt,
            step_id=where.step_id or None,
            interval=where.interval,
            ranks={slot.rank: slot.beat for slot in decode_slots(self._map)},
        )
        try:
            RunDir(where.run_dir).write_heartbeat(beat)
        except OSError as error:  # a full or flaky shared filesystem must not end training
            log.warning("heartbeat of node %s not written: %s", where.node, error)

    def run_ticker(self) -> None:
        while not self._stop.wait(TICK_S):
            self.tick(time.time())

    def start(self) -> None:
        threading.Thread(target=self.run_ticker, name="hpctrain-heartbeat", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def dump_stacks_on(self, signum: signal.Signals) -> None:
        """On `signum`, faulthandler writes every thread's Python stack into a node-local file
        (from C, so it works while the main thread is blocked in a collective)."""
        self._stack_output = stack_file(self.path, self.where.rank).open("w")
        faulthandler.register(signum, file=self._stack_output, all_threads=True, chain=False)


_current: RankHeartbeat | None = None


def finish() -> None:
    """After training ended on every rank: stop ticking and remove this node's files (each rank
    tries; the ranks still running keep their memory map, which outlives the name)."""
    global _current
    if _current is None:
        return
    _current.stop()
    where = _current.where
    remove_node_files(where.run_dir, where.job_id, where.attempt, where.node)
    _current = None


def mark(phase: str, step: int | None = None) -> None:
    """Record that this rank entered `phase` (a no-op when heartbeats are off)."""
    if _current is not None:
        _current.mark(phase, step)


def start(
    run_dir: Path,
    rank: int,
    local_rank: int,
    node: str,
    job_id: str,
    interval: float,
    preemption_signal: str,
) -> RankHeartbeat | None:
    """Start this rank's heartbeat (and its stack dump on request); None when it cannot have a slot."""
    global _current
    if not 0 <= local_rank < MAX_SLOTS:
        log.warning("no heartbeat for local rank %d: a node file has %d slots", local_rank, MAX_SLOTS)
        return None
    where = Where(
        run_dir=run_dir,
        job_id=job_id,
        attempt=current_attempt(),
        node=node,
        rank=rank,
        local_rank=local_rank,
        step_id=os.environ.get("SLURM_STEP_ID", ""),
        interval=interval,
    )
    try:
        beat = RankHeartbeat(where)
        beat.dump_stacks_on(stack_signal(preemption_signal))
    except OSError as error:
        log.warning("no heartbeat (slot file %s): %s", slot_path(run_dir, job_id, where.attempt, node), error)
        return None
    beat.start()
    _current = beat
    return beat


def start_rank(run_dir: Path, info: DistInfo, resolved: Resolved) -> RankHeartbeat | None:
    """This rank's heartbeat when the job's watchdog is on."""
    if not resolved.job.watchdog.enabled:
        return None
    return start(
        run_dir,
        info.rank,
        info.local_rank,
        info.hostname,
        info.job_id,
        resolved.job.watchdog.heartbeat_interval,
        resolved.preemption.signal,
    )
