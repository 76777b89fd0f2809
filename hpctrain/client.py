"""What a user's own training script may call: `from hpctrain import client` (standard library only).

Inside an hpctrain job (HPCTRAIN_RUN_DIR is set) the calls report to the run directory; anywhere else
(plain torchrun, a laptop) each is a no-op, so the script runs unchanged:

- ``client.step(n, **metrics)``: step `n` is done. Rank 0 writes a train line into metrics.jsonl (the
  runtime's format: `loss`, `lr`, `tokens_per_s`... fill its fields, other numbers its `metrics`; the
  seconds per step come from the time between calls), so `status`, `report`, TensorBoard and a sweep's
  objective read it. Every rank writes the step into its node's heartbeat slot, where the watchdog
  finds a rank whose step stops advancing (the command wrapper made the slot).
- ``client.checkpoint_saved(path, seconds=None)``: rank 0 records a checkpoint event at the last step
  (with the seconds the save blocked training, for the goodput split).
- ``client.should_stop()``: true once preemption has come: the job's preemption signal reached this
  process, or the supervisor's preempt flag is in the run directory. Save and exit then; the job requeues.

Importing it inside a job makes the preemption signal (the spec's `preemption.signal`, USR1 by
default) set `should_stop()` instead of ending the process, unless the script handles that signal
itself. The file names and the slot layout are hpctrain.rundir's (names.py and slots.py, loaded by
path: the rundir package itself needs msgspec).
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import sys
import threading
import time
from types import ModuleType
from typing import Any

__all__ = ["checkpoint_saved", "should_stop", "step"]

TRAIN_FIELDS = frozenset(
    {
        "steps",
        "loss",
        "lr",
        "samples_per_s",
        "step_time_s",
        "peak_mem_mb",
        "tokens_per_s",
        "mfu",
        "data_share",
    }
)
"""Keywords of `step` that fill a train line's own fields; others go to its `metrics`. The same set as
rundir.log_progress.TRAIN_FIELDS (which needs msgspec, so it cannot be imported here; a test keeps
the two equal)."""
ALIASES = {"learning_rate": "lr"}


_loaded: dict[str, ModuleType] = {}


def _load(name: str) -> ModuleType:
    """hpctrain/rundir/NAME.py as a module of its own, without the rundir package (which imports msgspec)."""
    import importlib.util

    if name in _loaded:
        return _loaded[name]

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rundir", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"hpctrain._client_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # where dataclasses look their module up
    spec.loader.exec_module(module)
    _loaded[name] = module
    return module


class _Job:
    """This process's place in the job, found once, on the first call inside one."""

    def __init__(self, run_dir: str) -> None:
        self.names = _load("names")
        self.slots = _load("slots")
        self.run_dir = run_dir
        self.rank = _int_env("RANK", "SLURM_PROCID")
        self.local_rank = _int_env("LOCAL_RANK", "SLURM_LOCALID")
        self.last: tuple[int, float] | None = None  # the last step and when it was reported
        self.started = False
        self.lock = threading.Lock()

    def path(self, name: str) -> str:
        return os.path.join(self.run_dir, name)

    def append(self, line: dict[str, Any]) -> None:
        """One metrics line in one write (readers tailing the file see whole lines)."""
        data = (json.dumps(line, allow_nan=False, separators=(",", ":")) + "\n").encode()
        fd = os.open(
            self.path(self.names.METRICS), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600
        )
        try:
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)

    def beat(self, step: int, now: float, step_s: float | None) -> None:
        """Write the step into this rank's heartbeat slot, if the job's wrapper made the slot file."""
        slots = self.slots
        if not 0 <= self.local_rank < slots.MAX_SLOTS:
            return
        node = os.environ.get("SLURMD_NODENAME", "") or socket.gethostname()
        path = slots.slot_path(
            self.run_dir, os.environ.get("SLURM_JOB_ID", ""), slots.current_attempt(), node
        )
        if not os.path.exists(path):
            return
        fd, buffer = slots.open_slot_file(path)
        try:
            offset = slots.HEADER_SIZE + self.local_rank * slots.SLOT_SIZE + slots.PROGRESS_AT
            code = slots.PHASE_CODE["running"]
            slots.put(
                buffer, offset, slots.PROGRESS, code, step, now, now, -1.0 if step_s is None else step_s
            )
        finally:
            buffer.close()
            os.close(fd)


def _int_env(*names: str) -> int:
    for name in names:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


_job: _Job | None = None
_stop = threading.Event()


def _in_job() -> _Job | None:
    """The job this process runs in, or None outside hpctrain (then every call is a no-op)."""
    global _job
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    if not run_dir:
        return None
    if _job is None or _job.run_dir != run_dir:
        _job = _Job(run_dir)
    return _job


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(value)  # a 0-d tensor or a numpy number
        except (TypeError, ValueError):
            return None
    value = float(value)
    return value if math.isfinite(value) else None


def step(n: int, **metrics: object) -> None:
    """Step `n` is done (steps counted from 1, as the runtime's train lines count them)."""
    job = _in_job()
    if job is None:
        return
    now = time.time()
    with job.lock:
        n = int(n)
        last = job.last
        step_s = (now - last[1]) if last is not None and n > last[0] else None
        job.last = (n, now)
        try:
            job.beat(n, now, step_s)
        except OSError:
            pass  # no slot to write: the watchdog goes by the output and CPU time
        if job.rank != 0:
            return
        line: dict[str, Any] = {"kind": "train", "time": round(now, 3), "step": n}
        extra: dict[str, float] = {}
        for name, value in metrics.items():
            number = _number(value)
            field = ALIASES.get(name, name)
            if number is None:
                continue
            if field == "steps":  # the total, for the ETA: a whole number
                if number >= 1:
                    line["steps"] = int(number)
            elif field in TRAIN_FIELDS:
                line[field] = number
            else:
                extra[name] = number
        if "step_time_s" not in line and last is not None and n > last[0]:
            line["step_time_s"] = round((now - last[1]) / (n - last[0]), 6)
        if extra:
            line["metrics"] = extra
        try:
            if not job.started:  # ready to step: where the goodput split ends this attempt's start-up
                job.append({"kind": "event", "time": round(now, 3), "event": "start", "step": max(n - 1, 0)})
                job.started = True
            job.append(line)
        except OSError:
            pass  # a full disk must not end the training


def checkpoint_saved(path: str | os.PathLike[str], seconds: float | None = None) -> None:
    """A checkpoint was saved at `path` after the last step; `seconds`: how long it blocked training."""
    job = _in_job()
    if job is None or job.rank != 0:
        return
    line: dict[str, Any] = {"kind": "event", "time": round(time.time(), 3), "event": "checkpoint"}
    line["path"] = os.fspath(path)
    if job.last is not None:
        line["step"] = job.last[0]
    blocked = _number(seconds) if seconds is not None else None
    if blocked is not None and blocked >= 0:
        line["save_s"] = blocked
    try:
        job.append(line)
    except OSError:
        pass


def should_stop() -> bool:
    """Whether preemption has come (the signal, or the preempt flag in the run directory): save a
    checkpoint and exit. Always false outside hpctrain."""
    job = _in_job()
    if job is None:
        return False
    return _stop.is_set() or os.path.exists(job.path(job.names.PREEMPT_FLAG))


def _preemption_signal(run_dir: str) -> signal.Signals:
    """The spec's preemption.signal (the job's, else the site's; USR1 by default), from spec.json."""
    name = os.environ.get("HPCTRAIN_PREEMPT_SIGNAL", "")
    if not name:
        try:
            with open(os.path.join(run_dir, _load("names").SPEC), "rb") as handle:
                resolved = json.load(handle)
            chosen = resolved["job"].get("preemption") or resolved["site"].get("preemption") or {}
            name = str(chosen.get("signal", ""))
        except (OSError, ValueError, KeyError, AttributeError, TypeError):
            name = ""
    name = name.upper().removeprefix("SIG") or "USR1"
    return signal.Signals[f"SIG{name}"] if f"SIG{name}" in signal.Signals.__members__ else signal.SIGUSR1


def _on_preemption(number: int, frame: object) -> None:
    _stop.set()


def _catch_preemption() -> None:
    """In a job, the preemption signal sets should_stop() instead of ending the process, unless the
    script has a handler of its own (installed before this import) or this is not the main thread."""
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    if not run_dir or threading.current_thread() is not threading.main_thread():
        return
    try:
        number = _preemption_signal(run_dir)
        if signal.getsignal(number) in (signal.SIG_DFL, None):
            signal.signal(number, _on_preemption)
    except (OSError, ValueError):
        pass


_catch_preemption()
