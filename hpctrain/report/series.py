"""A run's metrics read in full, as the figures need them (torch-free, matplotlib-free, never raises).

`status` reads a run directory's head and tail; a report needs every line. The lines come from
`rundir.whole_lines` (bounded chunks, at most the file's last 256 MiB, whole lines only, so a job
still running is read as a snapshot) and are decoded with the contract's own structs, in batches:
a line that does not decode is counted, never raised. Values a figure cannot draw (NaN, infinity,
a huge integer, anything beyond ±MAX_MAGNITUDE) become NaN in `columns` (drawing) or None through
`finite` (the summary).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from hpctrain import rundir
from hpctrain.rundir import (
    AttemptLine,
    EvalLine,
    EventLine,
    MemoryLine,
    MetricLine,
    RankTimesLine,
    RunDir,
    TrainLine,
    Unreadable,
)
from hpctrain.rundir.io import _DECODE_ERRORS  # the errors every total reader of the contract catches

# Lines decoded in one call (a JSON array of them): large enough to amortise the call, small
# enough that one bad line sends only this many down the slow path.
BATCH = 2048
_batch_decoder = msgspec.json.Decoder(list[MetricLine])

# A report of a thousand-worker parameter server draws the first this many workers' files.
MAX_WORKERS = 64
# attempts.jsonl: a few lines per restart; more than this is a runaway writer.
MAX_ATTEMPT_BYTES = 4 << 20
# Values beyond this magnitude are not data: no loss, time or rate comes near it, and matplotlib's
# tick locator fails on an axis that reaches 1e308 (its margins overflow to infinity).
MAX_MAGNITUDE = 1e100


def finite(value: object) -> float | None:
    """`value` as a float within ±MAX_MAGNITUDE, else None (bools, NaN, infinity, out-of-range
    values and non-numbers are not data)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return None
    return number if abs(number) <= MAX_MAGNITUDE else None


@dataclass
class Problems:
    """What could not be read: a count per file and the first reason, for the summary page."""

    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)

    def add(self, where: str, reason: str) -> None:
        self.counts[where] = self.counts.get(where, 0) + 1
        self.first.setdefault(where, reason)

    def lines(self) -> list[str]:
        return [f"{where}: {n} unreadable ({self.first[where]})" for where, n in self.counts.items()]


@dataclass
class RunSeries:
    """Every line of one run's metrics, by kind, in file order."""

    train: list[TrainLine] = field(default_factory=list)
    evals: list[EvalLine] = field(default_factory=list)
    events: list[EventLine] = field(default_factory=list)
    memory: dict[int, MemoryLine] = field(default_factory=dict)
    """The latest memory line of each rank (a restart writes them again)."""
    ranks: list[RankTimesLine] = field(default_factory=list)
    workers: dict[int, list[TrainLine]] = field(default_factory=dict)
    attempts: list[AttemptLine] = field(default_factory=list)
    lines: int = 0
    problems: Problems = field(default_factory=Problems)
    _cache: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False, compare=False)

    def cached(self, key: tuple[str, str], build: Callable[[], Any]) -> Any:
        """What `build` returns, built once per key: a figure asks for the same column of 100,000 lines
        many times."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def column(self, kind: str, name: str) -> Any:
        """`name` of every line of `kind` ("train", "evals", "events" or "ranks") as a numpy column
        (`columns.column`), built once."""
        from hpctrain.report.columns import column

        return self.cached((kind, name), lambda: column(getattr(self, kind), name))

    @property
    def start_time(self) -> float | None:
        """The earliest time of any line: wall-time axes count seconds from it."""
        firsts = [group[0].time for group in (self.train, self.evals, self.events, self.ranks) if group]
        firsts += [a.time for a in self.attempts[:1]]
        times = [t for t in (finite(value) for value in firsts) if t is not None]
        return min(times) if times else None

    @property
    def restarts(self) -> list[EventLine]:
        return [e for e in self.events if e.event == "resumed"]


def read_run(run: RunDir) -> RunSeries:
    """The metrics, the parameter-server workers' files and attempts.jsonl of one run directory."""
    series = RunSeries()
    with no_collection():
        _read_metrics(run, series)
        _read_workers(run, series)
        _read_attempts(run, series)
    return series


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """Python's cyclic garbage collector off: decoding 100,000 lines allocates millions of objects, none
    of them garbage, and the collector would walk them all again and again (half the reading time)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _read_metrics(run: RunDir, series: RunSeries) -> None:
    batch: list[bytes] = []
    for raw in rundir.whole_lines(run.metrics, below=run.top):
        if raw.strip():
            batch.append(raw)
            if len(batch) >= BATCH:
                _sort(decode_many(batch, rundir.METRICS, series.problems), series)
                batch = []
    _sort(decode_many(batch, rundir.METRICS, series.problems), series)


def _sort(lines: list[MetricLine], series: RunSeries) -> None:
    series.lines += len(lines)
    # By exact type (the decoder makes no subclasses): one dict lookup per line, not a chain of isinstance.
    kinds = {
        TrainLine: series.train,
        EvalLine: series.evals,
        EventLine: series.events,
        RankTimesLine: series.ranks,
    }
    for line in lines:
        found = kinds.get(type(line))
        if found is not None:
            found.append(line)
        elif isinstance(line, MemoryLine):
            series.memory[line.rank] = line


def decode_many(batch: list[bytes], where: str, problems: Problems) -> list[MetricLine]:
    """The lines decoded in one call as a JSON array (a tenth of the cost of one call per line); if
    that fails, or a line is not one object (it could then pass for several), one by one."""
    if not batch:
        return []
    limit = rundir.MAX_LINE_BYTES
    plain = all(raw[:1] == b"{" and raw[-1:] == b"}" and len(raw) <= limit for raw in batch)
    if plain:
        try:
            decoded = _batch_decoder.decode(b"[" + b",".join(batch) + b"]")
        except _DECODE_ERRORS:
            decoded = None
        if decoded is not None and len(decoded) == len(batch):
            return decoded
    out: list[MetricLine] = []
    for raw in batch:
        line = rundir.decode_line(raw, where)
        if isinstance(line, Unreadable):
            problems.add(where, line.reason)
        else:
            out.append(line)
    return out


def _read_workers(run: RunDir, series: RunSeries) -> None:
    folder = run.worker_metrics_dir
    named = list(rundir.numbered(rundir.list_names(folder, run.top), rundir.WORKER_METRICS_FILE))[
        :MAX_WORKERS
    ]
    for worker, name in named:
        where = f"{rundir.WORKER_METRICS}/{name}"
        raws = [raw for raw in rundir.whole_lines(folder / name, below=run.top) if raw.strip()]
        lines: list[TrainLine] = []
        for start in range(0, len(raws), BATCH):
            for line in decode_many(raws[start : start + BATCH], where, series.problems):
                if isinstance(line, TrainLine):
                    lines.append(line)
                else:
                    series.problems.add(where, f"a {type(line).__name__} where worker lines are train lines")
        if lines:
            series.workers[worker] = lines


def _read_attempts(run: RunDir, series: RunSeries) -> None:
    where = rundir.ATTEMPTS
    for raw in rundir.whole_lines(run.attempts, max_bytes=MAX_ATTEMPT_BYTES, below=run.top):
        if not raw.strip():
            continue
        if len(raw) > rundir.MAX_LINE_BYTES:
            series.problems.add(where, f"a line of {len(raw)} bytes")
            continue
        line = rundir.decode(raw, AttemptLine, where)
        if isinstance(line, Unreadable):
            series.problems.add(where, line.reason)
        else:
            series.attempts.append(line)
