"""A run's metrics read in full, as the figures need them (torch-free, matplotlib-free, never raises).

`status` reads a run directory's head and tail; a report needs every line. The lines come from
`rundir.whole_lines` (bounded chunks, at most the file's last 256 MiB, whole lines only, so a job
still running is read as a snapshot) and are decoded one by one with the contract's own decoder:
a line that does not decode is counted, never raised. Values a figure cannot draw (NaN, infinity,
a negative duration) are dropped where they are read, so the plotting code sees finite numbers only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hpctrain import rundir
from hpctrain.rundir import (
    AttemptLine,
    EvalLine,
    EventLine,
    MemoryLine,
    RankTimesLine,
    RunDir,
    TrainLine,
    Unreadable,
)

# A report of a thousand-worker parameter server draws the first this many workers' files.
MAX_WORKERS = 64
# attempts.jsonl: a few lines per restart; more than this is a runaway writer.
MAX_ATTEMPT_BYTES = 4 << 20


def finite(value: object) -> float | None:
    """`value` as a finite float, else None (bools, NaN, infinity and non-numbers are not data)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return None
    return number if math.isfinite(number) else None


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
    _read_metrics(run, series)
    _read_workers(run, series)
    _read_attempts(run, series)
    return series


def _read_metrics(run: RunDir, series: RunSeries) -> None:
    where = rundir.METRICS
    for raw in rundir.whole_lines(run.metrics):
        if not raw.strip():
            continue
        series.lines += 1
        line = rundir.decode_line(raw, where)
        if isinstance(line, Unreadable):
            series.problems.add(where, line.reason)
        elif isinstance(line, TrainLine):
            series.train.append(line)
        elif isinstance(line, EvalLine):
            series.evals.append(line)
        elif isinstance(line, EventLine):
            series.events.append(line)
        elif isinstance(line, MemoryLine):
            series.memory[line.rank] = line
        elif isinstance(line, RankTimesLine):
            series.ranks.append(line)


def _read_workers(run: RunDir, series: RunSeries) -> None:
    folder = run.worker_metrics_dir
    named = list(rundir.numbered(rundir.list_names(folder), "worker-", ".jsonl"))[:MAX_WORKERS]
    for worker, name in named:
        where = f"{rundir.WORKER_METRICS}/{name}"
        lines: list[TrainLine] = []
        for raw in rundir.whole_lines(folder / name):
            if not raw.strip():
                continue
            line = rundir.decode_line(raw, where)
            if isinstance(line, TrainLine):
                lines.append(line)
            elif isinstance(line, Unreadable):
                series.problems.add(where, line.reason)
            else:
                series.problems.add(where, f"a {type(line).__name__} where worker lines are train lines")
        if lines:
            series.workers[worker] = lines


def _read_attempts(run: RunDir, series: RunSeries) -> None:
    where = rundir.ATTEMPTS
    for raw in rundir.whole_lines(run.attempts, max_bytes=MAX_ATTEMPT_BYTES):
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


@dataclass
class Points:
    """Parallel lists of x (step or seconds since the start) and y, finite values only."""

    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)

    def add(self, x: object, y: object) -> None:
        fx, fy = finite(x), finite(y)
        if fx is not None and fy is not None:
            self.x.append(fx)
            self.y.append(fy)

    def __bool__(self) -> bool:
        return bool(self.x)


def by_step(lines: list, name: str) -> Points:  # type: ignore[type-arg]
    """`name` of each line against its step."""
    points = Points()
    for line in lines:
        points.add(line.step, getattr(line, name, None))
    return points


def by_time(lines: list, name: str, start: float | None) -> Points:  # type: ignore[type-arg]
    """`name` of each line against seconds since `start` (lines without a time are left out)."""
    points = Points()
    if start is None:
        return points
    for line in lines:
        moment = finite(line.time)
        if moment is not None:
            points.add(moment - start, getattr(line, name, None))  # a hostile time overflows: dropped
    return points


def segments(lines: list) -> list[tuple[int, int]]:  # type: ignore[type-arg]
    """Index ranges [first, end) of `lines` (train or eval) between restarts: a resumed run goes back to
    its checkpoint's step, and a curve drawn through that jump would fold back on itself."""
    bounds: list[tuple[int, int]] = []
    first = 0
    for i in range(1, len(lines)):
        before, now = finite(lines[i - 1].step), finite(lines[i].step)
        if before is not None and now is not None and now <= before:
            bounds.append((first, i))
            first = i
    if lines:
        bounds.append((first, len(lines)))
    return bounds
