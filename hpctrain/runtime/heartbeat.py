"""Rank heartbeats: each rank's step and phase in a node-local slot, one writer per node (torch-free).

The training loop calls :func:`mark` at every phase change. That is one ``time.time()`` (vDSO, no
syscall) and one copy of packed bytes into a shared memory map: no file write, no fsync, no GPU
sync. A background thread per rank ticks the slot's ``alive`` time 4 times a second: a STOPped or
frozen process stops ticking, a rank blocked in a collective (which releases the GIL) does not.

The one process per node that holds the node's writer lease copies all slots into
``heartbeats/node-<node>.json`` of the run directory every ``watchdog.heartbeat_interval``. The
lease is a (pid, time) pair in the file's header, refreshed every tick and taken over under a
``flock`` once it is older than :data:`LEASE_S`. A plain long-held flock would not do: a STOPped
writer keeps its lock, and its whole node would look dead when only one rank is.

The slot file's paths and layout are the contract in ``hpctrain/rundir/slots.py``; the watchdog
(``hpctrain.supervisor``) reads the same slots to collect stacks.
"""

from __future__ import annotations

import faulthandler
import fcntl
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from hpctrain.rundir import Heartbeat, RunDir
from hpctrain.rundir.slots import (
    ALIVE,
    ALIVE_AT,
    HEADER,
    HEADER_SIZE,
    IDENT,
    LEASE_S,
    MAGIC,
    MAX_SLOTS,
    PHASE_CODE,
    PROGRESS,
    PROGRESS_AT,
    SLOT_SIZE,
    TICK_S,
    VERSION,
    current_attempt,
    decode_slots,
    open_slot_file,
    put,
    remove_node_files,
    silent_ranks,
    slot_path,
    stack_file,
    stack_signal,
)

if TYPE_CHECKING:
    from hpctrain.runtime.bootstrap import DistInfo
    from hpctrain.spec import Resolved

log = logging.getLogger(__name__)


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
    stopped_after: float | None = None
    """watchdog.stopped_timeout: a rank of the node without a tick this long has the node's file
    written at once, not at the next interval (None: at the interval only)."""


class RankHeartbeat:
    """This rank's slot, its alive ticker and (while it holds the lease) its node's writer."""

    def __init__(self, where: Where, shown_pid: int | None = None) -> None:
        """`shown_pid`: the process the slot names for stacks, when not this one (a command's child)."""
        self.where = where
        self.path = slot_path(where.run_dir, where.job_id, where.attempt, where.node)
        self._fd, self._map = open_slot_file(self.path)
        self._offset = HEADER_SIZE + where.local_rank * SLOT_SIZE
        self._pid = os.getpid()
        self._step = -1
        self._step_since = time.time()
        self._step_s = -1.0
        self._last_write = 0.0
        self._silent: set[int] = set()  # ranks of the node last seen without a tick for stopped_after
        self._stop = threading.Event()
        self._stack_output: IO[str] | None = None
        # The slot's identity goes in last: a reader (the node's writer, the watchdog) that sees
        # it sees a rank in start-up that ticked just now, never a rank at step 0 that last ticked
        # at time 0 (the watchdog named such a starting rank hung, silent since 1970).
        self.mark("startup")
        put(self._map, self._offset + ALIVE_AT, ALIVE, time.time())
        put(self._map, self._offset, IDENT, MAGIC, where.rank, shown_pid or self._pid)
        self.tick(time.time())

    def mark(self, phase: str, step: int | None = None) -> None:
        """Enter `phase` (at `step`, when given): a memory write, cheap enough for every phase."""
        now = time.time()
        if step is not None and step != self._step:
            if self._step >= 0:
                self._step_s = now - self._step_since
            self._step, self._step_since = step, now
        put(
            self._map,
            self._offset + PROGRESS_AT,
            PROGRESS,
            PHASE_CODE[phase],
            self._step,
            now,
            self._step_since,
            self._step_s,
        )

    def stepped_by_another(self) -> bool:
        """Whether another process wrote a step into this slot since this object last did: the command
        wrapper's child reporting through hpctrain.client, whose steps are then the real ones."""
        return PROGRESS.unpack_from(self._map, self._offset + PROGRESS_AT)[1] != self._step

    def tick(self, now: float, alive: bool = True) -> None:
        """Mark the rank alive now (unless `alive` is false: a command's stopped child), and write the
        node's file when this process holds the lease and its interval has passed."""
        if alive:
            put(self._map, self._offset + ALIVE_AT, ALIVE, now)
        magic, _version, writer, lease = HEADER.unpack_from(self._map, 0)
        if writer != self._pid and magic == MAGIC and now - lease < LEASE_S:
            return
        if writer != self._pid and not self._take_lease(now):
            return
        put(self._map, 0, HEADER, MAGIC, VERSION, self._pid, now)
        if now - self._last_write >= self.where.interval or self._newly_silent(now):
            self._last_write = now
            self.write_node_file(now)

    def _newly_silent(self, now: float) -> bool:
        """Has a rank of the node just gone `stopped_after` without a tick? Its file is then written
        at once: the watchdog would otherwise learn of a stopped rank up to an interval later."""
        if self.where.stopped_after is None:
            return False
        silent = silent_ranks(self._map, now, self.where.stopped_after)
        new = bool(silent - self._silent)
        self._silent = silent
        return new

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
            put(self._map, 0, HEADER, MAGIC, VERSION, self._pid, now)
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

    def leave(self) -> None:
        """Free this rank's slot and write the node's file without it, lease or not: a rank that
        finished before the others (a parameter-server worker) then no longer looks silent there."""
        put(self._map, self._offset, IDENT, bytes(4), -1, 0)
        self.write_node_file(time.time())

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
    _current.leave()
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
    stopped_after: float | None = None,
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
        stopped_after=stopped_after,
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
    # A hetjob numbers its tasks per component (SLURM_LOCALID): a server and a worker sharing a
    # node would share a slot, so the workers' slots come after every server's.
    ps = resolved.parallel.ps
    slot = info.local_rank + (ps.servers if ps is not None and info.rank >= ps.servers else 0)
    return start(
        run_dir,
        info.rank,
        slot,
        info.hostname,
        info.job_id,
        resolved.job.watchdog.heartbeat_interval,
        resolved.preemption.signal,
        resolved.job.watchdog.stopped_timeout,
    )
