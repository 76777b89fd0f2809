"""The watcher: one scheduler query per backend for all tracked jobs, terminal states cached in the index."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpctrain.backends import select_backend
from hpctrain.backends.base import JobInfo, JobState
from hpctrain.records import ENDED_STATES, Index, Run

TERMINAL_NAMES = ENDED_STATES


@dataclass
class RunStatus:
    run: Run
    info: JobInfo | None
    progress: dict[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return self.run.state


def refresh(index: Index, runs: list[Run]) -> list[RunStatus]:
    """Poll every non-terminal run, one query per backend, and record state changes."""
    pending: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        if run.state not in TERMINAL_NAMES and run.job_id:
            pending[run.backend].append(run)
    infos: dict[str, JobInfo] = {}
    changes: list[tuple[Run, str, str]] = []
    for backend_name, group in pending.items():
        backend = select_backend(backend_name)
        polled = backend.poll([r.job_id for r in group if r.job_id])
        for run in group:
            info = polled.get(str(run.job_id))
            if info is None:
                continue
            if info.state is JobState.UNKNOWN:
                info = _from_run_dir(run, info)
            infos[run.run_id] = info
            changes.append((run, info.state.value, info.reason))
    index.update_states(changes)
    return [RunStatus(run, infos.get(run.run_id)) for run in runs]


def _from_run_dir(run: Run, info: JobInfo) -> JobInfo:
    """Without accounting, a job that left the queue is judged by the exit code its script recorded."""
    exits = run.run_dir / "exit-codes"
    try:
        lines = exits.read_text().split()
    except OSError:
        return info
    if len(lines) >= 2 and lines[-2] == str(run.job_id):
        code = lines[-1]
        state = JobState.COMPLETED if code == "0" else JobState.FAILED
        return JobInfo(info.job_id, state, exit_code=code, source="run dir (no accounting)")
    return info


def tail_lines(path: Path, count: int, block: int = 8192) -> list[str]:
    """The last `count` lines of a file without reading all of it."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            data = b""
            while size > 0 and data.count(b"\n") <= count:
                step = min(block, size)
                size -= step
                handle.seek(size)
                data = handle.read(step) + data
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-count:]


def head_lines(path: Path, count: int) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return [line for _, line in zip(range(count), handle, strict=False)]
    except OSError:
        return []


def _records(lines: list[str]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def progress(run_dir: Path) -> dict[str, Any]:
    """Latest training numbers from the run directory: metrics.jsonl, result.json, failures/."""
    out: dict[str, Any] = {}
    result = run_dir / "result.json"
    if result.exists():
        try:
            out["result"] = json.loads(result.read_text())
        except ValueError:
            pass
    metrics = run_dir / "metrics.jsonl"
    # Memory lines come once per rank after the first step, so they are read from the head.
    for record in reversed(_records(head_lines(metrics, 64) + tail_lines(metrics, 40))):
        kind = record.get("kind")
        if kind == "memory":
            ranks = out.setdefault("memory", {"ranks": {}})["ranks"]
            ranks.setdefault(
                str(record.get("rank", 0)),
                {**record.get("rank_bytes", {}), "peak_mem_mb": record.get("peak_mem_mb")},
            )
        elif kind and kind not in out:
            out[kind] = record
    workers = run_dir / "metrics"
    if workers.is_dir():
        # Parameter-server workers each keep their own metrics file.
        for path in sorted(workers.glob("worker-*.jsonl")):
            latest = _records(tail_lines(path, 1))
            if latest:
                out.setdefault("workers", {})[path.stem.removeprefix("worker-")] = latest[-1]
    failures = sorted((run_dir / "failures").glob("*.json")) if (run_dir / "failures").is_dir() else []
    if failures:
        out["failures"] = []
        for path in failures:
            try:
                out["failures"].append(json.loads(path.read_text()))
            except ValueError:
                pass
    return out


def failed_tasks(run_dir: Path) -> list[dict[str, str]]:
    """srun's own word on which task died: `srun: error: node2: task 3: Killed` in the batch log."""
    import re

    found: dict[str, dict[str, str]] = {}
    pattern = re.compile(r"srun: error: (\S+): tasks? ([\d\-,]+): (.+)$")
    for log in sorted((run_dir / "logs").glob("batch*.log")):
        for line in tail_lines(log, 200):
            match = pattern.search(line)
            if match:
                node, tasks, what = match.groups()
                for task in _expand(tasks):
                    found.setdefault(task, {"rank": task, "node": node, "error": what.strip()})
    return list(found.values())


def _expand(ranges: str) -> list[str]:
    out: list[str] = []
    for part in ranges.split(","):
        if "-" in part:
            low, high = part.split("-", 1)
            out.extend(str(i) for i in range(int(low), int(high) + 1))
        elif part:
            out.append(part)
    return out
