"""What `hpctrain status` says about hangs and silent nodes (torch-free, total over hostile files).

Two signs, both from the run directory alone:

* ``failures/hang.json``: the watchdog's diagnosis (hpctrain.supervisor.watchdog.summary) -> "HUNG:
  rank 2 on node2 hung at step 130 (backward; not responding for 33 s), others waiting in the
  gradient all-reduce; stacks: <run>/failures/stacks", or "... hung during start-up (...)" for a
  rank that had not finished its first step;
* for a RUNNING job, a node whose heartbeat file has not been rewritten for ~20 s ->
  "not progressing: no heartbeat from node2 for 35 s". The ranks' writer rewrites it every
  ``watchdog.heartbeat_interval``, so this shows within 30 s of a node loss, long before Slurm
  marks the node DOWN.
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from hpctrain.errors import printable
from hpctrain.rundir import HangReport, Heartbeat, RunDir, Unreadable, read_json

SILENT_AFTER_S = 20.0
"""A node file older than this (or than 3 of its own intervals, if longer) is silent."""
SHOWN_NODES = 8
RUNNING = "RUNNING"


class Health(msgspec.Struct, omit_defaults=True):
    """The watchdog's part of `status --json`."""

    hung: str | None = None
    stacks: str | None = None
    silent_nodes: dict[str, float] = {}
    """Node -> seconds since its last heartbeat (RUNNING jobs only)."""
    unreadable: list[str] = []


def silent_nodes(beats: list[Heartbeat], now: float) -> dict[str, float]:
    """Nodes of the newest attempt whose heartbeat is overdue, with its age in seconds."""
    newest = max((b.attempt or 0 for b in beats), default=0)
    found: dict[str, float] = {}
    for beat in beats:
        if (beat.attempt or 0) != newest:
            continue  # a past attempt's node (one excluded since, say) is no news
        limit = max(SILENT_AFTER_S, 3 * (beat.interval or 0.0))
        age = now - beat.time
        if age > limit:
            found[printable(beat.node)] = round(age, 1)
    return found


def health(run_dir: Path | str, state: str, now: float | None = None) -> Health:
    """Read hang.json (any state) and, for a RUNNING job, the node heartbeats."""
    run = RunDir(run_dir)
    now = time.time() if now is None else now
    result = Health()
    report = read_json(run.hang_report, HangReport, below=run.top)
    if isinstance(report, HangReport):
        result.hung = printable(report.summary)
        result.stacks = printable(report.stacks or str(run.stacks))
    elif isinstance(report, Unreadable):
        result.unreadable.append(printable(str(report)))
    if state == RUNNING:
        beats = run.read_heartbeats()
        result.silent_nodes = silent_nodes([b for b in beats if isinstance(b, Heartbeat)], now)
        result.unreadable += [printable(str(b)) for b in beats if isinstance(b, Unreadable)][:SHOWN_NODES]
    return result


def lines(run_dir: Path | str, state: str, now: float | None = None) -> list[str]:
    """The status lines of a run directory read now (see `describe`)."""
    return describe(health(run_dir, state, now))


def describe(found: Health) -> list[str]:
    """The status lines: HUNG with the stacks' folder, not progressing with the silent nodes."""
    out = []
    if found.hung is not None:
        out.append(f"HUNG: {found.hung}; stacks: {found.stacks}")
    if found.silent_nodes:
        ordered = sorted(found.silent_nodes.items(), key=lambda item: -item[1])
        shown = ", ".join(f"{node} for {age:.0f} s" for node, age in ordered[:SHOWN_NODES])
        more = f" and {len(ordered) - SHOWN_NODES} more nodes" if len(ordered) > SHOWN_NODES else ""
        out.append(f"not progressing: no heartbeat from {shown}{more}")
    out += found.unreadable
    return out


def as_json(run_dir: Path | str, state: str, now: float | None = None) -> dict[str, object]:
    return msgspec.to_builtins(health(run_dir, state, now))
