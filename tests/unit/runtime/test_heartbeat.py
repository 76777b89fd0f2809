"""Rank heartbeats: the slot format (hypothesis), the node writer and its lease, phase marks."""

from __future__ import annotations

import dataclasses
import mmap
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain.rundir import Heartbeat, RunDir, slots
from hpctrain.rundir.slots import (
    ALIVE,
    ALIVE_AT,
    FILE_SIZE,
    HEADER,
    HEADER_SIZE,
    IDENT,
    LEASE_S,
    MAGIC,
    PHASE_CODE,
    PHASES,
    PROGRESS,
    PROGRESS_AT,
    SLOT_SIZE,
    decode_slot,
    decode_slots,
)
from hpctrain.runtime import heartbeat
from hpctrain.runtime.heartbeat import RankHeartbeat, Where

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def slot_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "shm"
    monkeypatch.setenv("HPCTRAIN_HEARTBEAT_DIR", str(folder))
    return folder


def where(run_dir: Path, rank: int, local_rank: int, interval: float = 1.0) -> Where:
    return Where(
        run_dir=run_dir,
        job_id="77",
        attempt=2,
        node="nodeA",
        rank=rank,
        local_rank=local_rank,
        step_id="0",
        interval=interval,
    )


FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)


@given(
    rank=st.integers(0, 2**31 - 1),
    pid=st.integers(-(2**31), 2**31 - 1),
    code=st.integers(-(2**31), 2**31 - 1),
    step=st.integers(-(2**63), 2**63 - 1),
    times=st.tuples(FLOATS, FLOATS, FLOATS, FLOATS),
    index=st.integers(0, 3),
)
def test_any_slot_content_decodes_to_its_fields(
    rank: int, pid: int, code: int, step: int, times: tuple[float, float, float, float], index: int
) -> None:
    buffer = bytearray(HEADER_SIZE + 4 * SLOT_SIZE)
    start = HEADER_SIZE + index * SLOT_SIZE
    phase_since, step_since, step_s, alive = times
    IDENT.pack_into(buffer, start, MAGIC, rank, pid)
    PROGRESS.pack_into(buffer, start + PROGRESS_AT, code, step, phase_since, step_since, step_s)
    ALIVE.pack_into(buffer, start + ALIVE_AT, alive)
    slot = decode_slot(bytes(buffer), index)
    if not (alive == alive and 0 < alive < float("inf")):
        assert slot is None  # identity without a tick: a slot its rank is still claiming
        return
    assert slot is not None
    assert (slot.rank, slot.pid, slot.beat.step, slot.beat.time) == (rank, pid, step, alive)
    assert slot.beat.phase == (PHASES[code] if 0 <= code < len(PHASES) else "unknown")
    for value in (slot.beat.phase_since, slot.beat.step_since, slot.beat.time):
        assert value == value and abs(value) != float("inf")  # non-finite reads as 0
    assert slot.beat.step_s is None or slot.beat.step_s >= 0
    assert [s.rank for s in decode_slots(bytes(buffer))] == [rank]


@given(st.binary(max_size=FILE_SIZE + 100))
def test_any_bytes_decode_without_error(data: bytes) -> None:
    for slot in decode_slots(data):
        assert slot.rank >= 0


def test_slot_layout_fits_and_does_not_overlap() -> None:
    assert IDENT.size <= PROGRESS_AT
    assert PROGRESS_AT + PROGRESS.size <= ALIVE_AT
    assert ALIVE_AT + ALIVE.size <= SLOT_SIZE
    assert HEADER.size <= HEADER_SIZE
    assert decode_slot(bytes(FILE_SIZE), 0) is None  # zero-filled: unused
    assert decode_slot(bytes(FILE_SIZE), -1) is None
    assert decode_slot(bytes(FILE_SIZE), 10**6) is None


def test_a_slot_being_claimed_never_reads_as_a_rank_silent_since_time_0(
    slot_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader between any two writes of a starting rank sees its slot unused, or the rank in
    start-up having just ticked (the identity first, then the rest: the watchdog read step 0,
    last tick at time 0, and ended a starting job as hung)."""
    seen: list[list[tuple[int, int, str, float]]] = []
    real_put = heartbeat.put

    def put_then_read(buffer: mmap.mmap, offset: int, layout: object, *values: object) -> None:
        real_put(buffer, offset, layout, *values)  # type: ignore[arg-type]
        seen.append([(s.rank, s.beat.step, s.beat.phase, s.beat.time) for s in decode_slots(buffer)])

    monkeypatch.setattr(heartbeat, "put", put_then_read)
    before = time.time()
    RankHeartbeat(where(tmp_path, rank=3, local_rank=1))
    assert len(seen) >= 3 and seen[-1], seen
    for reading in seen:
        assert all(
            (rank, step, phase) == (3, -1, "startup") and t >= before for rank, step, phase, t in reading
        ), seen


def test_marks_steps_and_durations(slot_dir: Path, tmp_path: Path) -> None:
    beat = RankHeartbeat(where(tmp_path, rank=5, local_rank=1))
    (slot,) = slots.read_slot_file(beat.path)
    assert (slot.rank, slot.beat.phase, slot.beat.step, slot.beat.step_s, slot.pid) == (
        5,
        "startup",
        -1,
        None,
        os.getpid(),
    )
    beat.mark("data", 10)
    beat.mark("forward")
    (slot,) = slots.read_slot_file(beat.path)
    assert (slot.beat.phase, slot.beat.step, slot.beat.step_s) == (
        "forward",
        10,
        None,
    )  # the first step has not ended
    since = slot.beat.step_since
    beat.mark("data", 11)
    (slot,) = slots.read_slot_file(beat.path)
    assert (
        slot.beat.step == 11
        and slot.beat.step_s is not None
        and slot.beat.step_s >= 0
        and slot.beat.step_since >= since
    )
    assert beat.path.parent == slot_dir and "77-2-nodeA" in beat.path.name
    other_run = RankHeartbeat(where(tmp_path / "other", rank=5, local_rank=1))
    assert other_run.path != beat.path  # two runs on one host never share slots
    slots.stack_file(beat.path, 5).write_text("stacks")
    slots.remove_node_files(tmp_path, "77", 2, "nodeA")
    assert not beat.path.exists() and not slots.stack_file(beat.path, 5).exists()
    assert other_run.path.exists()


def test_a_rank_that_leaves_frees_its_slot(slot_dir: Path, tmp_path: Path) -> None:
    """A parameter-server worker that finished before the others is no longer in its node's file."""
    first = RankHeartbeat(where(tmp_path, rank=0, local_rank=0))
    second = RankHeartbeat(where(tmp_path, rank=1, local_rank=1))
    second.leave()
    assert [slot.rank for slot in slots.read_slot_file(first.path)] == [0]


def test_one_writer_per_node_and_takeover_when_it_stops(slot_dir: Path, tmp_path: Path) -> None:
    """Two ranks of a node: the first to tick writes the node file; when its lease goes stale (a
    STOPped writer stops ticking) the other takes over, under the flock."""
    first = RankHeartbeat(where(tmp_path, rank=0, local_rank=0))
    second = RankHeartbeat(where(tmp_path, rank=1, local_rank=1))
    run = RunDir(tmp_path)
    now = time.time()
    first.tick(now)
    second.tick(now)
    assert HEADER.unpack_from(first._map, 0)[2] == os.getpid()  # one process here: pid alone can't tell
    written = run.read_heartbeats()
    assert len(written) == 1 and isinstance(written[0], Heartbeat)
    node = written[0]
    assert (node.node, node.attempt, node.step_id, sorted(node.ranks)) == ("nodeA", 2, "0", [0, 1])
    # The writer's lease is stale: a tick of the other rank (another pid) takes it over.
    HEADER.pack_into(first._map, 0, MAGIC, 1, 999_999_999, now - LEASE_S - 1)
    second._pid = 12345
    second.tick(now + 5)
    assert HEADER.unpack_from(first._map, 0)[2] == 12345
    assert run.read_heartbeats()[0].time == pytest.approx(now + 5)
    # A fresh lease held by someone else is left alone.
    first._pid = 54321
    first._last_write = 0.0
    first.tick(now + 5 + LEASE_S / 2)
    assert HEADER.unpack_from(first._map, 0)[2] == 12345


def test_start_registers_faulthandler_on_a_signal_that_is_not_the_preemption_signal(
    slot_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert slots.stack_signal("USR1") == signal.SIGUSR2
    assert slots.stack_signal("SIGUSR2") == signal.SIGUSR1
    assert slots.stack_signal("TERM") == signal.SIGUSR2
    monkeypatch.setenv("HPCTRAIN_ATTEMPT", "3")
    started = heartbeat.start(tmp_path, 0, 0, "nodeB", "88", 1.0, "USR1")
    try:
        assert started is not None and started.where.attempt == 3
        heartbeat.mark("eval", 4)
        (slot,) = slots.read_slot_file(started.path)
        assert (slot.beat.phase, slot.beat.step) == ("eval", 4)
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.2)
        text = slots.stack_file(started.path, 0).read_text()
        assert "test_heartbeat.py" in text
        heartbeat.finish()
        assert not started.path.exists() and heartbeat._current is None
        heartbeat.mark("data", 5)  # a no-op once finished
    finally:
        if started is not None:
            started.stop()
            heartbeat.faulthandler.unregister(signal.SIGUSR2)
        heartbeat._current = None
    assert heartbeat.start(tmp_path, 0, 10_000, "nodeB", "88", 1.0, "USR1") is None


def test_heartbeat_module_imports_no_torch() -> None:
    """A rank starts its heartbeat before it imports torch: start-up is a phase the watchdog times."""
    import subprocess

    code = "import sys, hpctrain.runtime.heartbeat; "
    code += "print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


# Marks rank 0's slot as fast as it can (the step and its start stay fixed) until it is killed.
MARKER = """
import sys, time
from pathlib import Path
from hpctrain.runtime.heartbeat import RankHeartbeat, Where
where = Where(Path(sys.argv[1]), "77", 2, "nodeA", 0, 0, "0", 3600.0)
beat = RankHeartbeat(where)
beat.mark("forward", 7)
print("marking", flush=True)
while True:
    beat.mark("forward")
    beat.mark("backward")
    beat.tick(time.time())
"""


def test_a_slot_read_while_its_rank_marks_it_is_never_torn(slot_dir: Path, tmp_path: Path) -> None:
    """The node's writer and the watchdog read slots that their ranks write at that very moment:
    every read sees whole fields (struct's pack_into zero-fills first: a read then saw a step begun
    at time 0, and the watchdog named a healthy rank hung)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    marker = subprocess.Popen(
        [sys.executable, "-c", MARKER, str(tmp_path)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert marker.stdout is not None and marker.stdout.readline() == "marking\n"
        path = slots.slot_path(tmp_path, "77", 2, "nodeA")
        with path.open("r+b") as handle, mmap.mmap(handle.fileno(), FILE_SIZE) as shared:
            torn, reads = [], 0
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                slot = decode_slot(shared, 0)
                reads += 1
                if slot is None or slot.beat.step != 7 or not slot.beat.step_since or not slot.beat.time:
                    torn.append(slot)
                header = HEADER.unpack_from(shared, 0)
                if header[0] != MAGIC or not header[3]:
                    torn.append(header)
        assert reads > 1000 and not torn, f"{len(torn)} of {reads} reads torn, e.g. {torn[:3]}"
    finally:
        marker.kill()
        marker.wait()


@given(data=st.binary(max_size=FILE_SIZE + 100), now=FLOATS, after=st.floats(0, 1e6))
def test_silent_ranks_reads_the_ticks_as_the_full_decoding_does(
    data: bytes, now: float, after: float
) -> None:
    expected = {slot.rank for slot in decode_slots(data) if now - slot.beat.time >= after}
    assert slots.silent_ranks(data, now, after) == expected


def test_the_writer_writes_at_once_when_a_rank_of_its_node_stops_ticking(
    slot_dir: Path, tmp_path: Path
) -> None:
    """With stopped_after, a rank newly without a tick that long has the node's file written at the
    next tick, not at the next interval (an hour here); once, not at every tick after."""
    for stopped_after, rewritten in ((1.5, True), (None, False)):
        run_dir = tmp_path / str(stopped_after)
        writer = RankHeartbeat(
            dataclasses.replace(where(run_dir, 0, 0, interval=3600.0), stopped_after=stopped_after)
        )
        other = RankHeartbeat(where(run_dir, 1, 1, interval=3600.0))
        now = time.time()
        writer.tick(now)  # the first write
        slots.put(other._map, other._offset + ALIVE_AT, ALIVE, now - 2.0)  # rank 1 stopped 2 s ago
        writer.tick(now + 0.25)
        written = RunDir(run_dir).read_heartbeats()[0]
        assert isinstance(written, Heartbeat)
        assert (abs(written.time - (now + 0.25)) < 1e-3) is rewritten, stopped_after
        writer.tick(now + 0.5)  # the same silent rank: no further write before the interval
        assert RunDir(run_dir).read_heartbeats()[0].time == written.time  # type: ignore[union-attr]


def test_a_step_written_by_another_process_is_seen_as_such(slot_dir: Path, tmp_path: Path) -> None:
    """A command's child that reports through hpctrain.client writes its steps into the wrapper's slot:
    the wrapper sees that and stops marking its own made-up steps over them."""
    beat = RankHeartbeat(where(tmp_path, rank=2, local_rank=1))
    beat.mark("running", 4)
    assert not beat.stepped_by_another()
    offset = HEADER_SIZE + 1 * SLOT_SIZE + PROGRESS_AT
    now = time.time()
    slots.put(beat._map, offset, PROGRESS, PHASE_CODE["running"], 117, now, now, 0.5)
    assert beat.stepped_by_another()
    beat.leave()
