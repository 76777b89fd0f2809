"""Run directories and the per-user index of every submission, safe under concurrent submits."""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

# Records that never reached the scheduler carry this state instead of a JobState.
SUBMIT_FAILED = "SUBMIT_FAILED"


def home() -> Path:
    """Where hpctrain keeps this user's runs: $HPCTRAIN_HOME, else ~/.hpctrain."""
    return Path(os.environ.get("HPCTRAIN_HOME") or Path.home() / ".hpctrain").expanduser().resolve()


class Run(msgspec.Struct):
    run_id: str
    job_id: str | None
    name: str
    site: str
    backend: str
    run_dir: Path
    submitted_at: float
    state: str
    state_at: float
    reason: str = ""


class Index:
    """An append-only JSON-lines index of runs, one `flock`-guarded write per change.

    Lines are `{"op": "add", ...run}` and `{"op": "state", "run_id", "state", "at", "reason"}`; the
    current state of a run is its last line, and its history is all of them. Appends under an
    exclusive lock keep concurrent submitters from interleaving; readers take a shared lock. (A
    plain file instead of sqlite: importing sqlite3 costs more than a whole submission's own work.)
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or home()
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = self.root / "index.jsonl"

    def _append(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, data)
        finally:
            os.close(fd)  # closing releases the lock

    def _read(self) -> list[dict[str, Any]]:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return []
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            with os.fdopen(os.dup(fd), "rb") as handle:
                data = handle.read()
        finally:
            os.close(fd)
        records = []
        for line in data.splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by a crash must not hide the others
        return records

    def _fold(self) -> tuple[dict[str, Run], dict[str, list[tuple[str, float, str]]]]:
        runs: dict[str, Run] = {}
        history: dict[str, list[tuple[str, float, str]]] = {}
        for record in self._read():
            op = record.pop("op", None)
            if op == "add":
                run = Run(**{**record, "run_dir": Path(record["run_dir"])})
                runs[run.run_id] = run
                history[run.run_id] = [(run.state, run.state_at, run.reason)]
            elif op == "state" and record.get("run_id") in runs:
                run = runs[record["run_id"]]
                run.state, run.state_at, run.reason = record["state"], record["at"], record["reason"]
                history[run.run_id].append((run.state, run.state_at, run.reason))
        return runs, history

    def new_run_dir(self, name: str) -> tuple[str, Path]:
        """A fresh, unique run directory: runs/<date>-<time>-<name>-<random>."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for _ in range(10):
            run_id = f"{stamp}-{name}-{os.urandom(3).hex()}"
            run_dir = self.root / "runs" / run_id
            try:
                (run_dir / "logs").mkdir(parents=True, exist_ok=False)
            except FileExistsError:
                continue
            return run_id, run_dir
        raise RuntimeError("could not create a unique run directory")

    def add(self, run: Run) -> None:
        self._append([{"op": "add", **msgspec.structs.asdict(run), "run_dir": str(run.run_dir)}])
        write_record(run)

    def update_states(self, changes: Iterable[tuple[Run, str, str]]) -> None:
        """Record new states (run, state, reason) in one append; history keeps every change."""
        now = time.time()
        records: list[dict[str, Any]] = []
        changed: list[Run] = []
        for run, state, reason in changes:
            if state == run.state and reason == run.reason:
                continue
            run.state, run.state_at, run.reason = state, now, reason
            records.append({"op": "state", "run_id": run.run_id, "state": state, "at": now, "reason": reason})
            changed.append(run)
        self._append(records)
        for run in changed:
            write_record(run)

    def runs(self, limit: int | None = None) -> list[Run]:
        runs, _ = self._fold()
        ordered = sorted(runs.values(), key=lambda r: r.submitted_at, reverse=True)
        return ordered[:limit] if limit else ordered

    def find(self, keys: Iterable[str]) -> tuple[list[Run], list[str]]:
        """Runs by job id or run id (or a unique run id prefix); returns (found, unknown keys)."""
        runs = self.runs()
        found: list[Run] = []
        missing: list[str] = []
        for key in keys:
            exact = [r for r in runs if key in (r.job_id, r.run_id)]
            prefix = [r for r in runs if r.run_id.startswith(key)]
            match = exact[:1] or (prefix if len(prefix) == 1 else [])
            if match:
                found.append(match[0])
            else:
                missing.append(key)
        return found, missing

    def history(self, run_id: str) -> list[tuple[str, float, str]]:
        _, history = self._fold()
        return history.get(run_id, [])


def write_record(run: Run) -> None:
    """record.json in the run directory: the run's own copy of what the index says."""
    data = {
        "run_id": run.run_id,
        "job_id": run.job_id,
        "name": run.name,
        "site": run.site,
        "backend": run.backend,
        "submitted_at": run.submitted_at,
        "state": run.state,
        "state_at": run.state_at,
        "reason": run.reason,
    }
    path = run.run_dir / "record.json"
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass  # the index is the source of truth; a vanished run dir must not break status
