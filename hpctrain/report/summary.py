"""The one-page Markdown summary of a report: key numbers, the figures, the timeline, what was unreadable."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from hpctrain.report.series import RunSeries, finite
from hpctrain.rundir import RESULT, EventLine, FailureReport, Result, Unreadable, replace_bytes
from hpctrain.rundir.goodput import LABELS, PARTS, GoodputSplit, Parts

# The split of the time by attempt lists this many attempts (the last ones).
ATTEMPT_ROWS = 20
# The timeline lists this many events (first and last halves); checkpoints are counted, not listed.
TIMELINE = 40


@dataclass
class Subject:
    """What a report is about, as the index records it."""

    title: str
    run_id: str = ""
    job_id: str = ""
    state: str = ""
    ended: bool = True
    """False for a job still pending or running: the report is a snapshot."""
    root: str = ""


@dataclass
class Page:
    """The parts of the page; `figures` are (heading, file name) in the output folder."""

    subject: Subject
    rows: list[tuple[str, str]] = field(default_factory=list)
    figures: list[tuple[str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """Figures not drawn, with why (no such data in this run)."""
    sections: list[tuple[str, list[str]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def md(text: object, limit: int = 200) -> str:
    """Text from a run directory inside Markdown: one line, no table breaks, no HTML, no code spans."""
    line = " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())
    line = line.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'")
    line = line.replace("<", "&lt;").replace(">", "&gt;").replace("[", "\\[").replace("]", "\\]")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def number(value: object, digits: int = 4) -> str:
    found = finite(value)
    return "-" if found is None else f"{found:.{digits}g}"


def run_rows(series: RunSeries, result: Result | Unreadable | None) -> list[tuple[str, str]]:
    """The key numbers: progress, losses, throughput, layout, restarts, checkpoints."""
    rows: list[tuple[str, str]] = []
    last = series.train[-1] if series.train else None
    if isinstance(result, Result):
        rows.append(("result", f"{md(result.status)} at step {result.step} of {result.steps}"))
        rows.append(("final loss", number(result.final_loss)))
        rows.append(("eval loss / accuracy", f"{number(result.eval_loss)} / {number(result.eval_accuracy)}"))
        rows.append(("samples/s (whole run)", number(result.samples_per_s)))
        rows.append(("wall time", f"{number(result.wall_time_s)} s"))
    elif last is not None:
        rows.append(("progress", f"step {last.step} of {last.steps or '?'} (no result.json yet)"))
        rows.append(("latest loss", number(last.loss)))
    if isinstance(result, Unreadable):
        rows.append((RESULT, md(result.reason)))
    for name, label, digits in MEDIANS:
        median = _median(series, name)
        if median is not None:
            rows.append((label, number(median, digits)))
    start = next((e for e in series.events if e.event in ("start", "resumed")), None)
    if start is not None and (start.layout or start.world_size):
        rows.append(
            (
                "layout",
                f"{md(start.layout or '?')}, {start.world_size or '?'} ranks, {md(start.launcher or '?')}",
            )
        )
    restarts = series.restarts
    rows.append(("restarts / requeues", f"{len(restarts)}" + _steps(" resumed at step", restarts)))
    checkpoints = [e for e in series.events if e.event == "checkpoint"]
    rows.append(("checkpoints", f"{len(checkpoints)}" + _steps(" last at step", checkpoints[-1:])))
    rows += _straggler_rows(series)
    if series.attempts:
        ends = [a for a in series.attempts if a.event == "end"]
        outcomes = ", ".join(md(a.outcome or "?", 30) for a in ends[-8:])
        rows.append(("attempts (attempts.jsonl)", f"{len({a.attempt for a in series.attempts})}: {outcomes}"))
    return rows


# Train-line fields summarised by their median: (field, row label, significant digits).
MEDIANS = (
    ("samples_per_s", "samples/s (median of the log intervals)", 4),
    ("tokens_per_s", "tokens/s (median)", 4),
    ("mfu", "MFU (median)", 3),
)


def _median(series: RunSeries, name: str) -> float | None:
    """The median of the finite values of a train-line field (the figures' cached column), or None."""
    import numpy as np

    values = series.column("train", name)
    values = values[np.isfinite(values)]
    return float(np.median(values)) if values.size else None


def _steps(prefix: str, events: list[EventLine]) -> str:
    steps = [str(e.step) for e in events[-8:] if e.step is not None]
    return f" ({prefix.strip()} {', '.join(steps)})" if steps else ""


def _straggler_rows(series: RunSeries) -> list[tuple[str, str]]:
    flagged: dict[int, int] = {}
    for line in series.ranks:
        for rank in line.stragglers[:64]:
            flagged[rank] = flagged.get(rank, 0) + 1
    if not series.ranks:
        return []
    if not flagged:
        return [("stragglers", f"none flagged in {len(series.ranks)} log intervals")]
    nodes = next((line.nodes for line in reversed(series.ranks) if line.nodes), [])
    worst = sorted(flagged.items(), key=lambda kv: -kv[1])[:5]
    text = ", ".join(
        f"rank {r}" + (f" on {md(nodes[r], 30)}" if 0 <= r < len(nodes) else "") + f" ({n} intervals)"
        for r, n in worst
    )
    return [("stragglers", f"{text}, of {len(series.ranks)} log intervals")]


def ps_rows(result: Result | Unreadable | None) -> list[tuple[str, str]]:
    if not isinstance(result, Result) or result.mode is None:
        return []
    rows = [
        (
            "parameter server",
            f"{md(result.mode)}, {result.servers or '?'} servers, {result.workers or '?'} workers",
        ),
        ("staleness mean / max", f"{number(result.staleness_mean)} / {result.staleness_max}"),
    ]
    for worker, stats in sorted((result.per_worker or {}).items())[:16]:
        rows.append(
            (
                f"worker {md(worker, 10)}",
                f"{md(stats.status, 20)}, {number(stats.samples_per_s)} samples/s, {stats.steps} steps",
            )
        )
    return rows


def timeline(series: RunSeries) -> list[str]:
    """Events other than checkpoints, as `+SECONDS s, step N: EVENT (details)` lines."""
    start = series.start_time
    chosen = [e for e in series.events if e.event != "checkpoint"]
    if len(chosen) > TIMELINE:
        skipped = len(chosen) - TIMELINE
        chosen = [
            *chosen[: TIMELINE // 2],
            EventLine(event=f"... {skipped} more events ..."),
            *chosen[-TIMELINE // 2 :],
        ]
    out = []
    for event in chosen:
        moment = finite(event.time)
        when = f"+{moment - start:.1f} s" if moment is not None and start is not None else "(no time)"
        step = f", step {event.step}" if event.step is not None else ""
        details = [md(v, 80) for v in (event.reason, event.error, event.problem) if v]
        if event.worker is not None:
            details.append(f"worker {event.worker}")
        if event.job_id:
            details.append(f"job {md(event.job_id, 20)}")
        more = f" ({'; '.join(details)})" if details else ""
        out.append(f"- {when}{step}: {md(event.event, 60)}{more}")
    return out


def goodput_row(split: GoodputSplit | None) -> list[tuple[str, str]]:
    """The key number: goodput, with the seconds it is made of."""
    if split is None or split.wall_s <= 0:
        return []
    made_of = f"{split.training_s:.0f} s of training in {split.wall_s:.0f} s"
    return [("goodput", f"{split.goodput:.3f} ({made_of})")]


def goodput_lines(split: GoodputSplit | None) -> list[str]:
    """Where the time went: each part's seconds and share of the wall time, then each attempt's."""
    if split is None or split.wall_s <= 0:
        return []

    def cells(parts: Parts) -> str:
        return " | ".join(f"{parts.seconds(part):.1f}" for part in PARTS)

    lines = ["| part | seconds | share |", "|---|---:|---:|"]
    for part in PARTS:
        seconds = split.seconds(part)
        lines.append(f"| {LABELS[part]} | {seconds:.1f} | {seconds / split.wall_s:.1%} |")
    lines += [f"| wall time | {split.wall_s:.1f} | 100% |", ""]
    lines.append(f"Goodput {split.goodput:.3f}; {split.rolled_back_steps} steps rolled back by restarts.")
    if len(split.attempts) > 1:
        shown = split.attempts[-ATTEMPT_ROWS:]
        more = len(split.attempts) - len(shown)
        lines += ["", "Each attempt's share, from the end of the one before (seconds):", ""]
        lines += [
            f"| attempt | ended | {' | '.join(LABELS[part] for part in PARTS)} |",
            "|---|---|" + "---:|" * len(PARTS),
        ]
        lines += [f"| {a.attempt} | {md(a.outcome or 'running', 20)} | {cells(a)} |" for a in shown]
        if more:
            lines += ["", f"({more} earlier attempts not listed)"]
    return lines


def failure_lines(reports: list[FailureReport | Unreadable]) -> list[str]:
    out = []
    for report in reports[:8]:
        if isinstance(report, Unreadable):
            out.append(f"- {md(report)}")
        else:
            out.append(f"- rank {report.rank} on {md(report.hostname, 40) or '?'}: {md(report.error)}")
    if len(reports) > 8:
        out.append(f"- ... and {len(reports) - 8} more")
    return out


def render(page: Page) -> str:
    subject = page.subject
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    state = md(subject.state or "unknown", 40)
    snapshot = "" if subject.ended else " (still running: this report is a snapshot)"
    lines = [f"# hpctrain report: {md(subject.title, 80)}", ""]
    ids = [
        f"run {md(subject.run_id, 80)}" if subject.run_id else "",
        f"job {md(subject.job_id, 40)}" if subject.job_id else "",
        f"state {state}{snapshot}",
    ]
    lines += [", ".join(i for i in ids if i) + f"; written {when}.", ""]
    if subject.root:
        lines += [f"Run directory: {md(subject.root, 300)}", ""]
    if page.rows:
        lines += ["| | |", "|---|---|", *(f"| {md(k, 60)} | {v} |" for k, v in page.rows), ""]
    for heading, name in page.figures:
        lines += [f"## {heading}", "", f"![{heading}]({name})", ""]
    if page.missing:
        lines += ["## Figures not drawn", "", *(f"- {m}" for m in page.missing), ""]
    for heading, body in page.sections:
        if body:
            lines += [f"## {heading}", "", *body, ""]
    if page.problems:
        lines += ["## What could not be read", "", *(f"- {md(p, 300)}" for p in page.problems), ""]
    return "\n".join(lines)


def write(page: Page, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return replace_bytes(path, render(page).encode())
