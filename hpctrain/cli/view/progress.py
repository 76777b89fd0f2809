"""Progress of waited-on jobs in the terminal: a bar per job (rich) or one plain line per change.

`hpctrain status --watch` and `submit --wait` draw through :class:`ProgressView`. rich is imported
only when a bar is drawn on a terminal, never when the CLI starts (benchmarks/bench_cli.py), and
output that is not a terminal (a pipe, a log file, a test) always gets plain lines.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from hpctrain.cli.view.table import number

if TYPE_CHECKING:
    from hpctrain.tracking.poll import Progress
    from hpctrain.tracking.status import RunStatus


# A step time (and an ETA) beyond a year is a broken metrics line, not a prediction.
MAX_STEP_TIME_S = 365 * 86400.0


@dataclass(frozen=True)
class JobProgress:
    """What one bar shows: label, state, steps done of total, steps per second, seconds left."""

    label: str
    state: str
    step: int | None
    steps: int | None
    rate: float | None
    eta_s: float | None

    def text(self) -> str:
        """`12 digits-ddp RUNNING step 120/300 (40%), 35.2 steps/s, ETA 0:05`."""
        parts = [f"{self.label} {self.state}"]
        if self.step is not None:
            total = f"/{self.steps} ({self.step / self.steps:.0%})" if self.steps else ""
            parts[0] += f" step {self.step}{total}"
        if self.rate:
            parts.append(f"{number(self.rate, '.3g')} steps/s")
        if self.eta_s is not None:
            parts.append(f"ETA {duration(self.eta_s)}")
        return ", ".join(parts)


def duration(seconds: float) -> str:
    """`0:05`, `12:34`, `3:02:10`: minutes and seconds, hours once there are any."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def job_progress(label: str, state: str, progress: Progress) -> JobProgress:
    """Steps, rate and ETA from the latest train line (or the result of an ended run)."""
    train, result = progress.train, progress.result
    step = result.step if result else (train.step if train else None)
    steps = result.steps if result else (train.steps if train else None)
    step_time = train.step_time_s if train and not result else None
    if step_time is not None and not 0 < step_time < MAX_STEP_TIME_S:  # NaN, negative or absurd: no rate
        step_time = None
    rate = 1.0 / step_time if step_time else None
    eta = (steps - step) * step_time if step_time and steps and step is not None else None
    if eta is not None and not 0 <= eta < MAX_STEP_TIME_S:  # beyond a year of steps: no ETA to show
        eta = None
    return JobProgress(label, state, step, steps, rate, eta)


def rows(statuses: list[RunStatus]) -> list[JobProgress]:
    """One entry per job, and one per started element of an array job; a job that can never run says so
    in its state."""
    out = []
    for status in statuses:
        label = f"{status.job_id or '-'} {status.name}"
        state = str(status.state)
        if status.blocked is not None:  # the cause and its fix are `hpctrain status JOBID`'s line
            state += f" ({status.blocked.verdict}: `hpctrain status {status.job_id}`)"
        out.append(job_progress(label, state, status.progress))
        for element in status.elements:
            out.append(job_progress(f"{status.job_id}_{element.index}", element.state, element.progress))
    return out


def rich_available() -> bool:
    return importlib.util.find_spec("rich") is not None


class ProgressView:
    """Draws each poll: rich bars on a terminal when rich is installed, else plain changed lines."""

    def __init__(self, stream: TextIO | None = None, fancy: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        if fancy is None:
            fancy = self.stream.isatty() and rich_available()
        self.fancy = fancy
        self._shown: dict[str, tuple[str, int | None]] = {}
        self._bars: Any = None
        self._tasks: dict[str, Any] = {}

    def update(self, statuses: list[RunStatus]) -> None:
        entries = rows(statuses)
        if self.fancy:
            self._draw_bars(entries)
        else:
            self._print_changes(entries)

    def close(self) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None

    def _print_changes(self, entries: list[JobProgress]) -> None:
        """A line for each job whose state or step moved since the last poll (a log stays short)."""
        stamp = time.strftime("%H:%M:%S")
        for entry in entries:
            seen = (entry.state, entry.step)
            if self._shown.get(entry.label) != seen:
                self._shown[entry.label] = seen
                print(f"{stamp} {entry.text()}", file=self.stream)
        self.stream.flush()

    def _draw_bars(self, entries: list[JobProgress]) -> None:
        if self._bars is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            self._bars = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[detail]}"),
                console=Console(file=self.stream),
            )
            self._bars.start()
        for entry in entries:
            detail = entry.text().removeprefix(entry.label + " ")
            task = self._tasks.get(entry.label)
            if task is None:
                task = self._tasks[entry.label] = self._bars.add_task(entry.label, total=None, detail="")
            self._bars.update(task, completed=entry.step or 0, total=entry.steps or None, detail=detail)
