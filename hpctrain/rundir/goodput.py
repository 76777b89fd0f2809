"""Where a run's wall time went: the goodput split, computed from what the run directory records.

After Google's ML-goodput split, every second from submission to the end (or to now, for a run
still going) lands in exactly one part:

- scheduling: waiting for an allocation (queued at first, or requeued);
- start-up: in an allocation with no training process ready yet (launch, imports, checkpoint
  load, up to the runtime's `start` or `resumed` event), and the exit after the last step;
- training: the steps that survive into the final model (final evaluation and export included);
- rollback: steps done and then lost, because a restart resumed from an earlier checkpoint;
- checkpoint: training blocked by checkpoint saves (`save_s` of the checkpoint events);
- detection: from a fault (or the preemption's checkpoint) to the supervisor's decision.

The parts come from attempts.jsonl (start and end lines: `allocated` dates an allocation's start,
`fault_time` a fault, both written by the supervisor), the metrics lines (start/resumed, train,
checkpoint, preempted and done events) and the submission time of record.json. Torch-free.
"""

from __future__ import annotations

import bisect
import itertools
import time
from dataclasses import dataclass, field

import msgspec

from hpctrain.rundir.attempts import CLOCK_SLACK_S, History, Outcome
from hpctrain.rundir.io import decode_line, whole_lines
from hpctrain.rundir.lines import EventLine, TrainLine
from hpctrain.rundir.run_dir import RunDir
from hpctrain.rundir.structs import AttemptLine, RunRecord

PARTS = ("scheduling", "startup", "training", "rollback", "checkpoint", "detection")
"""The parts, in the order they are shown; each is a `<part>_s` field of :class:`Parts`."""
LABELS = {
    "scheduling": "scheduling (queued, requeued)",
    "startup": "start-up",
    "training": "training (steps kept)",
    "rollback": "steps lost to rollback",
    "checkpoint": "checkpoint blocking",
    "detection": "detection (fault to decision)",
}
# A line of the metrics file belongs to the attempt whose start line came before it, by up to
# CLOCK_SLACK_S. A line written before the previous attempt's end line is that attempt's, however
# close the restart (a restart can take under a second).
# Outcomes after which the job went back to the queue: what follows until the next allocation is
# scheduling, not start-up.
REQUEUED = (Outcome.PREEMPTED, Outcome.PREFLIGHT)
# Bytes every train or event line holds (its kind tag): other lines are skipped before decoding.
TRAIN_TAG, EVENT_TAG = b'"train"', b'"event"'


class Parts(msgspec.Struct, kw_only=True):
    """Seconds of each part of the split."""

    scheduling_s: float = 0.0
    """Waiting for an allocation: from submission, and from each requeue, to the allocation's start."""
    startup_s: float = 0.0
    """In an allocation before the runtime is ready to step (launch, imports, checkpoint load), and
    the exit after the last step."""
    training_s: float = 0.0
    """Steps that survive into the final model, less checkpoint blocking."""
    rollback_s: float = 0.0
    """Steps done and then lost: a restart resumed from an earlier checkpoint."""
    checkpoint_s: float = 0.0
    """Training blocked by checkpoint saves."""
    detection_s: float = 0.0
    """From a fault (or a preemption's checkpoint) to the supervisor's decision."""

    def seconds(self, part: str) -> float:
        return float(getattr(self, f"{part}_s"))

    @property
    def total_s(self) -> float:
        return sum(self.seconds(part) for part in PARTS)


class AttemptSplit(Parts, kw_only=True):
    """One attempt's share: from the previous attempt's end (or the submission) to its own end."""

    attempt: int
    """The attempt's number (as in attempts.jsonl)."""
    outcome: str = ""
    """How it ended (as AttemptLine.outcome); empty while it runs."""


class GoodputSplit(Parts, kw_only=True):
    """A run's wall time split into its parts (`status --json` carries it, `report` shows it)."""

    wall_s: float = 0.0
    """Seconds from submission to the end of the run (to now, while it runs): the parts' sum."""
    goodput: float = 0.0
    """training_s / wall_s."""
    rolled_back_steps: int = 0
    """Steps done and then lost to restarts."""
    attempts: list[AttemptSplit] = []
    """Each attempt's share (empty for a run without attempts.jsonl: a parameter-server job)."""


@dataclass
class _Clock:
    """Walks the run's timeline once: each `advance` books the time since the last mark to parts,
    so the parts always add up to the time walked."""

    cursor: float
    parts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))

    def advance(self, until: float | None, part: str) -> None:
        if until is None or until <= self.cursor:
            return
        self.parts[part] += until - self.cursor
        self.cursor = until

    def advance_steps(self, until: float | None, blocked: float, kept: float) -> None:
        """Steps ran until `until`: `blocked` seconds of them waited for a checkpoint save, `kept`
        (0..1) of the rest survive into the final model."""
        if until is None or until <= self.cursor:
            return
        span = until - self.cursor
        saving = min(span, max(0.0, blocked))
        self.parts["checkpoint"] += saving
        self.parts["training"] += (span - saving) * kept
        self.parts["rollback"] += (span - saving) * (1.0 - kept)
        self.cursor = until

    def snapshot(self) -> dict[str, float]:
        return dict(self.parts)


@dataclass
class _Attempt:
    start: AttemptLine
    end: AttemptLine | None = None
    ready: EventLine | None = None
    """The runtime's start or resumed event: ready to step."""
    train: list[TrainLine] = field(default_factory=list)
    checkpoints: list[EventLine] = field(default_factory=list)
    finished: EventLine | None = None
    """done, preempted or failed."""


def read_metric_events(run: RunDir) -> list[TrainLine | EventLine]:
    """The train lines of rank 0 (or PS server 0) and the events of metrics.jsonl, in file order."""
    where = str(run.metrics)
    found: list[TrainLine | EventLine] = []
    for raw in whole_lines(run.metrics):
        if TRAIN_TAG not in raw and EVENT_TAG not in raw:  # most lines of a long run: not decoded
            continue
        line = decode_line(raw, where)
        # A parameter-server worker's own train lines (`worker` set) are not the run's steps.
        own_steps = isinstance(line, TrainLine) and line.worker is None
        if (isinstance(line, EventLine) or own_steps) and line.time is not None:  # type: ignore[union-attr]
            found.append(line)  # type: ignore[arg-type]
    return found


def submission_time(run: RunDir) -> float | None:
    record = run.read_record()
    return record.submitted_at if isinstance(record, RunRecord) else None


def split(run: RunDir, submitted_at: float | None = None, now: float | None = None) -> GoodputSplit | None:
    """The goodput split of a run directory; `now` for a run still going (else it ends at its last
    record). None when nothing has been recorded yet."""
    submitted = submitted_at if submitted_at is not None else submission_time(run)
    return compute(History.read(run).lines, read_metric_events(run), submitted, now)


def compute(
    attempt_lines: list[AttemptLine],
    metrics: list[TrainLine | EventLine],
    submitted_at: float | None,
    now: float | None = None,
) -> GoodputSplit | None:
    """The split from the records themselves (a pure function: the unit tests feed it directly)."""
    attempts = _attempts(attempt_lines, metrics)
    if not attempts:
        if now is None or submitted_at is None:
            return None
        waited = round(max(0.0, now - submitted_at), 3)  # still queued
        return GoodputSplit(scheduling_s=waited, wall_s=waited)
    first = attempts[0].start
    began = first.allocated if first.allocated is not None else first.time
    clock = _Clock(min(submitted_at, began) if submitted_at is not None else began)
    origin = clock.cursor
    resumes = [(a.ready.step or 0) if a.ready else None for a in attempts]
    shares: list[AttemptSplit] = []
    rolled_back = 0
    for index, attempt in enumerate(attempts):
        before = clock.snapshot()
        later = [step for step in resumes[index + 1 :] if step is not None]
        previous = attempts[index - 1] if index else None
        rolled_back += _walk(clock, attempt, previous, min(later) if later else None)
        if now is not None and index == len(attempts) - 1:
            _walk_open_tail(clock, attempt, now)
        share = AttemptSplit(
            attempt=attempt.start.attempt, outcome=attempt.end.outcome if attempt.end else ""
        )
        _fill(share, {part: clock.parts[part] - before[part] for part in PARTS})
        shares.append(share)
    result = GoodputSplit(rolled_back_steps=rolled_back, attempts=shares if attempt_lines else [])
    _fill(result, clock.parts)
    result.wall_s = round(clock.cursor - origin, 3)
    result.goodput = round(result.training_s / result.wall_s, 4) if result.wall_s > 0 else 0.0
    return result


def _fill(parts: Parts, seconds: dict[str, float]) -> None:
    for part in PARTS:
        setattr(parts, f"{part}_s", round(seconds[part], 3))


def _attempts(lines: list[AttemptLine], metrics: list[TrainLine | EventLine]) -> list[_Attempt]:
    """Each attempt with its start and end lines and the metrics lines written during it. A run
    without attempts.jsonl (a parameter-server hetjob of an older hpctrain) is one attempt that
    began with its runtime."""
    found: list[_Attempt] = []
    by_number: dict[int, _Attempt] = {}
    for line in lines:
        if line.event == "start" and line.attempt not in by_number:
            by_number[line.attempt] = _Attempt(line)
            found.append(by_number[line.attempt])
        elif line.event == "end" and line.attempt in by_number:
            by_number[line.attempt].end = line
    if not found:
        began = _runtime_start(metrics)
        if began is None:
            return []
        found = [_Attempt(AttemptLine(attempt=0, event="start", time=began, allocated=began))]
    found.sort(key=lambda a: a.start.time)
    begins = [_begins(attempt, found[index - 1] if index else None) for index, attempt in enumerate(found)]
    for line in metrics:
        when = line.time or 0.0
        owner = next(
            (a for a, begin in zip(reversed(found), reversed(begins), strict=True) if begin <= when), found[0]
        )
        if isinstance(line, TrainLine):
            owner.train.append(line)
        elif line.event in ("start", "resumed") and owner.ready is None:
            owner.ready = line
        elif line.event == "checkpoint":
            owner.checkpoints.append(line)
        elif line.event in ("done", "preempted", "failed") and owner.finished is None:
            owner.finished = line
    return found


def _begins(attempt: _Attempt, previous: _Attempt | None) -> float:
    """From when a metrics line is the attempt's: its start, less the clock slack, but never before
    the previous attempt's end."""
    begin = attempt.start.time - CLOCK_SLACK_S
    if previous is not None and previous.end is not None:
        begin = max(begin, previous.end.time)
    return begin


def _runtime_start(metrics: list[TrainLine | EventLine]) -> float | None:
    """When the runtime of a run without attempt lines began: the done event's time less its wall
    time, else its first line."""
    times = [line.time for line in metrics if line.time is not None]
    done = next(
        (e for e in metrics if isinstance(e, EventLine) and e.event == "done" and e.wall_time_s), None
    )
    if done is not None and done.time is not None and done.wall_time_s is not None:
        times.append(done.time - done.wall_time_s)
    return min(times, default=None)


def _blocked_by_interval(attempt: _Attempt) -> tuple[list[float], float]:
    """The checkpoint blocking that falls in each train line's interval, and in the attempt's tail.

    A save at step k blocks right after step k was logged: it falls in the first interval that ends
    after step k."""
    blocked = [0.0] * len(attempt.train)
    tail = 0.0
    # An attempt's steps only grow; the running maximum keeps the search right on lines that do not.
    reached = list(itertools.accumulate((line.step for line in attempt.train), max))
    for checkpoint in attempt.checkpoints:
        where = bisect.bisect_right(reached, checkpoint.step or 0)
        if where == len(reached):
            tail += checkpoint.save_s or 0.0
        else:
            blocked[where] += checkpoint.save_s or 0.0
    return blocked, tail


def _kept(low: int, high: int, keep_until: int | None) -> float:
    """The share of steps low+1..high that a later resume at `keep_until` keeps."""
    if keep_until is None or high <= low:
        return 1.0
    return min(1.0, max(0.0, (keep_until - low) / (high - low)))


def _walk(clock: _Clock, attempt: _Attempt, previous: _Attempt | None, keep_until: int | None) -> int:
    """Book one attempt, from the previous attempt's end to its own; returns the steps rolled back."""
    start, end = attempt.start, attempt.end
    requeued = previous is not None and previous.end is not None and previous.end.outcome in REQUEUED
    if previous is None or start.allocated is not None or requeued:
        clock.advance(start.allocated or start.time, "scheduling")
    clock.advance(start.time, "startup")
    if attempt.ready is None:  # ended during start-up
        if end is not None:
            clock.advance(end.fault_time or end.time, "startup")
            clock.advance(end.time, "detection")
        return 0
    clock.advance(attempt.ready.time, "startup")
    blocked, tail_blocked = _blocked_by_interval(attempt)
    step = attempt.ready.step or 0
    for line, waited in zip(attempt.train, blocked, strict=True):
        clock.advance_steps(line.time, waited, _kept(step, line.step, keep_until))
        step = max(step, line.step)
    lost = max(0, step - keep_until) if keep_until is not None else 0
    tail_kept = 1.0 if keep_until is None or keep_until > step else 0.0
    if end is None:
        if attempt.finished is not None and attempt.finished.event == "done":
            clock.advance_steps(attempt.finished.time, tail_blocked, 1.0)
        return lost
    if end.outcome == Outcome.COMPLETED:
        clock.advance_steps(attempt.finished.time if attempt.finished else None, tail_blocked, 1.0)
        clock.advance(end.time, "startup")
    elif end.outcome == Outcome.PREEMPTED:
        clock.advance_steps(attempt.finished.time if attempt.finished else None, tail_blocked, tail_kept)
        clock.advance(end.time, "detection")
    else:
        failed = attempt.finished.time if attempt.finished and attempt.finished.event == "failed" else None
        clock.advance_steps(end.fault_time or failed, tail_blocked, tail_kept)
        clock.advance(end.time, "detection")
    return lost


def _walk_open_tail(clock: _Clock, last: _Attempt, now: float) -> None:
    """A run still going: the time since its last record, by what it is doing now."""
    if last.end is not None:
        clock.advance(now, "scheduling" if last.end.outcome in REQUEUED else "startup")
    elif last.ready is None or (last.finished is not None and last.finished.event == "done"):
        clock.advance(now, "startup")
    else:
        clock.advance_steps(now, 0.0, 1.0)


def now_if_running(ended: bool) -> float | None:
    """The `now` argument of :func:`split`: the time now for a run still going."""
    return None if ended else time.time()


def table(split_: GoodputSplit) -> list[str]:
    """The split as plain-text lines (`report`, `status`'s readers and the soak benchmark print it)."""
    lines = [f"{'part':32} {'seconds':>9} {'share':>7}"]
    for part in PARTS:
        seconds = split_.seconds(part)
        share = seconds / split_.wall_s if split_.wall_s > 0 else 0.0
        lines.append(f"{LABELS[part]:32} {seconds:9.1f} {share:7.1%}")
    lines.append(f"{'wall time':32} {split_.wall_s:9.1f} {1.0 if split_.wall_s else 0.0:7.1%}")
    lines.append(f"goodput {split_.goodput:.3f}; {split_.rolled_back_steps} steps rolled back")
    return lines
