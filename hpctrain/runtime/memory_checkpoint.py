"""Checkpoints in node memory, each rank's copy also held on another node: a restart loses seconds of steps.

Every ``train.memory_checkpoint_every`` steps (unset: as often as keeps training's wait for them
under 1% of its time and the background work of each under a tenth of the time to the next, measured
at the first saves) each rank copies its model, optimizer, loop and RNG
state to host memory (the only part that blocks training), then, in a background thread, writes it
to its node's memory folder and sends it to a rank on the next node, which writes it into *its*
node's folder (as NVIDIA's resiliency extension replicates its local checkpoints). The folder is
``$HPCTRAIN_MEMORY_DIR`` (default ``/dev/shm``, a RAM file system) ``/hpctrain-memory-UID/RUN/NODE/``
``step-N/copy-R.pt``: files, not a process, so the state outlives the rank that wrote it (a crash,
kill -9, the OOM killer); the user's folder is 0700 and its files 0600, and a folder there that is not
the user's own, or is open to others, turns memory checkpoints off. Each node keeps the two newest
steps; the run's folder is removed when training completes. A run that never completes (it failed,
was cancelled, or its requeue never came) leaves its copies until a later run of the same user on
that node starts: it removes the user's run folders that no save touched for ``STALE_AFTER_S``
(memory only shortens a restart, so a copy that old is worth less than the RAM it holds). A copy the
folder cannot take (it is full) is dropped with one warning a run, leaving no partial file: training
goes on, and the exchange with the peer node still runs (the peer waits for it).

On a restart every rank lists the copies its node holds, and all agree (from the same gathered
lists) on the newest step that is newer than the newest disk checkpoint and complete: a copy of
every rank of the same world and layout, or, for a replicated layout (one process, DDP), any copy.
A rank reads its copy from its own node's memory when it is there; otherwise the rank whose node
holds it sends it (a node lost with its memory: its ranks' copies come from the peer node). State
with DTensors (FSDP, TP) is not kept in memory: those restarts load from disk.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import os
import shutil
import stat
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from hpctrain.rundir.names import CHECKPOINT, MEMORY_COPY, MEMORY_ROOT

log = logging.getLogger(__name__)

AUTO_SHARE = 0.01  # unset memory_checkpoint_every: training waits at most this share of its time
# ... and the background thread (encode, write, send to the peer) is busy at most this share of it:
# on a node with few cores it competes with the training step for the CPU.
AUTO_BACKGROUND_SHARE = 0.1
AUTO_LONGEST = 1000  # steps between memory checkpoints at the most when the interval is automatic
AUTO_MEASURED = 3  # saves timed before the automatic interval is fixed: the first step is slow
EVENT_EVERY_S = 60.0  # a memory_checkpoint event at most this often (besides the measured saves)
KEEP_STEPS = 2  # per node: the newest complete step survives a crash in the middle of the next save
HEADER = struct.Struct("<I")  # the length of the JSON that says what a copy holds, before its payload
SIZE_TAG, PAYLOAD_TAG = 71, 72  # point-to-point tags of the exchanges (apart from any other traffic)

STALE_AFTER_S = 6 * 3600.0  # a run folder no save touched for this long goes


@dataclass(frozen=True)
class Copy:
    """One rank's state at one step, held in the memory of node ``holder_host``."""

    step: int
    rank: int
    world: int
    layout: str
    host: str  # where the rank that saved it ran
    holder_host: str


@dataclass(frozen=True)
class Plan:
    """Where each rank of this attempt gets the state of `step`: ``origin[r]`` is the saved rank whose
    copy rank r loads, ``holder[r]`` the rank that reads it from its node's memory (r itself when its
    own node holds it), ``peer[r]`` whether it is a copy held for another node."""

    step: int
    origin: tuple[int, ...]
    holder: tuple[int, ...]
    peer: tuple[bool, ...]


def peer_of(hosts: list[str], rank: int) -> int | None:
    """The rank on the next node (in order of first appearance) that holds `rank`'s copy; None with
    a single node. Ranks pair by their index on their node, so one node's copies spread over the next."""
    nodes = list(dict.fromkeys(hosts))
    if len(nodes) < 2:
        return None
    mine = [r for r, host in enumerate(hosts) if host == hosts[rank]]
    there = [r for r, host in enumerate(hosts) if host == nodes[(nodes.index(hosts[rank]) + 1) % len(nodes)]]
    return there[mine.index(rank) % len(there)]


def choose(
    copies: list[Copy], hosts: list[str], layout: str, replicated: bool, newer_than: int | None
) -> Plan | None:
    """The newest step after `newer_than` (the newest disk checkpoint) that the live nodes (`hosts`,
    one per rank of this attempt) hold completely, and how each rank gets it; None: load from disk."""
    live = set(hosts)
    first_rank = {host: hosts.index(host) for host in live}
    for step in sorted({c.step for c in copies}, reverse=True):
        if newer_than is not None and step <= newer_than:
            return None
        at = [c for c in copies if c.step == step and c.holder_host in live]
        if not at or len({(c.world, c.layout) for c in at}) != 1 or at[0].layout != layout:
            continue
        holders: dict[int, list[Copy]] = {}
        for item in at:
            holders.setdefault(item.rank, []).append(item)
        if at[0].world == len(hosts) and len(holders) == len(hosts):
            origin = list(range(len(hosts)))
        elif replicated:  # every rank's state is the same: any copy serves
            origin = replicas_for(hosts, holders, same_world=at[0].world == len(hosts))
        else:
            continue
        holder, peer = [], []
        for r, o in enumerate(origin):
            here = [c for c in holders[o] if c.holder_host == hosts[r]]
            item = here[0] if here else holders[o][0]
            holder.append(r if here else first_rank[item.holder_host])
            peer.append(item.holder_host != item.host)
        return Plan(step, tuple(origin), tuple(holder), tuple(peer))
    return None


def replicas_for(hosts: list[str], holders: dict[int, list[Copy]], same_world: bool) -> list[int]:
    """For each rank, the saved rank whose copy it loads when any copy serves: its own (same world:
    it keeps its RNG streams), else one its node saved itself, else one its node holds for another,
    else any. Each node's choices are listed once, not once per rank."""
    local: dict[str, list[int]] = {}
    saved_here: dict[str, list[int]] = {}
    for origin in sorted(holders):
        for node in {c.holder_host for c in holders[origin]}:
            local.setdefault(node, []).append(origin)
        for node in {c.holder_host for c in holders[origin] if c.holder_host == c.host}:
            saved_here.setdefault(node, []).append(origin)
    anywhere = [min(holders)]

    def replica(rank: int) -> int:
        node = hosts[rank]
        if same_world and any(c.holder_host == node for c in holders.get(rank, [])):
            return rank
        return (saved_here.get(node) or local.get(node) or anywhere)[0]

    return [replica(rank) for rank in range(len(hosts))]


def run_memory_folder(run_dir: Path) -> Path:
    """Where the run's copies live, one folder per node inside (nothing is created)."""
    root = Path(os.environ.get("HPCTRAIN_MEMORY_DIR", "/dev/shm")) / MEMORY_ROOT.name(os.getuid())
    key = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:8]
    return root / f"{run_dir.name}-{key}"


def newest_change(folder: Path) -> float:
    """The newest modification time of a run folder and its node folders."""
    times = [folder.stat().st_mtime]
    times += [node.stat().st_mtime for node in folder.iterdir() if node.is_dir()]
    return max(times)


def remove_stale(user_folder: Path, keep: Path, now: float | None = None) -> list[Path]:
    """Remove the run folders of `user_folder` (other than `keep`) untouched for STALE_AFTER_S."""
    cutoff = (time.time() if now is None else now) - STALE_AFTER_S
    removed = []
    for run_folder in user_folder.iterdir():
        try:
            stale = run_folder != keep and run_folder.is_dir() and newest_change(run_folder) < cutoff
        except OSError:  # another node's rank removed it meanwhile
            continue
        if stale:
            shutil.rmtree(run_folder, ignore_errors=True)
            removed.append(run_folder)
    if removed:
        log.info("removed %d stale memory checkpoint folders of earlier runs", len(removed))
    return removed


def auto_interval(blocked_s: float, step_s: float, stored_s: float = 0.0) -> int:
    """Steps between memory checkpoints so that copying the state (`blocked_s`) costs at most
    AUTO_SHARE of training time (`step_s` a step), and storing it in the background (`stored_s`)
    at most AUTO_BACKGROUND_SHARE."""
    if step_s <= 0:
        return 1
    steps = max(blocked_s / AUTO_SHARE, stored_s / AUTO_BACKGROUND_SHARE) / step_s
    return max(1, min(AUTO_LONGEST, math.ceil(steps)))


def to_host(value: Any) -> Any:
    """A copy of `value` with every tensor copied to CPU memory (the optimizer then updates freely)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: to_host(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_host(v) for v in value)
    return value


def encode(about: Copy, state: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    head = json.dumps(about.__dict__).encode()
    return HEADER.pack(len(head)) + head + buffer.getvalue()


def read_about(path: Path, holder_host: str) -> Copy | None:
    """What a copy holds, from its header alone; None for anything unreadable."""
    try:
        with open(path, "rb") as handle:
            (length,) = HEADER.unpack(handle.read(HEADER.size))
            fields = json.loads(handle.read(length))
        return Copy(**{**fields, "holder_host": holder_host})
    except (OSError, ValueError, TypeError, struct.error):
        return None


def decode(blob: bytes) -> dict[str, Any]:
    (length,) = HEADER.unpack_from(blob)
    state: dict[str, Any] = torch.load(io.BytesIO(blob[HEADER.size + length :]), weights_only=False)
    return state


def private_folder(path: Path) -> bool:
    """Create `path` (0700) if missing; True when it is a real folder of this user's, closed to others."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def write_private(path: Path, data: bytes) -> None:
    """`path` whole (a temporary name, then rename), mode 0600; a write that fails (the memory folder
    is full) leaves nothing behind."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def exchange(sends: dict[int, bytes], receives: list[int], group: Any) -> dict[int, bytes]:
    """Point-to-point: `sends` {rank: bytes} out, one blob in from each of `receives`."""
    sizes = {src: torch.zeros(1, dtype=torch.int64) for src in receives}
    handles = [dist.isend(torch.tensor([len(b)]), dst, group=group, tag=SIZE_TAG) for dst, b in sends.items()]
    handles += [dist.irecv(size, src, group=group, tag=SIZE_TAG) for src, size in sizes.items()]
    for handle in handles:
        handle.wait()
    inbox = {src: torch.empty(int(size.item()), dtype=torch.uint8) for src, size in sizes.items()}
    out = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in sends.values()]
    handles = [dist.isend(t, dst, group=group, tag=PAYLOAD_TAG) for dst, t in zip(sends, out, strict=True)]
    handles += [dist.irecv(buffer, src, group=group, tag=PAYLOAD_TAG) for src, buffer in inbox.items()]
    for handle in handles:
        handle.wait()
    return {src: buffer.numpy().tobytes() for src, buffer in inbox.items()}


class MemoryCheckpoints:
    """One rank's side of the memory checkpoints of a run (see the module's docstring)."""

    def __init__(
        self,
        run_dir: Path,
        rank: int,
        host: str,
        layout: str,
        replicated: bool,
        every: int | None,
        event: Callable[..., None],
    ) -> None:
        """`every`: steps between saves; 0: none; None: automatic (:func:`auto_interval`)."""
        self.rank = rank
        self.host = host
        self.layout = layout
        self.replicated = replicated
        self.every = 1 if every is None else every
        self.auto = every is None
        self.measured = 0
        self.last = 0  # the step of the last save, or the step training resumed from
        self.event = event
        self.hosts: list[str] = []
        self.world = 0
        self.saving: threading.Thread | None = None
        self.stored: dict[str, Any] | None = None
        self.stored_s = 0.0  # the last background store's seconds (encode, write, exchange)
        self.reported = -math.inf  # when the last memory_checkpoint event was logged (monotonic)
        self.write_failed = False  # warned once: a full memory folder fails every save alike
        self.run_folder = self._run_folder(run_dir) if self.every else None
        self.folder = self.run_folder / host if self.run_folder is not None else None
        if self.folder is not None:
            self.folder.mkdir(mode=0o700, exist_ok=True)

    @staticmethod
    def _run_folder(run_dir: Path) -> Path | None:
        folder = run_memory_folder(run_dir)
        if not folder.parent.parent.is_dir() or not private_folder(folder.parent):
            log.warning("memory checkpoints off: %s is missing, not yours or open to others", folder.parent)
            return None
        folder.mkdir(mode=0o700, exist_ok=True)
        remove_stale(folder.parent, keep=folder)
        return folder

    @property
    def on(self) -> bool:
        return self.folder is not None

    def due(self, step: int) -> bool:
        return self.on and step - self.last >= self.every

    # -- saving ---------------------------------------------------------------------------------

    def save(self, step: int, state: dict[str, Any], group: Any, step_s: float) -> float:
        """Copy `state` to host memory (returns the seconds that took: what training waits), then
        write it and send it to the peer node in the background. Collective over `group`. With an
        automatic interval, the first saves also agree on it (`step_s`: the recent step time)."""
        self.wait()
        started = time.perf_counter()
        snapshot = to_host(state)
        blocked = time.perf_counter() - started
        self.last = step
        if self.auto and self.measured < AUTO_MEASURED:
            # The first save's store is timed at the second (this one waited for it above).
            self.measured += 1
            slowest = torch.tensor([blocked, step_s, self.stored_s], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)  # every rank the same interval
            self.every = auto_interval(*slowest.tolist())
        about = Copy(step, self.rank, self.world, self.layout, self.host, self.host)
        args = (about, snapshot, group, started, blocked)
        self.saving = threading.Thread(target=self._store, args=args, daemon=True)
        self.saving.start()
        return blocked

    def _store(
        self, about: Copy, snapshot: dict[str, Any], group: Any, started: float, blocked: float
    ) -> None:
        assert self.folder is not None
        folder = self.folder / CHECKPOINT.name(about.step)
        try:
            blob = encode(about, snapshot)
            peer = peer_of(self.hosts, self.rank)
            senders = [r for r in range(self.world) if peer_of(self.hosts, r) == self.rank]
            # The exchange goes ahead whatever this node's writes do: the peer waits for this copy.
            written = self._write(folder, {self.rank: blob})
            held = exchange({peer: blob} if peer is not None else {}, senders, group)
            written &= self._write(folder, held)
        except Exception as error:  # a peer gone mid-exchange: training's own collectives report it
            log.warning("memory checkpoint of step %d not replicated: %s", about.step, error)
            return
        self.stored_s = time.perf_counter() - started - blocked
        if not written:
            return
        self._prune(about.step)
        self.stored = {
            "step": about.step,
            "bytes": len(blob),
            "blocked_s": round(blocked, 4),
            "stored_s": round(time.perf_counter() - started, 4),
            "replicated": peer is not None,
        }

    def _write(self, folder: Path, copies: dict[int, bytes]) -> bool:
        """Write each rank's copy into the step's folder; False (and one warning a run) when the memory
        folder cannot take them: training goes on, and restarts load the newest copy that was
        written whole, or the disk checkpoint."""
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            for origin, blob in copies.items():
                write_private(folder / MEMORY_COPY.name(origin), blob)
        except OSError as error:
            if not self.write_failed:
                log.warning(
                    "memory checkpoints not stored (%s); training goes on, restarts load from disk "
                    "(further failures are not reported)",
                    error,
                )
            self.write_failed = True
            return False
        return True

    def wait(self) -> None:
        """Until the save in the background is stored; its event then (from this thread: the
        metrics sinks are not thread-safe): for the measured saves, then at most every
        EVENT_EVERY_S (a save every few steps would fill the metrics file)."""
        if self.saving is not None:
            self.saving.join()
            self.saving = None
        now = time.monotonic()
        due = self.measured < AUTO_MEASURED or now - self.reported >= EVENT_EVERY_S
        if self.stored is not None and due:
            self.event("memory_checkpoint", every=self.every, **self.stored)
            self.reported = now
        self.stored = None

    def _steps(self) -> list[tuple[int, Path]]:
        if self.folder is None:
            return []
        try:
            children = list(self.folder.iterdir())
        except OSError:
            return []
        steps = [(CHECKPOINT.number(p.name), p) for p in children]
        return sorted(((s, p) for s, p in steps if s is not None), reverse=True)

    def _prune(self, current: int) -> None:
        for step, path in self._steps()[KEEP_STEPS:]:
            if step < current:
                shutil.rmtree(path, ignore_errors=True)

    # -- restoring ------------------------------------------------------------------------------

    def inventory(self) -> list[Copy]:
        """The copies this node's memory holds."""
        found = []
        for _, folder in self._steps():
            for path in folder.glob(MEMORY_COPY.name("*")):
                about = read_about(path, self.host)
                if about is not None:
                    found.append(about)
        return found

    def plan(self, newer_than: int | None, world: int, group: Any) -> Plan | None:
        """Collective: learn every rank's host (the peers of later saves) and agree on what to load."""
        self.world = world
        gathered: list[Any] = [None] * world
        mine = (self.host, self.on, self.inventory() if self.on else [])
        dist.all_gather_object(gathered, mine, group=group)
        self.hosts = [host for host, _, _ in gathered]
        if not all(on for _, on, _ in gathered):  # saves are collective: all ranks keep copies, or none
            self.every, self.folder = 0, None
            return None
        copies = [c for _, _, listed in gathered for c in listed]
        return choose(copies, self.hosts, self.layout, self.replicated, newer_than)

    def fetch(self, plan: Plan, group: Any) -> dict[str, Any]:
        """Collective: this rank's state of ``plan.step``, read here or sent by the rank holding it."""
        assert self.folder is not None
        folder = self.folder / CHECKPOINT.name(plan.step)
        sends = {
            r: (folder / MEMORY_COPY.name(plan.origin[r])).read_bytes()
            for r in range(len(plan.holder))
            if plan.holder[r] == self.rank and r != self.rank
        }
        mine = plan.holder[self.rank]
        received = exchange(sends, [mine] if mine != self.rank else [], group)
        blob = (
            received[mine]
            if mine != self.rank
            else (folder / MEMORY_COPY.name(plan.origin[self.rank])).read_bytes()
        )
        return decode(blob)

    def drop_newer(self, step: int) -> None:
        """Copies after the step training goes on from belong to a timeline that is over."""
        self.last = step
        for newer, path in self._steps():
            if newer > step:
                shutil.rmtree(path, ignore_errors=True)

    def forget(self) -> None:
        """Training completed: this node's copies go (the run's folder with the last node's)."""
        self.wait()
        if self.folder is not None and self.run_folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            try:
                self.run_folder.rmdir()
            except OSError:
                pass
