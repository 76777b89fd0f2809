"""Run directories and the per-user index of every submission, safe under concurrent submits."""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    job_id TEXT,
    name TEXT NOT NULL,
    site TEXT NOT NULL,
    backend TEXT NOT NULL,
    run_dir TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    state TEXT NOT NULL,
    state_at REAL NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS runs_job ON runs (job_id);
CREATE TABLE IF NOT EXISTS history (
    run_id TEXT NOT NULL,
    state TEXT NOT NULL,
    at REAL NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
"""

# Records that never reached the scheduler carry this state instead of a JobState.
SUBMIT_FAILED = "SUBMIT_FAILED"


def home() -> Path:
    """Where hpctrain keeps this user's runs: $HPCTRAIN_HOME, else ~/.hpctrain."""
    return Path(os.environ.get("HPCTRAIN_HOME") or Path.home() / ".hpctrain").expanduser().resolve()


@dataclass
class Run:
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

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Run:
        data = dict(row)
        data["run_dir"] = Path(data["run_dir"])
        return cls(**data)


class Index:
    """The sqlite index of runs; sqlite's own locking makes concurrent writers safe."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or home()
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = self.root / "index.sqlite"
        self._db: sqlite3.Connection | None = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA busy_timeout = 30000")
            # The schema is created once; later opens only read the version (start-up time matters).
            if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                db.execute("PRAGMA journal_mode = WAL")
                db.executescript(SCHEMA + f"PRAGMA user_version = {SCHEMA_VERSION};")
            self._db = db
        return self._db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def new_run_dir(self, name: str) -> tuple[str, Path]:
        """A fresh, unique run directory: runs/<date>-<time>-<name>-<random>."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for _ in range(10):
            run_id = f"{stamp}-{name}-{secrets.token_hex(3)}"
            run_dir = self.root / "runs" / run_id
            try:
                (run_dir / "logs").mkdir(parents=True, exist_ok=False)
            except FileExistsError:
                continue
            return run_id, run_dir
        raise RuntimeError("could not create a unique run directory")

    def add(self, run: Run) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    run.run_id,
                    run.job_id,
                    run.name,
                    run.site,
                    run.backend,
                    str(run.run_dir),
                    run.submitted_at,
                    run.state,
                    run.state_at,
                    run.reason,
                ),
            )
            db.execute(
                "INSERT INTO history VALUES (?,?,?,?)", (run.run_id, run.state, run.state_at, run.reason)
            )
        write_record(run)

    def update_states(self, changes: Iterable[tuple[Run, str, str]]) -> None:
        """Record new states (run, state, reason) in one transaction; history keeps every change."""
        now = time.time()
        changed: list[Run] = []
        with self.transaction() as db:
            for run, state, reason in changes:
                if state == run.state and reason == run.reason:
                    continue
                db.execute(
                    "UPDATE runs SET state=?, state_at=?, reason=? WHERE run_id=?",
                    (state, now, reason, run.run_id),
                )
                if state != run.state:
                    db.execute("INSERT INTO history VALUES (?,?,?,?)", (run.run_id, state, now, reason))
                run.state, run.state_at, run.reason = state, now, reason
                changed.append(run)
        for run in changed:
            write_record(run)

    def runs(self, limit: int | None = None) -> list[Run]:
        sql = "SELECT * FROM runs ORDER BY submitted_at DESC, rowid DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [Run.from_row(r) for r in self.db.execute(sql)]

    def find(self, keys: Iterable[str]) -> tuple[list[Run], list[str]]:
        """Runs by job id or run id (or a unique run id prefix); returns (found, unknown keys)."""
        found: list[Run] = []
        missing: list[str] = []
        for key in keys:
            rows = self.db.execute(
                "SELECT * FROM runs WHERE job_id=? OR run_id=? ORDER BY submitted_at DESC", (key, key)
            ).fetchall()
            if not rows:
                rows = self.db.execute(
                    "SELECT * FROM runs WHERE run_id LIKE ? ORDER BY submitted_at DESC",
                    (key.replace("%", "") + "%",),
                ).fetchall()
                if len(rows) > 1:
                    rows = []
            if rows:
                found.append(Run.from_row(rows[0]))
            else:
                missing.append(key)
        return found, missing

    def history(self, run_id: str) -> list[tuple[str, float, str]]:
        rows = self.db.execute("SELECT state, at, reason FROM history WHERE run_id=? ORDER BY at", (run_id,))
        return [(r["state"], r["at"], r["reason"]) for r in rows]


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
