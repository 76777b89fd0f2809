"""The Python stacks of every rank of one node, and what a stack says a rank waits in (torch-free).

py-spy reads a process's memory from outside, so it works on a rank that answers nothing (a
STOPped process, one stuck in C); faulthandler prints from inside, on a signal, for ranks that
still run. Both go into ``failures/stacks/rank-N.txt``. This runs on the rank's own node: the
watchdog calls it directly for its node and through ``srun --overlap`` for the others
(``python -m hpctrain.supervisor.watchdog --collect-node NODE``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hpctrain.rundir import RANK_STACKS, RunDir, list_names, numbered
from hpctrain.rundir.slots import SILENT_AFTER_S, Slot, read_slot_file, slot_path, stack_file

PY_SPY_TIMEOUT_S = 20.0
FAULTHANDLER_WAIT_S = 2.0
MAX_STACK_BYTES = 256 << 10
PARALLEL_DUMPS = 8

# Innermost frame first: the first frame that names a collective says what a rank waits in.
_COLLECTIVES = (
    ("all_reduce", "all-reduce"),
    ("barrier", "barrier"),
    ("broadcast", "broadcast"),
    ("all_gather", "all-gather"),
    ("gather", "gather"),
    ("reduce_scatter", "reduce-scatter"),
    ("all_to_all", "all-to-all"),
    ("send", "send"),
    ("recv", "recv"),
)
_PY_SPY_FRAME = re.compile(r"^\s+(\S+) \(([^:()]*)(?::\d+)?\)\s*$")
_FAULTHANDLER_FRAME = re.compile(r'^\s+File "([^"]*)", line \d+ in (\S+)\s*$')


def py_spy_path() -> str | None:
    """py-spy on PATH, or beside this Python (a virtual environment not on PATH)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else None


def main_thread_frames(text: str) -> list[tuple[str, str]]:
    """(function, file) of the main thread, innermost first, from py-spy's dump; without one,
    every frame faulthandler printed (it does not name threads)."""
    frames: list[tuple[str, str]] = []
    in_main = False
    for line in text.splitlines():
        if line.startswith("Thread "):
            in_main = '"MainThread"' in line
        elif in_main and (match := _PY_SPY_FRAME.match(line)):
            frames.append((match.group(1), match.group(2)))
    if frames:
        return frames
    return [(m.group(2), m.group(1)) for line in text.splitlines() if (m := _FAULTHANDLER_FRAME.match(line))]


def waiting_in(text: str) -> str:
    """What a rank's stack shows it blocked in ("all-reduce", "backward (gradient all-reduce)"...),
    or "" when no frame names a collective."""
    for function, path in main_thread_frames(text):
        if path.endswith("runtime/signals.py") and function in ("poll", "drain"):
            return "all-reduce (preemption agreement)"
        if function in ("_engine_run_backward", "run_backward"):
            return "backward (gradient all-reduce)"
        if "distributed" in path:
            for prefix, name in _COLLECTIVES:
                if function.startswith(prefix):
                    return name
    return ""


def py_spy_dump(pid: int, running: bool = True) -> str:
    """py-spy's view of a process. A stopped one is read without suspending it (--nonblocking):
    py-spy's ptrace suspend fails on a process in a group stop."""
    tool = py_spy_path()
    if tool is None:
        return "py-spy is not installed (pip install py-spy): no stack from outside the process\n"
    try:
        proc = subprocess.run(
            [tool, "dump", "--pid", str(pid), *([] if running else ["--nonblocking"])],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=PY_SPY_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"py-spy dump --pid {pid}: no answer within {PY_SPY_TIMEOUT_S:.0f} s\n"
    except OSError as error:
        return f"py-spy dump --pid {pid}: {error}\n"
    if proc.returncode != 0 and running:  # stopped since it last ticked: read it as a stopped one
        return py_spy_dump(pid, running=False)
    return (proc.stdout + proc.stderr)[:MAX_STACK_BYTES]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(MAX_STACK_BYTES).decode("utf-8", "replace")
    except OSError as error:
        return f"({error})"


def read_text(path: Path) -> str:
    return _read_from(path, 0)


def dumped(run: RunDir) -> list[int]:
    """The ranks with a file in failures/stacks/."""
    return [rank for rank, _ in numbered(list_names(run.stacks), RANK_STACKS)]


def ask_faulthandler(slots_file: Path, slot: Slot, signum: signal.Signals) -> tuple[Path, int] | None:
    """Signal a running rank to print its stacks; returns where they will appear, None if it cannot."""
    output = stack_file(slots_file, slot.rank)
    offset = _size(output)
    try:
        os.kill(slot.pid, signum)
    except OSError:
        return None
    return output, offset


def collect_node(
    run: RunDir,
    job_id: str,
    attempt: int,
    node: str,
    signum: signal.Signals,
    stopped: frozenset[int] = frozenset(),
) -> list[int]:
    """Write failures/stacks/rank-N.txt for every rank of `node` with a slot; returns their ranks.
    `stopped`: the ranks the hang rule found not running (they cannot answer faulthandler)."""
    slots_file = slot_path(run.root, job_id, attempt, node)
    slots = [s for s in read_slot_file(slots_file) if s.pid > 0]
    run.stacks.mkdir(parents=True, exist_ok=True)
    now = time.time()
    # Ask every responsive rank at once, then read py-spy's view meanwhile: one wait for all.
    asked = {
        s.rank: ask_faulthandler(slots_file, s, signum)
        for s in slots
        if now - s.beat.time < SILENT_AFTER_S and s.rank not in stopped
    }
    with ThreadPoolExecutor(max_workers=PARALLEL_DUMPS) as pool:
        found = pool.map(py_spy_dump, [s.pid for s in slots], [s.rank in asked for s in slots])
        dumps = dict(zip([s.rank for s in slots], found, strict=True))
    deadline = time.monotonic() + FAULTHANDLER_WAIT_S
    while time.monotonic() < deadline and any(a and _size(a[0]) <= a[1] for a in asked.values()):
        time.sleep(0.1)
    for slot in slots:
        header = (
            f"rank {slot.rank} pid {slot.pid} on {node}: step {slot.beat.step}, phase {slot.beat.phase}, "
            f"last sign of life {now - slot.beat.time:.1f} s ago\n"
        )
        parts = [header, "\n== py-spy dump ==\n", dumps[slot.rank]]
        where = asked.get(slot.rank)
        if slot.rank not in asked:
            parts.append("\n== faulthandler: not asked (the rank does not run: stopped or frozen) ==\n")
        elif where is None:
            parts.append("\n== faulthandler: the process is gone ==\n")
        else:
            parts += ["\n== faulthandler ==\n", _read_from(*where) or "(no answer)\n"]
        run.rank_stacks(slot.rank).write_text("".join(parts), errors="replace")
    return [s.rank for s in slots]
